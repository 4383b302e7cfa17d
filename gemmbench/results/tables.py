"""The end-of-run tables: one per GEMM, every cell with its status, speedups against the baseline that the
registry declares for its dtype and kind (never from a wrong or failed result)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Optional

from rich import box
from rich.table import Table
from rich.text import Text

from gemmbench import dtypes, registry
from gemmbench.results import metrics, ranking
from gemmbench.results.metrics import NOISY_SPREAD, missing

STATUS_STYLE = {"ok": "green", "wrong": "bold red", "impossible": "bold red", "error": "bold red", "skipped": "dim"}
THROTTLED = "†"  # after the µs of a row with samples taken while the GPU throttled (throttled_samples > 0)


def baseline_for(row: dict) -> Optional[str]:
    """The variant a row's speedup is measured against: registry.baseline_for the row's dtype, kind (dense or MoE)
    and scaling, so that a Triton variant with row-wise fp8 scales is measured against cuBLAS row-wise and one
    with block scales against cuBLAS block-scaled (same scales, same work, same cell: a speedup never compares
    two scalings).  A row without a scaling (made by hand) counts as per tensor."""
    return registry.baseline_for(row["dtype"], row["E"] > 1, row.get("scaling") or dtypes.REFERENCE_SCALING)


def fp8_accum(r: dict) -> str:
    """A row's fp8 accumulation contract; a row made without one (by hand) has its dtype's reference one."""
    return r.get("fp8_accum") or dtypes.fp8_accum(r["dtype"])


def _cell(r: dict) -> tuple:
    scaling = r.get("scaling") or dtypes.REFERENCE_SCALING
    return (r["gemm"], r["M"], r["N"], r["K"], r["tp"], r.get("ep") or 1, r.get("dp") or 1, r.get("layout") or "vllm",
            r["dtype"], scaling, fp8_accum(r), r.get("routing"))  # fmt: skip


def _is_gemm(r: dict) -> bool:
    """False for a step timed beside the GEMMs (moe_align): its rows carry no FLOPs and compete with none."""
    return r.get("flops") is not None


def speedups(rows: list[dict]) -> dict[int, float]:
    """id(row) -> baseline time / row time, for ok rows whose baseline is ok in the same run."""
    base = {_cell(r) + (r["variant"],): r["time_us_median"] for r in rows if r["status"] == "ok"}
    out = {}
    for r in rows:
        b = base.get(_cell(r) + (baseline_for(r),))
        if r["status"] == "ok" and b and _is_gemm(r):
            out[id(r)] = b / r["time_us_median"]
    return out


def marks(rows: list[dict]) -> dict[int, str]:
    """id(row) -> ranking.WINNER (`*`) or ranking.TIED (`≈`) per cell (gemm, M, N, K, TP, EP, dtype, scaling, fp8
    accumulation, routing), by ranking's one tie rule; rows that are neither are left out."""
    cells: dict = defaultdict(dict)
    for r in rows:
        cells[_cell(r)][id(r)] = r
    return {k: m for cell in cells.values() for k, m in ranking.marks(cell).items()}


def winners(rows: list[dict]) -> set[int]:
    """id(row) of each cell's winner: its fastest ranked row when no other row is within noise of it (ranking).
    The starred row of the tables, `winner` in the JSON summary."""
    return {k for k, m in marks(rows).items() if m == ranking.WINNER}


# the fields of each cell of `gemmbench run --format json` (docs/USAGE.md: JSON output), in this order
SUMMARY_FIELDS = ("shape_set", "gemm", "M", "N", "K", "E", "topk", "tp", "ep", "dp", "layout", "routing", "dtype",
                  "scaling", "fp8_accum", "variant",
                  "timing_mode", "status", "reason", "max_rel_err", "time_us_median", "speedup", "baseline", "winner",
                  "tied", "noisy", "spread_pct", "roofline_note")  # fmt: skip


