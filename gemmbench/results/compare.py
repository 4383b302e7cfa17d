"""Baseline vs candidate: a verdict per cell from the raw timing samples, for a CI perf gate.

Cells are matched on store.CELL_KEY.  For a cell ok in both runs the change is the ratio of median times
(candidate / baseline).  A change within the threshold is `same`.  Beyond it, the two sample sets must also
differ by a two-sided Mann-Whitney U test (scipy) at ALPHA: then `slower` or `faster`, otherwise `noisy`
(a change the samples cannot support: GPU timings move 1-2% between runs on memory-bound shapes and several %
on compute-bound ones as clocks follow power).  One comparison tests hundreds of cells at once, so the p-values of
every timed cell are adjusted together (Benjamini-Hochberg, scipy's false_discovery_control) before they are held
to ALPHA: the expected share of false `slower` and `faster` verdicts among all of them is then at most ALPHA, where
unadjusted, two identical runs of a few hundred cells would show some by chance.  Status changes: ok -> wrong/error is `now-failing`, the
reverse `fixed`, failing in both `still-failing`; a cell skipped in either run is `skipped`; a cell in one run
only is `new` or `missing`.  A file holding one cell twice (a folder of runs) keeps the latest run's rows.

Two rows of a cell are timed against each other only where they measured the same thing on the same GPU: a cell
whose two sides ran different kernel configs (the `config` JSON less its provenance keys, PROVENANCE_KEYS) is
`config-changed`, never slower or faster (a re-tune, or a stored config that moved, is not a code change); a cell
whose sides ran on different physical GPUs (`gpu_uuid`) is `other-gpu` and not compared unless across_gpus
(--across-gpus): two H200s of one host differed by 5-7% on compute-bound cells (docs/GPU-FACTS.md).

Runs of `gemmbench run --repeat N` hold a cell once per process (`process` 0..N-1).  Where both sides have at least
MIN_PROCESSES processes the test is Welch's t-test on the logarithms of the per-process medians (PROCESS_TEST): the
process is the unit that repeats, so the variance between processes, which one process's samples cannot show (two
processes of one build on one H100 differed by 5-12.6% at p 3.5e-15 by Mann-Whitney on the samples), is in the test.
Welch's t, not Mann-Whitney U, on so few values: with 3 processes a side the smallest two-sided U p-value is
2/C(6,3) = 0.1, so no U test could ever reach ALPHA; logarithms because timing noise is multiplicative (a ratio).
Otherwise the samples of every process are pooled and the verdict is marked within-process only (`within_process`).

Two runs are compared only where their timings mean the same thing: one timing mode and L2 state (MUST_MATCH,
else refused unless --force) and one stack (STACK: GPU model, torch, triton, CUDA, driver; else refused unless
--allow-stack-change, and then every verdict is marked `stack_changed`: a change it reports may be the stack's).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
import pandas as pd

from gemmbench.results.md_table import md_table
from gemmbench.results.run_schema import FAILING
from gemmbench.results.shard import describe
from gemmbench.results.store import cell_key, cell_keys

ALPHA = 0.01
VERDICTS = ("slower", "now-failing", "noisy", "config-changed", "faster", "fixed", "same", "still-failing", "skipped",
            "other-gpu", "new", "missing")  # fmt: skip
FAIL_ON = {
    "slower": ("slower",),
    "failing": ("now-failing",),
    "noisy": ("noisy",),
    "missing": ("missing",),
    "config-changed": ("config-changed",),
}
NOT_COMPARED = ("new", "missing", "other-gpu")  # verdicts of cells whose two sides were not set against each other
# the keys provenance.Provenance.to_dict() puts in a row's `config` JSON beside the config's own: where it came from, not
# what ran (tests/test_compare.py holds the two lists equal)
PROVENANCE_KEYS = ("source", "borrowed", "file", "bucket", "key", "neighbours_us", "fitted_us")
# what the compiler made of a config (registry.Launch.resources: registers, spills): not what ran either
COMPILER_KEYS = ("ptxas",)
EXACT_MAX_SAMPLES = 8  # Mann-Whitney's exact p-value up to this many samples a side (SciPy's own limit for it)
MIN_PROCESSES = 3  # per side, for the between-process test: Welch's t on 2 + 2 values has 1-2 degrees of freedom
PROCESS_TEST = "Welch's t-test on log per-process medians"
# a comparison only means something between runs of one L2 state, timing mode and input values (the method) ...
MUST_MATCH = ("timing_mode", "l2_state", "inputs")
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
    p_value: Optional[float] = None  # the test's p-value, adjusted over the comparison's timed cells (FDR)
    p_raw: Optional[float] = None  # the test's own p-value, before the adjustment
    base_status: Optional[str] = None
    cand_status: Optional[str] = None
    reason: Optional[str] = None  # the candidate's reason when it fails
    stack_changed: bool = False  # the two runs differ in STACK (compared under --allow-stack-change)
    base_processes: int = 0  # processes (rows of `gemmbench run --repeat`) of the cell on each side
    cand_processes: int = 0
    within_process: Optional[bool] = None  # a timed verdict from pooled samples (too few processes); None: untimed

    @property
    def shown(self) -> str:
        """The verdict as the table and the Markdown show it: marked where the stacks differ."""
        return f"{self.verdict} {STACK_MARK}" if self.stack_changed else self.verdict


def decide(ratio: float, p: Optional[float], threshold: float) -> str:
    """ "same" within the threshold, else the p-value decides between a change and "noisy" (a nan or missing p, as
    from every value of both sides equal, cannot support a change)."""
    if abs(ratio - 1) <= threshold:
        return "same"
    if p is None or not p < ALPHA:
        return "noisy"
    return "slower" if ratio > 1 else "faster"


def _verdict(base: np.ndarray, cand: np.ndarray, threshold: float, p_value) -> tuple[str, float, Optional[float]]:
    """(verdict, ratio of medians, the test's p-value) of one cell alone (decide); every cell is tested, so that
    the comparison can adjust all its p-values together (adjust)."""
    ratio = float(np.median(cand) / np.median(base))
    p = float(p_value())
    return decide(ratio, p, threshold), ratio, p


def adjust(rows: list[Row], threshold: float) -> None:
    """The timed rows' p-values adjusted together (Benjamini-Hochberg) and their verdicts decided again on them."""
    from scipy.stats import false_discovery_control  # heavy (scipy.stats)

    timed = [r for r in rows if r.p_raw is not None and r.ratio is not None]
    if not timed:
        return
    raw = np.array([r.p_raw for r in timed], float)
    ok = ~np.isnan(raw)  # a nan p (all values equal) is no test: it stays nan, and its cell cannot be a change
    adjusted = np.full(len(timed), np.nan)
    if ok.any():
        adjusted[ok] = false_discovery_control(raw[ok], method="bh")
    for r, p in zip(timed, adjusted, strict=True):
        r.p_value = None if np.isnan(p) else float(p)
        r.verdict = decide(float(r.ratio), r.p_value, threshold)  # type: ignore[arg-type]


def verdict_for_samples(base: np.ndarray, cand: np.ndarray, threshold: float) -> tuple[str, float, Optional[float]]:
    """(verdict, ratio of medians, p-value or None) for two sample sets of one cell (Mann-Whitney U)."""
    from scipy.stats import mannwhitneyu  # heavy (scipy.stats): only when the medians differ by the threshold

    # Exact up to 8 samples a side even with ties: SciPy's "auto" takes the normal approximation on any tie, and at 5
    # samples a side (the CPU path's) that cannot go below p 0.0119 even for fully separated samples (exact: 0.0079),
    # so one tie within a side (wall timings, CUDA events' 0.5 µs steps) turned a 10^6x slowdown "noisy" in the tests
    method = "exact" if max(len(base), len(cand)) <= EXACT_MAX_SAMPLES else "asymptotic"
    return _verdict(
        base, cand, threshold, lambda: mannwhitneyu(cand, base, alternative="two-sided", method=method).pvalue
    )


def verdict_for_processes(base: list, cand: list, threshold: float) -> tuple[str, float, Optional[float]]:
    """(verdict, ratio, p-value or None) from per-process medians (each side >= MIN_PROCESSES): the ratio of the
    medians of those medians, tested by PROCESS_TEST where it passes the threshold."""
    from scipy.stats import ttest_ind  # heavy (scipy.stats), as in verdict_for_samples

    b, c = np.asarray(base, float), np.asarray(cand, float)

    def welch() -> float:
        # a side without spread (equal process medians: timings come in steps) makes scipy warn of precision loss on
        # the user's terminal; its answer there is still the right one (nan where both sides are equal, else 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return ttest_ind(np.log(c), np.log(b), equal_var=False).pvalue

    return _verdict(b, c, threshold, welch)


def kernel_config(text) -> Optional[dict]:
    """What ran, from a row's `config` JSON: the config less PROVENANCE_KEYS and COMPILER_KEYS; None where the row has none (a
    cuBLAS row) or its config is empty."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return None
    got = {k: v for k, v in json.loads(text).items() if k not in PROVENANCE_KEYS + COMPILER_KEYS}
    return got or None


def _latest(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Cell key -> its rows of the latest run that has it, one per process (the latest row of each)."""
    df = df.assign(_key=cell_keys(df), _process=df["process"].fillna(0))
    df = df.sort_values("timestamp", kind="stable")
    last_run = df.drop_duplicates("_key", keep="last").set_index("_key")["run_id"]
    df = df[df["run_id"].fillna("").to_numpy() == last_run.reindex(df["_key"]).fillna("").to_numpy()]
    df = df.drop_duplicates(["_key", "_process"], keep="last").sort_values("_process", kind="stable")
    return {k: g for k, g in df.groupby("_key", sort=False)}


def _configs(rows: pd.DataFrame) -> list[str]:
    """The kernel configs (kernel_config, as sorted JSON) that a side's processes ran, each once."""
    return sorted({json.dumps(kernel_config(t), sort_keys=True) for t in rows["config"]} - {"null"})


def config_change(base: list[str], cand: list[str]) -> str:
    """What changed, shortest first: 'config BLOCK_N 64 -> 128' where each side ran one config (the keys that
    differ), else each side's configs in full ('-' for none)."""
    if len(base) == len(cand) == 1:
        b, c = json.loads(base[0]), json.loads(cand[0])
        keys = sorted(set(b) | set(c), key=lambda k: (k not in b or k not in c, k))
        return "config " + ", ".join(f"{k} {b.get(k, '-')} -> {c.get(k, '-')}" for k in keys if b.get(k) != c.get(k))
    return f"config {' | '.join(base) or '-'} -> {' | '.join(cand) or '-'}"


def _uuids(rows: pd.DataFrame) -> set:
    return set(rows["gpu_uuid"].dropna()) - {""}


def _timed(row: Row, rb: pd.DataFrame, rc: pd.DataFrame, threshold: float, across_gpus: bool) -> None:
    """The verdict of a cell ok on both sides: other-gpu, config-changed, or timed (between processes where both
    sides have MIN_PROCESSES, else on the pooled samples, marked within-process)."""
    row.base_processes, row.cand_processes = len(rb), len(rc)  # the processes that timed it
    ub, uc = _uuids(rb), _uuids(rc)
    if ub and uc and ub != uc and not across_gpus:
        row.verdict, row.reason = (
            "other-gpu",
            f"baseline on {', '.join(sorted(ub))}, candidate on {', '.join(sorted(uc))}",
        )
        return
    sb = np.concatenate([np.asarray(s, float) for s in rb["samples_us"]])
    sc = np.concatenate([np.asarray(s, float) for s in rc["samples_us"]])
    row.base_us, row.cand_us = float(np.median(sb)), float(np.median(sc))
    cb, cc = _configs(rb), _configs(rc)
    if cb != cc:  # medians shown, never tested: a different kernel ran
        row.verdict, row.ratio = "config-changed", row.cand_us / row.base_us
        row.reason = config_change(cb, cc)
        return
    if row.base_processes >= MIN_PROCESSES and row.cand_processes >= MIN_PROCESSES:
        medians = [[float(np.median(s)) for s in side["samples_us"]] for side in (rb, rc)]
        # the µs shown are what the ratio compares (the median of the processes' medians), not the pooled samples'
        # median: those two disagreed in sign on a noisy H100 cell (21.98 -> 19.68 µs pooled, +13.6% by process)
        row.base_us, row.cand_us = (float(np.median(m)) for m in medians)
        row.verdict, row.ratio, row.p_raw = verdict_for_processes(*medians, threshold)
        row.within_process = False
    else:
        row.verdict, row.ratio, row.p_raw = verdict_for_samples(sb, sc, threshold)
        row.within_process = True


def differences(base: pd.DataFrame, cand: pd.DataFrame, columns: tuple[str, ...]) -> list[str]:
    """Each of `columns` whose values differ between the two runs, as "torch (baseline 2.11.0+cu130, candidate
    2.13.0)"; a column empty on one side ("-") differs from one that is set."""
    out = []
    for col in columns:
        a, b = sorted(set(base[col].dropna())), sorted(set(cand[col].dropna()))
        if a != b:
            out.append(f"{col} (baseline {', '.join(map(str, a)) or '-'}, candidate {', '.join(map(str, b)) or '-'})")
    return out


def check_comparable(base: pd.DataFrame, cand: pd.DataFrame, columns: tuple = MUST_MATCH) -> Optional[str]:
    """Why the two runs cannot be compared (a different timing mode, L2 state or input values: MUST_MATCH), or
    None; `columns`: those of MUST_MATCH a run can tell before it has rows."""
    found = differences(base, cand, columns)
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


def compare(base: pd.DataFrame, cand: pd.DataFrame, threshold: float = 0.05, across_gpus: bool = False) -> list[Row]:
    """A Row per cell of either run, worst verdicts first.  A cell's status is its last process's."""
    b, c = _latest(base), _latest(cand)
    rows = []
    for key in list(b) + [k for k in c if k not in b]:
        gb, gc = b.get(key), c.get(key)
        rb = gb.iloc[-1] if gb is not None else None
        rc = gc.iloc[-1] if gc is not None else None
        r = rb if rb is not None else rc
        row = Row(
            cell=describe(cell_key(r), variant=False),
            variant=r["variant"],
            base_status=rb["status"] if rb is not None else None,
            cand_status=rc["status"] if rc is not None else None,
            base_processes=0 if gb is None else len(gb),
            cand_processes=0 if gc is None else len(gc),
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
            _timed(row, gb[gb["status"] == "ok"], gc[gc["status"] == "ok"], threshold, across_gpus)
        rows.append(row)
    adjust(rows, threshold)
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


def test_note(rows: list[Row]) -> str:
    """Which test the timed verdicts used: between processes, or within-process only (and how many of each)."""
    within = sum(r.within_process is True for r in rows)
    between = sum(r.within_process is False for r in rows)
    parts = []
    if between:
        parts.append(f"{between} by {PROCESS_TEST} (>= {MIN_PROCESSES} processes a side), p < {ALPHA}")
    if within:
        parts.append(
            f"{within} within-process only (Mann-Whitney U on the samples, p < {ALPHA}; fewer than "
            f"{MIN_PROCESSES} processes a side: `gemmbench run --repeat {MIN_PROCESSES}` or more sees the variance "
            "between processes)"
        )
    return "timed verdicts: " + "; ".join(parts) if parts else "no timed verdicts"


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
        f"`{cand_name}` against `{base_name}`, threshold {threshold:.1%}: "
        + ", ".join(f"{n} {v}" for v, n in c.items()),
        "",
        test_note(rows),
        "",
    ]
    if stack_change:
        lines += [stack_note(stack_change), ""]
    changed = [r for r in rows if r.verdict not in ("same", "skipped", *NOT_COMPARED)]
    lines += _md_table(changed)
    listed = [r for r in rows if r.verdict in NOT_COMPARED]
    if listed:  # cells in one run only or on another GPU: long lists after a set or variant change, so folded away
        lines += ["", f"<details><summary>{len(listed)} cells not compared (new, missing, other-gpu)</summary>", ""]
        lines += _md_table(listed) + ["", "</details>"]
    return "\n".join(lines) + "\n"


def change_text(r: Row, width: int) -> str:
    """The table's change column: the ratio, and for a config-changed cell the configs (the reason) after it."""
    ratio = f"{r.ratio - 1:+.1%}" if r.ratio is not None else ""
    reason = (r.reason or "")[:width] if r.ratio is None or r.verdict == "config-changed" else ""
    return ", ".join(x for x in (ratio, reason) if x)


def _md_table(rows: list[Row]) -> list[str]:
    if not rows:
        return []
    head = ["verdict", "cell", "variant", "baseline µs", "candidate µs", "change", "p"]
    return md_table(
        head,
        [
            [
                r.shown,
                r.cell,
                r.variant,
                _fmt(r.base_us, ".2f"),
                _fmt(r.cand_us, ".2f"),
                change_text(r, 80),
                _fmt(r.p_value, ".2g"),
            ]
            for r in rows
        ],
        "lllrrrr",
    )


def document(rows: list[Row], threshold: float, stack_change: Optional[str] = None) -> dict:
    """The verdicts for scripts (`gemmbench.compare/1`): each row's `verdict` as it is (what --fail-on matches) with
    its `stack_changed` mark, its processes a side and `within_process` (true: tested on pooled samples only; null:
    not timed); `stack_change` says what differs where the runs were compared across stacks (null otherwise).  A
    p-value no test could give (NaN: every sample equal) is written as null by the JSON writer."""
    return {
        "schema": "gemmbench.compare/1",
        "threshold": threshold,
        "alpha": ALPHA,
        "p_adjustment": "benjamini-hochberg",
        "process_test": PROCESS_TEST,
        "min_processes": MIN_PROCESSES,
        "within_process_only": any(r.within_process for r in rows),
        "stack_change": stack_change,
        "counts": counts(rows),
        "rows": [asdict(r) for r in rows],
    }
