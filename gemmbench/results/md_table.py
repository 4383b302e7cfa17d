"""The one writer of Markdown tables (GitHub's pipe tables, which markdown-it-py's table rule reads too): the report,
the `compare --format markdown` PR comment and scripts/bench_tables.py's BENCHMARKS tables all call `md_table`.

Written by hand, not `DataFrame.to_markdown`: that needs `tabulate` as one more dependency, pads every column to its
widest cell (a whole table's lines change when one cell grows, noisy in docs diffs) and escapes nothing, so a cell
holding "|" (a config "A | B") or "*" would break its row or turn into emphasis."""

from __future__ import annotations

import re
from typing import Iterable, Sequence

# Markdown's inline syntax where data could hold it: a reason with "*", a name starting with "_", "<…>" (an autolink),
# "&lt;" (an entity), "|" (a cell break).  "_" inside a word (triton_splitk_atomic) is no emphasis in CommonMark and
# stays as it is.
_INLINE = re.compile(r"[\\`*\[\]<&|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_text(text: object) -> str:
    """Data (a name, a reason, a number) as Markdown that renders as exactly that text, on one line."""
    return _INLINE.sub(lambda m: "\\" + m.group(0), str(text).replace("\n", " "))


def md_table(head: Sequence[object], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """The table's lines: a header, its separator, one line a row, every cell through `md_text`.  `align` holds one
    letter a column, "r" for right-aligned ("---:", numbers), anything else left ("---"); columns past its end are
    left-aligned."""
    sep = ["---:" if i < len(align) and align[i] == "r" else "---" for i in range(len(head))]
    lines = ["| " + " | ".join(md_text(h) for h in head) + " |", "|" + "|".join(sep) + "|"]
    return lines + ["| " + " | ".join(md_text(c) for c in r) + " |" for r in rows]