def summary(rows: list[dict]) -> list[dict]:
    """One dict per row, SUMMARY_FIELDS: what the tables show, for scripts.  `speedup` is against `baseline` (the
    variant baseline_for names; null unless both are ok in this run), `winner` the table's `*`, `tied` its `≈`,
    `spread_pct` its `±` column, `roofline_note` why a row is above its roofline."""
    sp, marked = speedups(rows), marks(rows)
    out = []
    for r in rows:
        cell = {k: r.get(k) for k in SUMMARY_FIELDS[: SUMMARY_FIELDS.index("time_us_median")]}
        cell["ep"] = r.get("ep") or 1  # rows written before expert parallelism
        cell["dp"], cell["layout"] = r.get("dp") or 1, r.get("layout") or "vllm"
        cell["scaling"], cell["fp8_accum"] = r.get("scaling") or dtypes.REFERENCE_SCALING, fp8_accum(r)
        cell["time_us_median"] = r.get("time_us_median") if r["status"] == "ok" else None
        cell.update(speedup=sp.get(id(r)), baseline=baseline_for(r) if _is_gemm(r) else None,
                    winner=marked.get(id(r)) == ranking.WINNER, tied=marked.get(id(r)) == ranking.TIED,
                    noisy=bool(r.get("noisy")), spread_pct=spread(r) if r["status"] == "ok" else None,
                    roofline_note=roofline_note(r) if r["status"] == "ok" else None)  # fmt: skip
        out.append(cell)
    return out


def short_config(config) -> str:
    """'16x64x256 split 8, stored' from a row's config JSON; SPLIT_K = 1 says it fell back to data-parallel; a
    swapped SplitK config, a Gluon kernel's schedule, its second accumulator ('128x128+32x64 ws') and its halves'
    TURNS where set are named.  Empty for variants without tile configs (cuBLAS)."""
    c = json.loads(config) if isinstance(config, str) else (config or {})
    if "BLOCK_M" not in c:
        return ""
    if "BLOCK_N" not in c:  # moe_align: only its block size
        return f"BLOCK_M {c['BLOCK_M']}"
    width = f"{c['BLOCK_N']}+{c['BLOCK_N2']}" if c.get("BLOCK_N2") else f"{c['BLOCK_N']}"  # a second accumulator
    text = f"{c['BLOCK_M']}x{width}x{c['BLOCK_K']}"
    if "SPLIT_K" in c:
        text += f" split {c['SPLIT_K']}" if c["SPLIT_K"] > 1 else " split 1 = data-parallel"
    text += " swap-AB" if c.get("SWAP_AB") else ""  # BLOCK_M tiles N and BLOCK_N the tokens
    text += f" {c['SCHEDULE']}" if c.get("SCHEDULE") else ""
    if c.get("TURNS") is not None:  # set: the halves' waves against their scales' default
        text += " in turns" if c["TURNS"] else " no turns"
    return text + (f", {c['source']}" if c.get("source") else "")


def spread(r: dict) -> Optional[float]:
    """metrics.spread_pct of a row, None without percentiles."""
    if None in (r.get("time_us_p20"), r.get("time_us_p80")) or not r.get("time_us_median"):
        return None
    return metrics.spread_pct(r["time_us_p20"], r["time_us_p80"], r["time_us_median"])


def roofline_note(r: dict) -> Optional[str]:
    """The row's roofline_note, or for a row written without one (an older file) the same rule from its columns."""
    if r.get("roofline_note"):
        return r["roofline_note"]
    if any(r.get(c) is None for c in ("pct_of_roofline", "flops", "bytes_min", "ceiling_bw_gbps", "ceiling_tflops")):
        return None
    return metrics.roofline_note(r["pct_of_roofline"], r["flops"], r["bytes_min"], r["ceiling_bw_gbps"],
                                 r["ceiling_tflops"])  # fmt: skip


def _fmt(x, spec: str) -> str:
    return "" if missing(x) else format(x, spec)


def throttled(r: dict) -> bool:
    """Whether some of the row's samples were taken while NVML reported a throttle reason (telemetry.REASONS)."""
    n = r.get("throttled_samples")
    return not missing(n) and n > 0  # a row without telemetry has none


def clock_range(r: dict) -> str:
    """The SM clock's median over the samples, with its min-max range where the clock moved: '1980' or
    '1755 (1500-1980)'."""
    med, lo, hi = (r.get(c) for c in ("sm_clock_mhz_median", "sm_clock_mhz_min", "sm_clock_mhz_max"))
    if missing(med):
        return ""
    return f"{med:.0f}" if missing(lo) or lo == hi else f"{med:.0f} ({lo:.0f}-{hi:.0f})"


def scaling_excluded_count(rows: list[dict]) -> int:
    """The skipped rows the tables leave out: variants that do not run the problem's fp8 scaling."""
    return sum(r["status"] == "skipped" and registry.scaling_excluded(r.get("reason")) for r in rows)


# the columns every table keeps: what names a row and its time; the others go where empty or one value (not wide)
ALWAYS_SHOWN = ("M", "dtype", "variant", "µs")


