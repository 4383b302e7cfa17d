"""Figures from result rows: speedup, TFLOP/s and latency by M, MoE schedules by tokens (this module) and the
roofline and Nsight Compute profile plots (plots_roofline).  matplotlib from a DataFrame only: every function returns
a Figure drawn with the Agg canvas (pyplot is never imported, so no GUI backend and no global figure state); the
only I/O is save().

Artists carry a gid that names what they are ("series:<label>", "baseline", "ceiling:measured:memory",
"footnote", ...), so that tests and scripts can find them without reading pixels."""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from gemmbench import metrics, plotdata
from gemmbench.store import write_atomic

KINDS = ("roofline", "speedup", "tflops", "latency", "schedules", "profile", "layer")
FORMATS = ("png", "svg")
DPI = 150
FOOT_PT = 7.5  # footnote font size, points

# One colour per built-in variant in every figure, so a reader can follow a kernel from plot to plot: cuBLAS and
# the torch references in greys, the data-parallel Triton schedules in blues/purple, SplitK in oranges/reds.
COLORS = {
    "cublas_bf16": "#222222", "cublas_fp16": "#222222", "cublas_fp8": "#222222", "cublas_fp8_rowwise": "#888888",
    "torch_moe_loop": "#222222", "torch_grouped_mm": "#888888",
    "triton_dp_row": "#1f77b4", "triton_dp_col": "#17becf", "triton_dp_grouped": "#9467bd",
    "triton_splitk_atomic": "#ff7f0e", "triton_splitk_reduce": "#d62728",
    "triton_splitk_atomic_rowwise": "#e6a157", "triton_splitk_reduce_rowwise": "#e377c2",
    "triton_moe_row": "#1f77b4", "triton_moe_col": "#2ca02c", "triton_moe_grouped": "#9467bd",
    "triton_moe_splitk": "#ff7f0e", "moe_align": "#8c564b",
}
_SPARE = ["#bcbd22", "#8c564b", "#7f7f7f", "#aec7e8", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d"]
TIMING = {
    "cold": "cold timing (L2 emptied before each call)",
    "stream": "stream timing (CUDA graph over distinct input copies)",
    "graph": "graph timing (CUDA graph of eviction + call)",
    "wall": "wall timing (host clock, launch included)",
}


def color(label: str) -> str:
    variant = label.split(" (")[0]  # "variant (run)" series share the variant's colour
    if variant in COLORS:
        return COLORS[variant]
    return _SPARE[sum(map(ord, variant)) % len(_SPARE)]  # stable across runs (hash() is salted per process)


# ------------------------------------------------------------------ figure scaffolding shared with plots_roofline

def new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1, **kw):
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def subtitle(df: pd.DataFrame, how: Optional[str] = None) -> str:
    gpus = sorted(plotdata.gpu_names(df).unique())
    if how is None and "timing_mode" in df.columns:
        modes = sorted(df["timing_mode"].dropna().unique())
        how = ", ".join(TIMING.get(m, f"{m} timing") for m in modes) or None
    return " · ".join([", ".join(gpus), plotdata.dates(df)] + ([how] if how else []))


def finish(fig: Figure, title: str, sub: str, notes: Sequence[Optional[str]]) -> Figure:
    """Title (what; GPU, date, timing) and a footnote under the axes; the figure grows by the footnote's height
    so that the plot area stays the size asked for."""
    fig.suptitle(f"{title}\n{sub}", fontsize=10.5)
    notes = [n for n in notes if n]
    if notes:
        width, height = fig.get_size_inches()
        chars = int(width * 72 / (FOOT_PT * 0.6))  # about how many characters of 7.5 pt fit across
        text = "\n".join(textwrap.fill(n, chars, subsequent_indent="  ") for n in notes)
        extra = (text.count("\n") + 1) * FOOT_PT * 1.3 / 72 + 0.12  # inches
        fig.set_size_inches(width, height + extra)
        frac = extra / (height + extra)
        fig.get_layout_engine().set(rect=(0, frac, 1, 1 - frac))
        fig.text(0.008, 0.008, text, fontsize=FOOT_PT, color="#333333", ha="left", va="bottom", gid="footnote")
    return fig


