"""What every figure shares: the canvas, title and footnote, legend placement, axis labels, series colours, and the
Drawn record a figure travels in.  Imported by figures, roofline, ncu_figure and layer (which never import each other's
drawing code)."""

from __future__ import annotations

import io
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import pandas as pd
from matplotlib import colormaps, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import hsv_to_rgb, to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import NullLocator

from gemmbench import dtypes, registry
from gemmbench.measure import timing_modes
from gemmbench.plot import data as plotdata

DPI = 150  # the figures are laid out at the resolution they are saved at, so what a test measures is what is saved
FOOT_PT = 7.5  # footnote font size, points
MISSING = "N/A"  # how a figure or the report writes a value the rows lack (never "nan" or "None")


def _chromatic(c) -> bool:
    """Not a grey: black, greys and white mean something else in the figures (ceilings, the datasheet, the GEMM
    marker key, a layer bar's launch gaps), so no series may wear one."""
    r, g, b = to_rgb(c)
    return max(r, g, b) - min(r, g, b) > 0.1


# tab20's two greys wear a colour of their own (teal, gold) in the registry's colours: every other built-in keeps
# the colour it had
GREY_STAND_INS = {"#7f7f7f": "#1b9e77", "#c7c7c7": "#e7ba52"}


def _palette() -> list[str]:
    """tab20's strong halves, then its light halves (the registry's first 20 built-ins wear these), greys stood in
    for; then tab20b's colours by shade and Dark2's: colours for plugins and for series that are not a variant."""
    tab20, tab20b = colormaps["tab20"].colors, colormaps["tab20b"].colors
    base = [GREY_STAND_INS.get(to_hex(c), to_hex(c)) for c in tab20[0::2] + tab20[1::2]]
    more = [to_hex(tab20b[i]) for k in (0, 2, 1, 3) for i in range(k, 20, 4)] + [
        to_hex(c) for c in colormaps["Dark2"].colors
    ]
    out: list[str] = []
    for c in base + more:
        if _chromatic(c) and c not in out:
            out.append(c)
    return out


PALETTE = _palette()