def gemm_tables(rows: list[dict], wide: bool = True) -> list[Table]:
    """One table per GEMM; skipped rows of a variant that does not run the problem's fp8 scaling are left out
    (scaling_excluded_count counts them; the file keeps them).  wide: every row and column, the legend as each
    table's caption; else (run's tables, for reading) the skipped rows are footnotes under the table, one per reason,
    the columns empty in every row (or of one value in several rows) are dropped, and the legend is the caller's to
    print once (legends)."""
    rows = [r for r in rows if not (r["status"] == "skipped" and registry.scaling_excluded(r.get("reason")))]
    sp = speedups(rows)
    marked = marks(rows)
    tables = []
    for key, rs in _by_gemm(rows).items():
        # the GPU's clocks, power and temperature (run_schema.TELEMETRY_COLUMNS): shown where NVML read them (not on a CPU)
        telemetry = any(not missing(r.get("sm_clock_mhz_median")) for r in rs)
        shown = rs if wide else [r for r in rs if r["status"] != "skipped"]
        fast_last = lambda r: fp8_accum(r) == dtypes.FAST_FP8_ACCUM  # noqa: E731 - precise, the reference, first
        order = sorted(shown, key=lambda r: (r["M"], r["dtype"], r.get("scaling") or "", fast_last(r), r["variant"]))
        body = [_cells(r, marked.get(id(r)), sp.get(id(r)), telemetry) for r in order]
        columns = list(enumerate(_columns(telemetry)))
        if not wide:
            columns = [(i, c) for i, c in columns if c[0] in ALWAYS_SHOWN or _varies([str(b[i]) for b in body])]
        caption = _caption(rs, moe=key[3] > 1, telemetry=telemetry) if wide else _footnotes(rs)
        title = _title(*key)
        t = Table(title=title, caption=caption, title_justify="left", caption_justify="left", min_width=len(title),
                  box=box.HEAVY_HEAD if wide else box.MINIMAL_HEAVY_HEAD, show_edge=wide)  # fmt: skip
        for _, (col, just) in columns:
            t.add_column(col, justify=just)
        for b in body:
            t.add_row(*(b[i] for i, _ in columns))
        tables.append(t)
    return tables


def _varies(cells: list[str]) -> bool:
    """Whether a column says anything: not empty in every row, and not one value repeated over several rows."""
    values = set(cells)
    return values != {""} and (len(values) > 1 or len(cells) == 1)


def _footnotes(rs: list[dict]) -> Optional[str]:
    """The table's skipped rows, one line per reason: the reason, then the variants and how many cells."""
    by_reason: dict[str, list[dict]] = defaultdict(list)
    for r in rs:
        if r["status"] == "skipped":
            by_reason[r.get("reason") or "no reason given"].append(r)
    lines = [f"skipped {len(sk)}: {', '.join(sorted({r['variant'] for r in sk}))}: {reason}"
             for reason, sk in by_reason.items()]  # fmt: skip
    return "\n".join(lines) or None


def legends(rows: list[dict]) -> list[str]:
    """The legend of the run's tables (what gemm_tables puts under each when wide), once: each timing, each kind's
    baseline, then the marks and columns."""
    rows = [r for r in rows if not (r["status"] == "skipped" and registry.scaling_excluded(r.get("reason")))]
    parts: dict[str, None] = {}
    for key, rs in _by_gemm(rows).items():
        telemetry = any(not missing(r.get("sm_clock_mhz_median")) for r in rs)
        for part in _caption(rs, moe=key[3] > 1, telemetry=telemetry).split("; "):
            parts[part.replace("speedup vs", "MoE speedup vs", 1) if key[3] > 1 else part] = None
    return ["; ".join(parts)] if parts else []