def m_axis(ax, ms, moe: bool) -> None:
    ms = sorted({int(m) for m in ms})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("tokens (M, each routed to top-k experts)" if moe else "M (tokens: rows of the activation)")
    ax.grid(True, which="major", alpha=0.3)


def legend(ax, handles=None, labels=None, title: Optional[str] = None):
    """To the right of `ax`, below the figure's title (constrained layout makes room for it)."""
    kw = {} if handles is None else {"handles": handles, "labels": labels}
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, title=title,
                     title_fontsize=8, frameon=False, **kw)


def gemm_title(k: dict) -> str:
    parts = [f"N={k['N']}", f"K={k['K']}"]
    if (k.get("E") or 1) > 1:
        parts.append(f"E={k['E']} top-{k['topk']}")
        if k.get("routing") not in (None, "uniform"):
            parts.append(f"{k['routing']} routing")
    if (k.get("tp") or 1) > 1:
        parts.append(f"TP={k['tp']}")
    return f"{k['gemm']} ({', '.join(parts)}), {k['dtype']}"


def _key(g: pd.DataFrame) -> dict:
    return plotdata.groups(g, plotdata.FIGURE_COLS)[0][0]


def _runs_note(g: pd.DataFrame) -> str:
    runs = sorted(g["run_id"].dropna().astype(str).unique())
    return ("Run: " if len(runs) == 1 else "Runs: ") + ", ".join(runs)


