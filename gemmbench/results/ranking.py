"""Who is fastest in a cell, and who cannot be told apart from it: the one tie rule of the printed tables, the
report's winners tables and both JSON outputs.

The rule: among a cell's ranked rows (ok GEMM rows with a time that are not noisy, and a noisy one whose p80 is below
every other row's p20), the fastest is the lowest median.  Another row is tied with it when their p20-p80 ranges overlap (the samples cannot say which is faster:
attn_qkv fp8 M 1 on an H100 was SplitK 33.65 µs [33.4-34.1] against cuBLAS 34.26 [33.3-34.8], and the report's
winner flipped between runs).  A fastest row that no other row ties is the winner (`*`); when some do, the fastest
and every row tied with it are marked `≈` and none is the winner.

Ties are judged against the fastest only, never chained: with A fastest, A~B and B~C but A!~C, A and B are `≈` and
C is unmarked.  C's range lies wholly above A's, so C is slower than the fastest row by its own samples; chaining
would let a run of overlapping ranges pull an arbitrarily slower row into the tie.
"""

from __future__ import annotations

from typing import Hashable, Mapping

from gemmbench.results.metrics import missing

WINNER = "*"  # the fastest row of its cell, no other row within noise of it
TIED = "≈"  # within noise of the fastest row of its cell (the fastest itself included): no single winner


def timed(row: Mapping) -> bool:
    """An ok GEMM row with a time (a step timed beside the GEMMs, moe_align, has no FLOPs and competes with none)."""
    return row.get("status") == "ok" and not missing(row.get("flops")) and not missing(row.get("time_us_median"))


def _noisy(row: Mapping) -> bool:
    noisy = row.get("noisy")
    return not missing(noisy) and bool(noisy)


def ranked(row: Mapping) -> bool:
    """Whether a row takes part in its cell's ranking on its own: timed and not noisy (metrics.NOISY_SPREAD: its
    spread is too wide to rank it against rows close to it)."""
    return timed(row) and not _noisy(row)


def _clear(key: Hashable, cell: Mapping[Hashable, Mapping]) -> bool:
    """A noisy row ranks all the same where its p80 lies below every other timed row's p20: however wide its spread,
    its samples say it is faster than each of them."""
    others = [r for k, r in cell.items() if k != key and timed(r)]
    return bool(others) and all(_range(cell[key])[1] < _range(r)[0] for r in others)


def _range(row: Mapping) -> tuple[float, float]:
    """p20-p80 of a row; a row without percentiles (made by hand) is its median alone."""
    med = float(row["time_us_median"])
    ends = [row.get("time_us_p20"), row.get("time_us_p80")]
    lo, hi = (med if v is None or missing(v) else float(v) for v in ends)
    return lo, hi


def overlaps(a: Mapping, b: Mapping) -> bool:
    """Whether two rows' p20-p80 ranges share a point (touching ends count: neither is faster by its samples)."""
    (a_lo, a_hi), (b_lo, b_hi) = _range(a), _range(b)
    return a_lo <= b_hi and b_lo <= a_hi


def marks(cell: Mapping[Hashable, Mapping]) -> dict[Hashable, str]:
    """key -> WINNER or TIED for the rows of one cell (key -> row); rows not ranked or not tied are left out."""
    rows = {k: r for k, r in cell.items() if ranked(r) or (timed(r) and _clear(k, cell))}
    if not rows:
        return {}
    first = min(rows, key=lambda k: float(rows[k]["time_us_median"]))
    tied = [k for k, r in rows.items() if k != first and overlaps(r, rows[first])]
    if not tied:
        return {first: WINNER}
    return {k: TIED for k in (first, *tied)}