def _by_gemm(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The rows of each table: (gemm, N, K, E, topk, tp, ep, dp, layout, routing) -> its rows, in order of first row."""
    by_gemm = defaultdict(list)
    for r in rows:
        par = (r["tp"], r.get("ep") or 1, r.get("dp") or 1, r.get("layout") or "vllm")
        by_gemm[(r["gemm"], r["N"], r["K"], r["E"], r["topk"], *par, r.get("routing"))].append(r)
    return by_gemm


def _title(gemm, N, K, E, topk, tp, ep, dp, layout, routing) -> str:
    moe = (f", E={E} top{topk}" + (f", {routing} routing" if routing else "")) if E > 1 else ""
    par = "".join(f"  {flag}={value}" for flag, value in (("tp", tp), ("ep", ep), ("dp", dp)) if value > 1)
    return f"{gemm}  N={N} K={K}{moe}{par}" + (f"  {layout} layout" if layout != "vllm" else "")


def _caption(rs: list[dict], moe: bool, telemetry: bool) -> str:
    """How the table's rows were timed, what the speedup is against, and what its marks and columns mean."""
    first = rs[0]
    vs = (
        registry.baseline_for(first["dtype"], moe=True)
        if moe
        else "the cuBLAS GEMM of the row's dtype and scaling (fp8 row: "
        + f"{registry.baseline_for('fp8', moe=False, scaling='row')}, block: "
        + f"{registry.baseline_for('fp8', moe=False, scaling='block')})"
    )
    caption = (
        f"timing: {first.get('timing_mode')} (L2 {first.get('l2_state')}); speedup vs "
        + vs
        + (
            "; * = fastest at that M, dtype, scaling and fp8 accumulation, no other row within noise; ≈ = the"
            " fastest and the rows"
            " whose p20-p80 overlaps its own: no single winner; ± = half the p20-p80 range, % of the median;"
            " ! = above its measured roofline (status says why); config: BLOCK_MxBLOCK_NxBLOCK_K, where it came"
            " from"
        )
    )
    if telemetry:
        caption += "; SM MHz: the SM clock's median over the samples (min-max where it moved), W: median power, °C:"
        caption += " the hottest, read through NVML while the row was timed"
    if any(throttled(r) for r in rs):
        caption += f"; {THROTTLED} = samples taken while the GPU throttled its clocks (status: how many, why)"
    return caption


def _columns(telemetry: bool) -> tuple[tuple[str, str], ...]:
    """(column, justification) of a table; the telemetry columns where NVML read them."""
    return (
        ("M", "right"),
        ("dtype", "left"),
        ("variant", "left"),
        ("µs", "right"),
        ("±", "right"),
        ("TFLOPS", "right"),
        ("GB/s", "right"),
        ("% roofline", "right"),
        ("speedup", "right"),
        ("config", "left"),
        *((("SM MHz", "right"), ("W", "right"), ("°C", "right")) if telemetry else ()),
        ("status", "left"),
    )


def _status(r: dict, note: Optional[str]) -> str:
    """The status column: the status and its reason, and of an ok row why it is noisy, above its roofline (note) or
    throttled."""
    ok = r["status"] == "ok"
    # an ok row's reason is a note on how it was timed (stream mode's copies that did not fit)
    status = r["status"] if ok and not r.get("reason") else f"{r['status']}: {r.get('reason') or ''}"
    if ok and r.get("noisy"):
        status = f"ok, noisy (p80/p20 {r['time_us_p80'] / r['time_us_p20']:.1f}x > {NOISY_SPREAD}x)" + (
            f"; {r['reason']}" if r.get("reason") else ""
        )
    if note:
        status += f"; {note}"
    if ok and throttled(r):
        status += f"; throttled {r['throttled_samples']}/{r.get('n_samples')} samples: {r.get('throttle')}"
    return status


def _cells(r: dict, mark: Optional[str], speedup: Optional[float], telemetry: bool) -> list:
    """One row's cells, in _columns' order; an ok row's measurements only (others have none to show)."""
    ok = r["status"] == "ok"
    note = roofline_note(r) if ok else None
    spread_pct = spread(r) if ok else None
    return [
        str(r["M"]),
        dtypes.label(r["dtype"], r.get("scaling"), fp8_accum(r)),
        (f"{mark} " if mark else "") + r["variant"],
        (_fmt(r.get("time_us_median"), ".2f") + (THROTTLED if throttled(r) else "")) if ok else "",
        "" if spread_pct is None else f"±{spread_pct:.1f}%",
        _fmt(r.get("tflops"), ".1f") if ok else "",
        _fmt(r.get("gbps"), ".0f") if ok else "",
        (_fmt(r.get("pct_of_roofline"), ".0f") + ("!" if note else "")) if ok else "",
        _fmt(speedup, ".2f") + ("x" if speedup is not None else ""),
        short_config(r.get("config")),
        *((clock_range(r), _fmt(r.get("power_w"), ".0f"), _fmt(r.get("temp_c"), ".0f")) if telemetry else ()),
        Text(_status(r, note)[:240], style=STATUS_STYLE[r["status"]]),  # Text: reasons may hold '['
    ]


def status_counts(rows: list[dict]) -> dict[str, int]:
    counts = defaultdict(int)
    for r in rows:
        counts[r["status"]] += 1
    return dict(counts)
