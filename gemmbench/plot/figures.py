"""Figures from result rows: speedup, TFLOP/s and latency by M, MoE schedules by tokens (this module) and the
roofline (gemmbench.plot.roofline) and Nsight Compute profile (gemmbench.plot.ncu_figure) plots.  matplotlib from a DataFrame only: every function returns
a Figure drawn with the Agg canvas (pyplot is never imported, so no GUI backend and no global figure state); the
only I/O is save().

Artists carry a gid that names what they are ("series:<label>", "baseline", "ceiling:measured:memory",
"footnote", ...), so that tests and scripts can find them without reading pixels."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from gemmbench.plot import data as plotdata
from gemmbench.plot import ncu_figure
from gemmbench.plot import roofline as plots_roofline
from gemmbench.plot.style import Drawn, colors, finish, gemm_title, legend, m_axis, new_figure, render, shown, subtitle
from gemmbench.results import metrics
from gemmbench.results.atomic_write import write_atomic

KINDS = ("roofline", "speedup", "tflops", "latency", "schedules", "profile", "layer")
FORMATS = ("png", "svg")


def _key(g: pd.DataFrame) -> dict:
    return plotdata.groups(g, plotdata.FIGURE_COLS)[0][0]


def _runs_note(g: pd.DataFrame) -> str:
    runs = sorted({shown(r) for r in g["run_id"]})
    return ("Run: " if len(runs) == 1 else "Runs: ") + ", ".join(runs)


def _band(ax, x, lo, hi, label: str, c: str) -> None:
    ax.fill_between(x, lo, hi, color=c, alpha=0.18, linewidth=0, gid=f"band:{label}")


def _log_if_wide(ax, values) -> None:
    v = [x for x in values if x > 0]
    if v and max(v) / min(v) > 20:
        ax.set_yscale("log")


# ------------------------------------------------------------------ the kinds


def speedup(g: pd.DataFrame) -> Optional[Figure]:
    """Speedup over the baseline by M, one series per variant, for one GEMM and dtype (rows from
    plotdata.with_speedups).  None when no row has a speedup."""
    k = _key(g)
    moe = (k.get("E") or 1) > 1
    ok = g[(g["status"] == "ok") & g["flops"].notna()]
    pts = ok[ok["speedup"].notna() & (ok["variant"] != ok["baseline"])]
    if pts.empty:
        return None
    bases = sorted(ok["baseline"].dropna().unique())
    fig, axes = new_figure(8.0, 4.6)
    ax = axes[0, 0]
    series = plotdata.series(pts)
    palette = colors(label for label, _ in series)
    for label, s in series:
        s = s.sort_values("M")
        ax.plot(
            s["M"], s["speedup"], marker="o", ms=4, lw=1.6, color=palette[label], label=label, gid=f"series:{label}"
        )
    base_label = " / ".join(bases) + " = 1.0"
    ax.axhline(1.0, color="black", lw=1.0, ls="--", label=base_label, gid="baseline")
    m_axis(ax, g["M"], moe)
    ax.set_ylabel(f"speedup over {bases[0] if len(bases) == 1 else 'the baseline'} (×, higher is faster)")
    # log2: 2x faster and 2x slower are as far from 1.0, and a 0.01x row does not flatten the rest onto 0
    lo, hi = min(pts["speedup"].min(), 1.0), max(pts["speedup"].max(), 1.0)
    ax.set_yscale("log", base=2)
    ax.set_ylim(lo / 1.15, hi * 1.15)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.3g}×"))
    legend(ax)
    missing = ok[ok["speedup"].isna() & (ok["variant"] != ok["baseline"])]
    notes = [
        "Speedup = the baseline's median time ÷ the variant's (same cell, same run), only from cells that passed "
        "the check.",
        (
            f"No speedup for {len(missing)} ok cells: their baseline has no ok row at that M in their run "
            f"({', '.join(sorted(missing['variant'].astype(str).unique()))})."
            if len(missing)
            else None
        ),
        plotdata.not_drawn(g),
        _runs_note(g),
    ]
    return finish(fig, f"Speedup by M: {gemm_title(k)}", subtitle(g), notes)


def throughput(g: pd.DataFrame, metric: str) -> Optional[Figure]:
    """TFLOP/s (metric "tflops") or time per call ("latency") by M, one series per variant, median with the
    p20-p80 band, for one GEMM and dtype.  None when nothing is ok."""
    k = _key(g)
    moe = (k.get("E") or 1) > 1
    ok = g[(g["status"] == "ok") & g["time_us_median"].notna()]
    if metric == "tflops":
        ok = ok[ok["flops"].notna()]  # moe_align: a step beside the GEMM, no FLOPs
    if ok.empty:
        return None
    fig, axes = new_figure(8.0, 4.6)
    ax = axes[0, 0]
    ys = []
    series = plotdata.series(ok)
    palette = colors(label for label, _ in series)
    for label, s in series:
        s = s.sort_values("M")
        if metric == "tflops":
            # the band's low end is the slow (p80) sample: same FLOP model, three times
            y = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_median"], strict=False)]
            lo = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p80"], strict=False)]
            hi = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p20"], strict=False)]
        else:
            y, lo, hi = list(s["time_us_median"]), list(s["time_us_p20"]), list(s["time_us_p80"])
        ax.plot(s["M"], y, marker="o", ms=4, lw=1.6, color=palette[label], label=label, gid=f"series:{label}")
        _band(ax, list(s["M"]), lo, hi, label, palette[label])
        ys += y
    _log_if_wide(ax, ys)
    m_axis(ax, g["M"], moe)
    if metric == "tflops":
        flop = "2·tokens·top-k·N·K" if moe else "2·M·N·K"
        ax.set_ylabel(f"TFLOP/s (useful FLOPs {flop} ÷ time)")
        what = "TFLOP/s"
    else:
        ax.set_ylabel("time per call (µs)")
        what = "Latency"
    legend(ax)
    notes = [
        "Lines: median of the timing samples; bands: 20th to 80th percentile.",
        plotdata.not_drawn(g),
        _runs_note(g),
    ]
    return finish(fig, f"{what} by M: {gemm_title(k)}", subtitle(g), notes)


def schedules(g: pd.DataFrame) -> Optional[Figure]:
    """The fused MoE GEMM's tile schedules (family triton_moe: row-major, column-major, grouped, SplitK) by tokens
    for one MoE GEMM and dtype: TFLOP/s with the torch references beside them, and each schedule's throughput
    relative to the fastest schedule at that token count.  None when no schedule row is ok."""
    k = _key(g)
    ok = g[(g["status"] == "ok") & g["flops"].notna() & g["time_us_median"].notna()]
    fused = ok[ok["family"] == "triton_moe"]
    if fused.empty:
        return None
    refs = ok[ok["family"] != "triton_moe"]
    fig, axes = new_figure(8.0, 6.2, nrows=2, sharex=True, height_ratios=[3, 2])
    top, bottom = axes[0, 0], axes[1, 0]
    ys = []
    drawn = [(series, style) for rows, style in ((fused, "-"), (refs, "--")) for series in plotdata.series(rows)]
    palette = colors(label for (label, _), _ in drawn)  # the bottom panel's curves are the top's, same colours
    for (label, s), style in drawn:
        s = s.sort_values("M")
        y = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_median"], strict=False)]
        lo = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p80"], strict=False)]
        hi = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p20"], strict=False)]
        top.plot(
            s["M"], y, ls=style, marker="o", ms=3.5, lw=1.5, color=palette[label], label=label, gid=f"series:{label}"
        )
        _band(top, list(s["M"]), lo, hi, label, palette[label])
        ys += y
    _log_if_wide(top, ys)
    top.set_ylabel("TFLOP/s (2·tokens·top-k·N·K ÷ time)")
    top.grid(True, alpha=0.3)
    best = fused.groupby("M")["time_us_median"].min()
    for label, s in plotdata.series(fused):
        s = s.sort_values("M")
        bottom.plot(
            s["M"],
            [best[m] / t for m, t in zip(s["M"], s["time_us_median"], strict=False)],
            marker="o",
            ms=3.5,
            lw=1.5,
            color=palette[label],
            gid=f"relative:{label}",
        )
    bottom.axhline(1.0, color="black", lw=0.8, ls=":")
    bottom.set_ylabel("relative to the fastest\nschedule (1.0 = fastest)")
    m_axis(bottom, g["M"], moe=True)
    top.tick_params(labelbottom=False)
    top.set_xlabel("")
    legend(top)
    notes = [
        "Solid: the fused Triton MoE GEMM with each tile schedule (row-major, column-major, grouped, SplitK); "
        + ("dashed: torch references. " if not refs.empty else "")
        + "Bottom: fastest schedule's median time ÷ this schedule's. Bands: p20-p80.",
        plotdata.not_drawn(g),
        _runs_note(g),
    ]
    return finish(fig, f"MoE schedules by tokens: {gemm_title(k)}", subtitle(g), notes)


# ------------------------------------------------------------------ all figures of a kind, and saving them


def figures(kind: str, runs: Optional[pd.DataFrame] = None, profiles: Optional[pd.DataFrame] = None) -> list[Drawn]:
    """Every figure of `kind` for the selected rows (runs: plotdata.select, with_speedups, keep_variants;
    profiles: plotdata.select of profile rows), one per figure group."""
    if kind == "profile":
        rows = ncu_figure.summed_profiles(profiles)
        keyed = plotdata.groups(rows, plotdata.PROFILE_COLS)
        draw = ncu_figure.profile
    elif kind == "roofline":
        keyed = plotdata.groups(runs[runs["flops"].notna()], plotdata.ROOFLINE_COLS)
        draw = plots_roofline.roofline
    else:
        rows = runs[runs["E"] > 1] if kind == "schedules" else runs
        keyed = plotdata.groups(rows, plotdata.FIGURE_COLS)
        draw = {
            "speedup": speedup,
            "schedules": schedules,
            "tflops": lambda g: throughput(g, "tflops"),
            "latency": lambda g: throughput(g, "latency"),
        }[kind]
    out = []
    for stem, (key, g) in zip(plotdata.stems(kind, [k for k, _ in keyed]), keyed, strict=False):
        fig = draw(g)
        warnings = plots_roofline.ceiling_warnings(g) if kind == "roofline" and fig is not None else []
        note = None if fig is not None else f"{stem}: nothing to draw ({_why_empty(kind, g)})"
        out.append(Drawn(stem, key, fig, warnings, note))
    return out


def _why_empty(kind: str, g: pd.DataFrame) -> str:
    ok = g[g["status"] == "ok"]
    if ok.empty:
        return f"no ok rows; {len(g)} {', '.join(sorted(g['status'].astype(str).unique()))}"
    if kind == "speedup":
        bases = sorted(g["baseline"].dropna().astype(str).unique())
        if set(ok["variant"].astype(str)) <= set(bases):  # only the baseline itself is ok: nothing to compare to it
            return f"only {', '.join(bases)} has ok rows here: no other variant to measure a speedup of"
        return f"no ok {', '.join(bases)} rows to measure a speedup against in the same run; try --baseline"
    if kind == "schedules":
        return "no fused MoE schedule (triton_moe_*) rows"
    return "no ok rows with the values this kind draws"


def save(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str] = ("png",)) -> list[Path]:
    """The figure as out_dir/<stem>.<format> for each format; the paths written."""
    paths = []
    for fmt in formats:
        path = Path(out_dir) / f"{stem}.{fmt}"
        write_atomic(path, render(fig, fmt))
        paths.append(path)
    return paths
