"""What every figure shares: the canvas, title and footnote, legend placement, axis labels, series colours, and the
Drawn record a figure travels in.  Imported by figures, roofline and layer (which never import each other's
drawing code)."""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from gemmbench import registry
from gemmbench.plot import data as plotdata

# tab20 without its light halves first, then the light ones: 20 colours, the first 10 strongly distinct
PALETTE = [to_hex(c) for c in colormaps["tab20"].colors[0::2] + colormaps["tab20"].colors[1::2]]
DPI = 150
FOOT_PT = 7.5  # footnote font size, points

TIMING = {
    "cold": "cold timing (L2 emptied before each call)",
    "stream": "stream timing (CUDA graph over distinct input copies)",
    "graph": "graph timing (CUDA graph of eviction + call)",
    "wall": "wall timing (host clock, launch included)",
}


def color(label: str) -> str:
    """The colour of a series: its variant's place in the registry (built-ins first, in registration order, then
    plugins), so a kernel keeps its colour from plot to plot and no two built-ins share one."""
    variant = label.split(" (")[0]  # "variant (run)" series share the variant's colour
    names = [v.name for v in registry.all_variants()]  # its first call imports every kernel module
    if variant in names:
        return PALETTE[names.index(variant) % len(PALETTE)]
    return PALETTE[sum(map(ord, variant)) % len(PALETTE)]  # stable across runs (hash() is salted per process)


# ------------------------------------------------------------------ figure scaffolding shared with plot.roofline


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
    return ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize=8,
        title=title,
        title_fontsize=8,
        frameon=False,
        **kw,
    )


def gemm_title(k: dict) -> str:
    parts = [f"N={k['N']}", f"K={k['K']}"]
    if (k.get("E") or 1) > 1:
        parts.append(f"E={k['E']} top-{k['topk']}")
        if k.get("routing") not in (None, "uniform"):
            parts.append(f"{k['routing']} routing")
    if (k.get("tp") or 1) > 1:
        parts.append(f"TP={k['tp']}")
    return f"{k['gemm']} ({', '.join(parts)}), {k['dtype']}"


@dataclass
class Drawn:
    stem: str  # file name without suffix: kind-GEMM[-tpN]-dtype
    key: dict  # the figure group's columns (plotdata.FIGURE_COLS, ROOFLINE_COLS or PROFILE_COLS)
    figure: Optional[Figure]  # None: nothing to draw in this group (note says why)
    warnings: list[str] = field(default_factory=list)
    note: Optional[str] = None


def render(fig: Figure, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    # no timestamps or versions in the files: the committed PNGs change only when the picture does
    meta = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    fig.savefig(buf, format=fmt, dpi=DPI, metadata=meta)
    return buf.getvalue()
