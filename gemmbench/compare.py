"""Baseline vs candidate: a verdict per cell from the raw timing samples, for a CI perf gate.

Cells are matched on store.CELL_KEY.  For a cell ok in both runs the change is the ratio of median times
(candidate / baseline).  A change within the threshold is `same`.  Beyond it, the two sample sets must also
differ by a two-sided Mann-Whitney U test (scipy) at ALPHA: then `slower` or `faster`, otherwise `noisy`
(a change the samples cannot support: GPU timings move 1-2% between runs on memory-bound shapes and several %
on compute-bound ones as clocks follow power).  Status changes: ok -> wrong/error is `now-failing`, the
reverse `fixed`, failing in both `still-failing`; a cell skipped in either run is `skipped`; a cell in one run
only is `new` or `missing`.  A file holding one cell twice (a folder of runs) keeps the latest row.

Two runs are compared only where their timings mean the same thing: one timing mode and L2 state (MUST_MATCH,
else refused unless --force) and one stack (STACK: GPU model, torch, triton, CUDA, driver; else refused unless
--allow-stack-change, and then every verdict is marked `stack_changed`: a change it reports may be the stack's).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
import pandas as pd

from gemmbench.shard import describe
from gemmbench.store import cell_key, cell_keys

ALPHA = 0.01
VERDICTS = ("slower", "now-failing", "noisy", "faster", "fixed", "same", "still-failing", "skipped", "new", "missing")
FAIL_ON = {"slower": ("slower",), "failing": ("now-failing",), "noisy": ("noisy",), "missing": ("missing",)}
FAILING = ("wrong", "error")
# a comparison only means something between runs of one L2 state and timing mode (the measurement's method) ...
MUST_MATCH = ("timing_mode", "l2_state")
# ... and of one stack: a driver, CUDA, compiler (triton) or torch (cuBLAS) update moves kernel times by itself
STACK = ("gpu", "torch", "triton", "cuda", "driver")
STACK_MARK = "†"  # after each verdict of a comparison across stacks, in the table and the Markdown


class CompareError(ValueError):
    """One line for the user (exit 2)."""


@dataclass
class Row:
    cell: str  # a readable name of the cell
    variant: str
    verdict: str = ""
    base_us: Optional[float] = None
    cand_us: Optional[float] = None
    ratio: Optional[float] = None  # candidate / baseline median: above 1 is slower
    p_value: Optional[float] = None
    base_status: Optional[str] = None
    cand_status: Optional[str] = None
    reason: Optional[str] = None  # the candidate's reason when it fails
    stack_changed: bool = False  # the two runs differ in STACK (compared under --allow-stack-change)

    @property
    def shown(self) -> str:
        """The verdict as the table and the Markdown show it: marked where the stacks differ."""
        return f"{self.verdict} {STACK_MARK}" if self.stack_changed else self.verdict


def verdict_for_samples(base: np.ndarray, cand: np.ndarray, threshold: float) -> tuple[str, float, Optional[float]]:
    """(verdict, ratio of medians, p-value or None) for two sample sets of one cell."""
    from scipy.stats import mannwhitneyu  # heavy (scipy.stats): only when the medians differ by the threshold

    ratio = float(np.median(cand) / np.median(base))
    if abs(ratio - 1) <= threshold:
        return "same", ratio, None
    p = float(mannwhitneyu(cand, base, alternative="two-sided").pvalue)
    if p >= ALPHA:
        return "noisy", ratio, p
    return ("slower" if ratio > 1 else "faster"), ratio, p


def _latest(df: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(_key=cell_keys(df))
    return df.sort_values("timestamp", kind="stable").drop_duplicates("_key", keep="last").set_index("_key")


def differences(base: pd.DataFrame, cand: pd.DataFrame, columns: tuple[str, ...]) -> list[str]:
    """Each of `columns` whose values differ between the two runs, as "torch (baseline 2.11.0+cu130, candidate
    2.13.0)"; a column empty on one side ("-") differs from one that is set."""
    out = []
    for col in columns:
        a, b = sorted(set(base[col].dropna())), sorted(set(cand[col].dropna()))
        if a != b:
            out.append(f"{col} (baseline {', '.join(map(str, a)) or '-'}, candidate {', '.join(map(str, b)) or '-'})")
    return out


def check_comparable(base: pd.DataFrame, cand: pd.DataFrame) -> Optional[str]:
    """Why the two runs cannot be compared (a different timing mode or L2 state: MUST_MATCH), or None."""
    found = differences(base, cand, MUST_MATCH)
    return f"the runs differ in {', '.join(found)}" if found else None


def check_stack(base: pd.DataFrame, cand: pd.DataFrame) -> Optional[str]:
    """Why the two runs' timings may differ by their stacks alone (GPU model, torch, triton, CUDA, driver: STACK),
    naming each field that differs, or None."""
    found = differences(base, cand, STACK)
    return f"the runs differ in {', '.join(found)}" if found else None


def mark_stack_change(rows: list[Row]) -> list[Row]:
    """Every verdict marked as one across stacks (--allow-stack-change)."""
    for r in rows:
        r.stack_changed = True
    return rows