def _generated(i: int) -> str:
    """The i-th colour past the palette, for a figure with more series than it has colours: golden-ratio steps
    around the hue circle at three brightnesses (distinct enough to tell apart, never a grey)."""
    return to_hex(hsv_to_rgb(((i * 0.6180339887) % 1.0, 0.75 - 0.15 * (i // 3 % 2), 0.9 - 0.2 * (i % 3))))


def variant_color(variant: str) -> Optional[str]:
    """A registered variant's own colour: its place in the registry (built-ins first, in registration order, then
    plugins), so that a kernel keeps its colour from figure to figure.  None for anything else."""
    names = registry.names()  # its first call imports every kernel module
    return PALETTE[names.index(variant) % len(PALETTE)] if variant in names else None


def colors(labels: Iterable[str]) -> dict[str, str]:
    """One colour per series label of one figure, never two the same.  A label that is a registered variant gets
    the variant's own colour (variant_color); every other label (a layer plan "a+b", a "variant (run)" series, an
    unregistered name) and a variant whose colour another series of this figure already wears get the first
    colours left, in the order given: first the palette's colours that no registered variant owns, so that such a
    series does not look like a kernel of another figure, then generated ones (never a grey)."""
    labels = list(dict.fromkeys(str(x) for x in labels))
    owned = {variant_color(name) for name in registry.names()}
    out: dict[str, str] = {}
    for label in labels:
        c = variant_color(label)
        if c is not None and c not in out.values():  # a plugin past the palette can wrap onto a built-in's colour
            out[label] = c
    # tab20b's and Dark2's colours before tab20's two light ones that no built-in wears: a plan's graph bar is its
    # colour mixed with white, which a light colour does not survive
    spare = (c for c in PALETTE[20:] + PALETTE[:20] + [_generated(i) for i in range(2 * len(labels))] if c not in owned)
    for label in labels:
        if label not in out:
            out[label] = next(c for c in spare if c not in out.values())
    return {label: out[label] for label in labels}


def lighter(c: str, share: float = 0.5) -> str:
    """`c` mixed with white (a real colour, not transparency: grid lines do not show through a bar)."""
    return to_hex([x + (1.0 - x) * share for x in to_rgb(c)])


def shown(value) -> str:
    """A value as a figure or the report writes it: MISSING for None, NaN, pandas' NA or an empty string."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) or str(value) == "":
        return MISSING
    return str(value)


# ------------------------------------------------------------------ figure scaffolding shared with plot.roofline and plot.ncu_figure


def new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1, **kw):
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _timing_label(mode: str) -> str:
    """How a title names a timing mode (timing_modes.Mode.label); a mode this build does not know, by its name."""
    known = timing_modes.ALL.get(mode)
    return known.label if known else f"{mode} timing"


def subtitle(df: pd.DataFrame, how: Optional[str] = None) -> str:
    gpus = sorted(plotdata.gpu_names(df).unique())
    if how is None and "timing_mode" in df.columns:
        modes = sorted(df["timing_mode"].dropna().unique())
        how = ", ".join(_timing_label(m) for m in modes) or None
    return " · ".join([", ".join(gpus), plotdata.dates(df)] + ([how] if how else []))


def finish(fig: Figure, title: str, sub: str, notes: Sequence[Optional[str]]) -> Figure:
    """Title (what; GPU, date, timing) and a footnote under the axes; the figure grows by the footnote's height
    so that the plot area stays the size asked for."""
    fig.suptitle(f"{title}\n{sub}", fontsize=10.5)
    for note in notes:
        if note:
            add_note(fig, note)
    return fig


def add_note(fig: Figure, note: str) -> None:
    """One more paragraph in the footnote (made on the first); the figure grows by its lines, so the axes keep
    their size in inches and what was placed on them (add_note may follow the placing of labels) stays put."""
    width, height = fig.get_size_inches()
    chars = int(width * 72 / (FOOT_PT * 0.6))  # about how many characters of 7.5 pt fit across
    text = textwrap.fill(note, chars, subsequent_indent="  ")
    foot = [t for t in fig.texts if t.get_gid() == "footnote"]
    old = fig.get_layout_engine().get()["rect"][1] * height  # inches under the layout: the footnote so far
    added = (text.count("\n") + 1) * FOOT_PT * 1.3 / 72 + (0.0 if foot else 0.12)
    fig.set_size_inches(width, height + added)
    frac = (old + added) / (height + added)
    fig.get_layout_engine().set(rect=(0, frac, 1, 1 - frac))
    if foot:
        foot[0].set_text(foot[0].get_text() + "\n" + text)
    else:
        fig.text(0.008, 0.008, text, fontsize=FOOT_PT, color="0.2", ha="left", va="bottom", gid="footnote")


def m_axis(ax, ms, moe: bool) -> None:
    ms = sorted({int(m) for m in ms})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("tokens (M, each routed to top-k experts)" if moe else "M (tokens: rows of the activation)")
    ax.grid(True, which="major", alpha=0.3)


def headroom(ax, texts: Sequence, pad: float = 3.0) -> None:
    """Raise the top of `ax`'s linear y axis until every text of `texts` (value labels standing on data values: an
    ax.text or an annotation at a data point, its offset included) ends `pad` pixels below the frame.  Measured
    on the laid-out figure: a label's height is fixed in points while the bars scale with the axis, so the top
    that fits follows from the label's pixel height (call after finish(), which sizes the figure)."""
    fig = ax.figure
    for _ in range(4):  # a new top can change the tick labels' width and so the layout a little: measure again
        fig.draw_without_rendering()
        box = ax.get_window_extent()
        lo, hi = ax.get_ylim()
        top = hi
        for t in texts:
            if not t.get_visible() or not t.get_text().strip():
                continue
            # where the label stands, in pixels (an annotation at a data point; a text in any of the axes' transforms)
            anchor = (
                ax.transData.transform(t.xy)[1]
                if isinstance(t, Annotation)
                else t.get_transform().transform(t.get_position())[1]
            )
            y = ax.transData.inverted().transform((box.x0, anchor))[1]
            height = t.get_window_extent().y1 - anchor  # pixels from its data value to its top
            room = box.height - height - pad
            if room > 0:
                top = max(top, lo + (y - lo) * box.height / room)
        if top <= hi + (hi - lo) * 1e-6:
            return
        ax.set_ylim(lo, top)


def legend(ax, handles=None, labels=None, title: Optional[str] = None, **kw):
    """To the right of `ax`, below the figure's title (constrained layout makes room for it), in as many columns
    as its entries need to fit the figure's height (one column taller than the figure squeezes the axes to
    nothing)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    rows = max(8, int((ax.figure.get_size_inches()[1] - 1.2) * 72 / 12.5))  # 8 pt entries, 0.5 spacing
    kw.setdefault("ncols", max(1, -(-len(handles) // rows)))
    return ax.legend(
        handles,
        labels,
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
    parts = [f"N={shown(k.get('N'))}", f"K={shown(k.get('K'))}"]
    if (k.get("E") or 1) > 1:
        parts.append(f"E={k['E']} top-{shown(k.get('topk'))}")
        if k.get("routing") not in (None, "uniform"):
            parts.append(f"{k['routing']} routing")
    if (k.get("tp") or 1) > 1:
        parts.append(f"TP={k['tp']}")
    if (k.get("ep") or 1) > 1:
        parts.append(f"EP={k['ep']}")
    return f"{shown(k.get('gemm'))} ({', '.join(parts)}), {dtype_title(k)}"


def dtype_title(k: dict) -> str:
    """The dtype of a figure's key as titles show it, with its fp8 scaling where not per tensor and its fast
    accumulation: 'fp8 block', 'fp8 fast'."""
    return dtypes.label(shown(k.get("dtype")), k.get("scaling"), k.get("fp8_accum"))


@dataclass
class Drawn:
    stem: str  # file name without suffix: kind-GEMM[-tpN]-dtype
    key: dict  # the figure group's columns (plotdata.FIGURE_COLS, ROOFLINE_COLS or PROFILE_COLS)
    figure: Optional[Figure]  # None: nothing to draw in this group (note says why)
    warnings: list[str] = field(default_factory=list)
    note: Optional[str] = None


# the digits of an SVG number past its second decimal (a hundredth of a point: below what any screen shows), and a tag
_LONG_DECIMALS = re.compile(r"(\d\.\d\d)\d+")
_TAG = re.compile(r"<[^>]*>")
_NO_ROTATION = re.compile(r' transform="rotate\(-0 [\d. -]+\)"')  # an upright label's: the identity


def render_compact(fig: Figure) -> bytes:
    """The figure as a small SVG for a report: its text as text (DejaVu Sans, matplotlib's own, named once; a viewer
    without it uses its sans-serif), coordinates to a hundredth of a point, no indentation or metadata.  Only the
    inside of tags is rounded: the words and numbers a reader sees stay as drawn."""
    buf = io.BytesIO()
    with rc_context({"svg.fonttype": "none", "font.sans-serif": ["DejaVu Sans"]}):
        fig.savefig(buf, format="svg", dpi=DPI, metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = _TAG.sub(lambda tag: _LONG_DECIMALS.sub(r"\1", tag.group(0)), buf.getvalue().decode("utf-8"))
    text = _NO_ROTATION.sub("", text)
    return re.sub(r"\n +", "\n", text).encode("utf-8")


def render(fig: Figure, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    # no timestamps or versions in the files: the committed PNGs change only when the picture does
    meta = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    fig.savefig(buf, format=fmt, dpi=DPI, metadata=meta)
    return buf.getvalue()