def _band(ax, x, lo, hi, label: str) -> None:
    ax.fill_between(x, lo, hi, color=color(label), alpha=0.18, linewidth=0, gid=f"band:{label}")


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
    for label, s in plotdata.series(pts):
        s = s.sort_values("M")
        ax.plot(s["M"], s["speedup"], marker="o", ms=4, lw=1.6, color=color(label), label=label, gid=f"series:{label}")
    base_label = " / ".join(bases) + " = 1.0"
    ax.axhline(1.0, color="black", lw=1.0, ls="--", label=base_label, gid="baseline")
    m_axis(ax, g["M"], moe)
    ax.set_ylabel(f"speedup over {bases[0] if len(bases) == 1 else 'the baseline'} (×, higher is faster)")
    lo, hi = min(pts["speedup"].min(), 1.0), max(pts["speedup"].max(), 1.0)
    pad = max(0.05, 0.08 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)
    legend(ax)
    missing = ok[ok["speedup"].isna() & (ok["variant"] != ok["baseline"])]
    notes = [
        "Speedup = the baseline's median time ÷ the variant's (same cell, same run), only from cells that passed "
        "the check." + (" Triton *_rowwise variants are measured against cublas_fp8_rowwise."
                                           if "cublas_fp8_rowwise" in bases and len(bases) > 1 else ""),
        (f"No speedup for {len(missing)} ok cells: their baseline has no ok row at that M in their run "
         f"({', '.join(sorted(missing['variant'].astype(str).unique()))})." if len(missing) else None),
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
    for label, s in plotdata.series(ok):
        s = s.sort_values("M")
        if metric == "tflops":
            # the band's low end is the slow (p80) sample: same FLOP model, three times
            y = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_median"])]
            lo = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p80"])]
            hi = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p20"])]
        else:
            y, lo, hi = list(s["time_us_median"]), list(s["time_us_p20"]), list(s["time_us_p80"])
        ax.plot(s["M"], y, marker="o", ms=4, lw=1.6, color=color(label), label=label, gid=f"series:{label}")
        _band(ax, list(s["M"]), lo, hi, label)
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
    notes = ["Lines: median of the timing samples; bands: 20th to 80th percentile.", plotdata.not_drawn(g),
             _runs_note(g)]
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
    for rows, style in ((fused, "-"), (refs, "--")):
        for label, s in plotdata.series(rows):
            s = s.sort_values("M")
            y = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_median"])]
            lo = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p80"])]
            hi = [metrics.tflops(f, t) for f, t in zip(s["flops"], s["time_us_p20"])]
            top.plot(s["M"], y, ls=style, marker="o", ms=3.5, lw=1.5, color=color(label), label=label,
                     gid=f"series:{label}")
            _band(top, list(s["M"]), lo, hi, label)
            ys += y
    _log_if_wide(top, ys)
    top.set_ylabel("TFLOP/s (2·tokens·top-k·N·K ÷ time)")
    top.grid(True, alpha=0.3)
    best = fused.groupby("M")["time_us_median"].min()
    for label, s in plotdata.series(fused):
        s = s.sort_values("M")
        bottom.plot(s["M"], [best[m] / t for m, t in zip(s["M"], s["time_us_median"])], marker="o", ms=3.5,
                    lw=1.5, color=color(label), gid=f"relative:{label}")
    bottom.axhline(1.0, color="black", lw=0.8, ls=":")
    bottom.set_ylabel("relative to the fastest\nschedule (1.0 = fastest)")
    m_axis(bottom, g["M"], moe=True)
    top.tick_params(labelbottom=False)
    top.set_xlabel("")
    legend(top)
    notes = ["Solid: the fused Triton MoE GEMM with each tile schedule (row-major, column-major, grouped, SplitK); "
             "dashed: torch references. Bottom: fastest schedule's median time ÷ this schedule's. Bands: p20-p80.",
             plotdata.not_drawn(g), _runs_note(g)]
    return finish(fig, f"MoE schedules by tokens: {gemm_title(k)}", subtitle(g), notes)


# ------------------------------------------------------------------ all figures of a kind, and saving them

@dataclass
class Drawn:
    stem: str  # file name without suffix: kind-GEMM[-tpN]-dtype
    key: dict  # the figure group's columns (plotdata.FIGURE_COLS, ROOFLINE_COLS or PROFILE_COLS)
    figure: Optional[Figure]  # None: nothing to draw in this group (note says why)
    warnings: list[str] = field(default_factory=list)
    note: Optional[str] = None


def figures(kind: str, runs: Optional[pd.DataFrame] = None, profiles: Optional[pd.DataFrame] = None) -> list[Drawn]:
    """Every figure of `kind` for the selected rows (runs: plotdata.select, with_speedups, keep_variants;
    profiles: plotdata.select of profile rows), one per figure group."""
    from gemmbench import plots_roofline

    if kind == "profile":
        rows = plots_roofline.summed_profiles(profiles)
        keyed = plotdata.groups(rows, plotdata.PROFILE_COLS)
        draw = plots_roofline.profile
    elif kind == "roofline":
        keyed = plotdata.groups(runs[runs["flops"].notna()], plotdata.ROOFLINE_COLS)
        draw = plots_roofline.roofline
    else:
        rows = runs[runs["E"] > 1] if kind == "schedules" else runs
        keyed = plotdata.groups(rows, plotdata.FIGURE_COLS)
        draw = {"speedup": speedup, "schedules": schedules,
                "tflops": lambda g: throughput(g, "tflops"), "latency": lambda g: throughput(g, "latency")}[kind]
    out = []
    for stem, (key, g) in zip(plotdata.stems(kind, [k for k, _ in keyed]), keyed):
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
        bases = ", ".join(sorted(g["baseline"].dropna().astype(str).unique()))
        return f"no ok {bases} rows to measure a speedup against in the same run; try --baseline"
    if kind == "schedules":
        return "no fused MoE schedule (triton_moe_*) rows"
    return "no ok rows with the values this kind draws"


def render(fig: Figure, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    # no timestamps or versions in the files: the committed PNGs change only when the picture does
    meta = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    fig.savefig(buf, format=fmt, dpi=DPI, metadata=meta)
    return buf.getvalue()


def save(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str] = ("png",)) -> list[Path]:
    """The figure as out_dir/<stem>.<format> for each format; the paths written."""
    paths = []
    for fmt in formats:
        path = Path(out_dir) / f"{stem}.{fmt}"
        write_atomic(path, render(fig, fmt))
        paths.append(path)
    return paths