def compare(base: pd.DataFrame, cand: pd.DataFrame, threshold: float = 0.05) -> list[Row]:
    """A Row per cell of either run, worst verdicts first."""
    b, c = _latest(base), _latest(cand)
    rows = []
    for key in list(b.index) + [k for k in c.index if k not in b.index]:
        rb = b.loc[key] if key in b.index else None
        rc = c.loc[key] if key in c.index else None
        r = rb if rb is not None else rc
        row = Row(
            cell=describe(cell_key(r), variant=False),
            variant=r["variant"],
            base_status=rb["status"] if rb is not None else None,
            cand_status=rc["status"] if rc is not None else None,
        )
        if rc is not None and rc["status"] != "ok":
            row.reason = rc["reason"]
        if rb is None:
            row.verdict = "new"
        elif rc is None:
            row.verdict = "missing"
        elif "skipped" in (rb["status"], rc["status"]):
            row.verdict = "skipped"
        elif rb["status"] == "ok" and rc["status"] in FAILING:
            row.verdict = "now-failing"
        elif rb["status"] in FAILING and rc["status"] == "ok":
            row.verdict = "fixed"
        elif rb["status"] in FAILING:
            row.verdict = "still-failing"
        else:
            sb, sc = np.asarray(rb["samples_us"], float), np.asarray(rc["samples_us"], float)
            row.verdict, row.ratio, row.p_value = verdict_for_samples(sb, sc, threshold)
            row.base_us, row.cand_us = float(np.median(sb)), float(np.median(sc))
        rows.append(row)
    order = {v: i for i, v in enumerate(VERDICTS)}
    return sorted(rows, key=lambda x: (order[x.verdict], -(abs((x.ratio or 1) - 1))))


def parse_fail_on(text: str) -> tuple[str, ...]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in FAIL_ON]
    if bad or not names:
        raise CompareError(f"--fail-on {text!r}: choose from {', '.join(FAIL_ON)} (comma-separated)")
    return tuple(v for n in names for v in FAIL_ON[n])


def parse_threshold(text: str) -> float:
    """'5%', '5' or '0.05' (a fraction below 1) -> 0.05."""
    t = text.strip()
    try:
        value = float(t.rstrip("%"))
    except ValueError:
        raise CompareError(f"--threshold {text!r}: give a percentage such as 5%") from None
    frac = value / 100 if t.endswith("%") or value >= 1 else value
    if not 0 < frac < 1:
        raise CompareError(f"--threshold {text!r}: must be between 0% and 100%")
    return frac


def counts(rows: list[Row]) -> dict:
    out = {v: 0 for v in VERDICTS}
    for r in rows:
        out[r.verdict] += 1
    return {v: n for v, n in out.items() if n}


def _fmt(x, spec) -> str:
    return "" if x is None else format(x, spec)


def stack_note(stack_change: Optional[str]) -> str:
    """The line that says a comparison crossed stacks (--allow-stack-change), naming what differs."""
    return (
        f"{STACK_MARK} every verdict compares two stacks: {stack_change}; a change may be the stack's, not the code's"
    )


def markdown(
    rows: list[Row], threshold: float, base_name: str, cand_name: str, failed: tuple, stack_change: Optional[str] = None
) -> str:
    """A summary for a PR comment: the verdict counts, every changed row, and (folded) the cells of one run only.
    stack_change: what check_stack() found, where the runs were compared across stacks."""
    c = counts(rows)
    bad = sum(c.get(v, 0) for v in failed)
    head = "### gemmbench perf: " + ("❌ " + f"{bad} regression(s)" if bad else "✅ no regression")
    head += f" {STACK_MARK} across a stack change" if stack_change else ""
    lines = [
        head,
        "",
        f"`{cand_name}` against `{base_name}`, threshold {threshold:.1%}, Mann-Whitney U at "
        f"p < {ALPHA}: " + ", ".join(f"{n} {v}" for v, n in c.items()),
        "",
    ]
    if stack_change:
        lines += [stack_note(stack_change), ""]
    changed = [r for r in rows if r.verdict not in ("same", "skipped", "new", "missing")]
    lines += _md_table(changed)
    listed = [r for r in rows if r.verdict in ("new", "missing")]
    if listed:  # cells in one run only: long lists after a set or variant change, so folded away
        lines += ["", f"<details><summary>{len(listed)} cells in one run only (new, missing)</summary>", ""]
        lines += _md_table(listed) + ["", "</details>"]
    return "\n".join(lines) + "\n"


def _md_table(rows: list[Row]) -> list[str]:
    if not rows:
        return []
    out = [
        "| verdict | cell | variant | baseline µs | candidate µs | change | p |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        change = f"{(r.ratio - 1):+.1%}" if r.ratio is not None else (r.reason or "")[:80].replace("|", "/")
        out.append(
            f"| {r.shown} | {r.cell} | {r.variant} | {_fmt(r.base_us, '.2f')} | {_fmt(r.cand_us, '.2f')} "
            f"| {change} | {_fmt(r.p_value, '.2g')} |"
        )
    return out


def to_json(rows: list[Row], threshold: float, stack_change: Optional[str] = None) -> str:
    """The verdicts for scripts: each row's `verdict` as it is (what --fail-on matches) with its `stack_changed`
    mark; `stack_change` says what differs where the runs were compared across stacks (null otherwise)."""
    return json.dumps(
        {
            "threshold": threshold,
            "alpha": ALPHA,
            "stack_change": stack_change,
            "counts": counts(rows),
            "rows": [asdict(r) for r in rows],
        },
        indent=1,
    )
