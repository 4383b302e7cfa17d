"""Code text says why, in a line: no dates, no issue numbers and no `#123` in the text of gemmbench/, scripts/ and
tests/.  A measured number cites docs/BENCHMARKS.md (or an anchor of docs/GPU-FACTS.md), never the day it was
measured; a synthetic row's timestamp is built (conftest.stamp), never a literal day.

Text is what a person writes: Python, shell, YAML, Markdown.  JSON (the tuner's configs, which record the day they
were tuned, and the Hugging Face and vLLM copies in tests/fixtures), CSV (Nsight Compute's exports) and Parquet
are data, not code text, and are not read."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("gemmbench", "scripts", "tests")
SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".md", ".toml", ".txt", ".cfg", ".ini"}
PATTERNS = (re.compile(r"20\d\d-\d\d-\d\d"), re.compile(r"issue \d+", re.IGNORECASE), re.compile(r"#\d+"))

# (path, exact text on its lines that the patterns may match, why): the text is blanked before the patterns look
ALLOWED = (
    ("gemmbench/kernels/cublas_block.py", "pytorch/pytorch#158037", "an upstream pull request, cited"),
    ("gemmbench/kernels/cublas_block.py", "pytorch/pytorch#166752", "an upstream pull request, cited"),
    ("gemmbench/plot/style.py", '"#7f7f7f": "#1b9e77"', "tab20's grey and its stand-in, keyed as to_hex writes them"),
    ("tests/test_shapes.py", "gemm #1", "the shape-file parser's error message numbers a gemm; asserted verbatim"),
)


def text_files() -> list[Path]:
    """Every text file of the trees but this one, which spells out what the others may not say."""
    out = []
    for tree in TREES:
        for p in sorted((ROOT / tree).rglob("*")):
            hidden = any(s.startswith((".", "__")) for s in p.relative_to(ROOT).parts[:-1])  # __pycache__, .cache
            if p.is_file() and p.suffix in SUFFIXES and not hidden and p != Path(__file__).resolve():
                out.append(p)
    return out


def offences(path: str, text: str, allowed=ALLOWED) -> tuple[list[str], set[tuple[str, str]]]:
    """`path:line: text` for every line a pattern matches once its allowed text is blanked, and the allowances
    used."""
    mine = [(p, s) for p, s, _ in allowed if p == path]
    bad, used = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        seen = line
        for entry in mine:
            if entry[1] in seen:
                used.add(entry)
                seen = seen.replace(entry[1], " ")
        if any(p.search(seen) for p in PATTERNS):
            bad.append(f"{path}:{n}: {line.strip()}")
    return bad, used


def test_no_dates_or_issue_numbers_in_code_text():
    files = text_files()
    assert ROOT / "tests/conftest.py" in files and len(files) > 100  # the scan sees the tree
    bad, used = [], set()
    for f in files:
        b, u = offences(f.relative_to(ROOT).as_posix(), f.read_text(encoding="utf-8"))
        bad += b
        used |= u
    assert not bad, (
        f"{len(bad)} lines tell a date, an issue number or a #number; say why in a line instead (a measured number "
        "cites docs/BENCHMARKS.md), or allow exact text in ALLOWED with its reason:\n" + "\n".join(bad)
    )
    unused = [f"{p}: {s!r}" for p, s, _ in ALLOWED if (p, s) not in used]
    assert not unused, "allowances that match no line any more (remove them):\n" + "\n".join(unused)


def test_the_scanner_catches_each_pattern():
    text = "\n".join(
        [
            "x = 1  # says why",
            "    # measured on 2026-11-24",
            '"""Fixed in Issue 21."""',
            "# see #12",
            "# cites org/repo#99",
            "# version 1.2.3, a colour #abc",
        ]
    )
    allowed = (("pkg/mod.py", "org/repo#99", "a citation"),)
    bad, used = offences("pkg/mod.py", text, allowed)
    assert [b.split(":")[1] for b in bad] == ["2", "3", "4"], bad
    assert bad[0] == "pkg/mod.py:2: # measured on 2026-11-24"
    assert used == {("pkg/mod.py", "org/repo#99")}
    bad, _ = offences("other.py", text, allowed)
    assert [b.split(":")[1] for b in bad] == ["2", "3", "4", "5"]  # an allowance holds for its own file only
