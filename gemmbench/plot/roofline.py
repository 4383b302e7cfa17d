"""The roofline figure of a run: each ok row at its arithmetic intensity and TFLOP/s under the measured ceilings
(streaming-read bandwidth, peak matmul rate) and the datasheet's (gemmbench.plot.datasheet), M labelled; and the
warnings for points above their own roofline.  Same conventions as gemmbench.plot.figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from gemmbench import dtypes
from gemmbench.plot import data as plotdata
from gemmbench.plot.datasheet import Datasheet, datasheet, unknown_gpu_note
from gemmbench.plot.style import add_note, colors, finish, legend, new_figure, subtitle
from gemmbench.results import metrics

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*", "d", "8"]


def above_ceiling(g: pd.DataFrame) -> pd.DataFrame:
    """ok rows faster than their own measured roofline (pct_of_roofline > 100: the bound from the streaming-read
    bandwidth at the row's byte count and the measured peak).  A kernel cannot beat DRAM: such a point means data
    served from L2 (stream timing, small inputs) or a byte count that is too high, never a win."""
    ok = g[(g["status"] == "ok") & g["pct_of_roofline"].notna()]
    return ok[ok["pct_of_roofline"] > 100.0]


def _label(r, tp: bool = True) -> str:
    """'moe_w13 skewed tp2 ep8': the GEMM, its MoE routing where not uniform, its TP degree where > 1 (`tp`: False in
    a panel of one TP, whose title says it), its EP degree where > 1."""
    routing = r.get("routing")
    routed = isinstance(routing, str) and routing != "uniform"
    ep = r.get("ep") or 1
    return (f"{r['gemm']}" + (f" {routing}" if routed else "") + (f" tp{r['tp']}" if tp and r["tp"] > 1 else "")
            + (f" ep{ep}" if ep > 1 else ""))  # fmt: skip


def _memory_bound(r) -> bool:
    """Whether a row's own roofline is its memory ceiling (bytes / bandwidth >= FLOPs / peak)."""
    return r["bytes_min"] / r["ceiling_bw_gbps"] * 1e6 >= r["flops"] / r["ceiling_tflops"] * 1e3


def ceiling_warnings(g: pd.DataFrame) -> list[str]:
    over = above_ceiling(g)
    if over.empty:
        return []
    cells = [
        f"{_label(r)} {r['dtype']} M={r['M']} {r['variant']} {r['pct_of_roofline']:.1f}% of its "
        f"{'memory' if _memory_bound(r) else 'compute'} ceiling"
        for _, r in over.sort_values("pct_of_roofline", ascending=False).iterrows()
    ]
    more = f", and {len(cells) - 8} more" if len(cells) > 8 else ""
    return [
        f"{len(cells)} point(s) above their measured ceiling, never a win (above the memory ceiling: data served "
        f"from cache or a wrong byte count; above the compute ceiling: the measured peak, the best cuBLAS median of a "
        f"ladder of sizes, is below what this shape reaches at these clocks): " + "; ".join(cells[:8]) + more
    ]


# More GEMM/TP groups than this in one panel and their markers and M labels pile up on each other (GEMMs of one M
# sit at nearly one intensity): the roofline is then drawn as one panel per TP degree, or per GEMM.
MAX_GROUPS = 4


def split_by(ok: pd.DataFrame) -> Optional[str]:
    """How a roofline's rows are split into panels: None while one panel holds at most MAX_GROUPS GEMM/TP groups;
    else "tp" (one panel per TP degree) where the rows hold several degrees, or "gemm" (one panel per GEMM)."""
    if len({_label(r) for _, r in ok.iterrows()}) <= MAX_GROUPS:
        return None
    return "tp" if ok["tp"].nunique() > 1 else "gemm"


def _panels(ok: pd.DataFrame, split: Optional[str]) -> list[tuple[Optional[str], pd.DataFrame]]:
    """(panel title, its rows) for each panel."""
    if split is None:
        return [(None, ok)]
    if split == "tp":
        return [(f"TP={tp}", s) for tp, s in ok.groupby("tp", sort=True)]
    return [(str(gemm), s) for gemm, s in ok.groupby("gemm", sort=False)]


def _grid(n: int) -> tuple[int, int]:
    cols = 1 if n == 1 else 2 if n <= 4 else 3
    return -(-n // cols), cols


# Where an M label may go, tried in order (offset in points, alignment): up-left first under the slanted roof,
# where the points climb to the right; straight up first under the flat one, where M steps along the roof.
SLANTED = [(-3, 5, "right", "bottom"), (3, -5, "left", "top"), (-4, -4, "right", "top"), (4, 4, "left", "bottom"),
           (0, 9, "center", "bottom"), (0, -9, "center", "top")]  # fmt: skip
FLAT = [(0, 10, "center", "bottom"), (0, -10, "center", "top"), (-5, 0, "right", "center"), (5, 0, "left", "center")]
LABEL_PAD = 2.0  # pixels kept between an M label and the frame or another label (its white box reaches past it)


def _m_labels(ax, ok: pd.DataFrame, ridge: Optional[float]) -> int:
    """M written once per GEMM beside its fastest point, each where it overlaps no other label and stays inside
    the frame (measured on the laid-out figure: call after finish()); a point whose M is already written beside a
    point a few pixels away is left to that label.  Returns how many labels found no free place."""
    frame = ax.get_window_extent()
    taken = [t.get_window_extent().padded(LABEL_PAD) for t in ax.texts]  # the ridge's label
    written: list[tuple[int, float, float]] = []  # (M, x, y pixels) of the points labelled so far
    left_out = 0
    for (gl, m), s in ok.groupby(["glabel", "M"], sort=False):
        top = s.loc[s["tf"].idxmax()]
        px, py = ax.transData.transform((top["ai"], top["tf"]))
        # two GEMMs of nearly equal intensity (QKV and o at one M) would print "64" twice: one label serves both
        if any(wm == m and abs(wx - px) < 12 and abs(wy - py) < 12 for wm, wx, wy in written):
            continue
        for dx, dy, ha, va in FLAT if ridge is not None and top["ai"] > ridge else SLANTED:
            ann = ax.annotate(
                str(m),
                (top["ai"], top["tf"]),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=7,
                ha=ha,
                va=va,
                color="0.2",
                gid=f"m-label:{gl}:{m}",
                bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.75),
            )
            ann.set_in_layout(False)  # placed on the final layout: it must not move the axes it was placed in
            box = ann.get_window_extent().padded(LABEL_PAD)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(b) for b in taken):
                taken.append(box)
                written.append((m, px, py))
                break
            ann.remove()
        else:
            left_out += 1
    return left_out


def roofline(g: pd.DataFrame) -> Optional[Figure]:
    """Log-log TFLOP/s against arithmetic intensity (FLOPs / minimum bytes) for every GEMM of one dtype and timing
    mode: colour = variant, marker = GEMM, M written beside each GEMM's points; the ceilings measured in the run
    (solid, with the band of bandwidths measured at the problems' sizes) and the datasheet's (dashed).  More than
    MAX_GROUPS GEMM/TP groups: one panel per TP degree (or per GEMM), on shared axes."""
    ok = _drawable(g)
    if ok.empty:
        return None
    split = split_by(ok)
    ok = _placed(ok, split)
    parts = _panels(ok, split)
    roofs = _Roofs.of(ok)
    fig, panel_axes, cols = _canvas(len(parts))
    handles, notes = _draw_roofs(panel_axes, roofs)
    key = _draw_points(panel_axes, parts, ok)
    handles, notes = handles + _ring_key(ok), notes + _ring_notes(ok)
    _frame(panel_axes, cols, ok, roofs)
    handles += key.handles()
    legend(panel_axes[min(cols, len(parts)) - 1], [h for h, _ in handles], [lab for _, lab in handles])
    fig = finish(fig, _title(ok, roofs.dtype), subtitle(g), notes + _closing_notes(g, ok, key, split))
    fig.draw_without_rendering()  # the final layout, on which the M labels are placed
    left_out = sum(
        _m_labels(ax, p, roofs.ridges[0] if roofs.ridges else None)
        for ax, (_, p) in zip(panel_axes, parts, strict=True)
    )
    if left_out:
        add_note(fig, f"{left_out} M label(s) left out where every place beside the point was taken.")
    return fig


def _drawable(g: pd.DataFrame) -> pd.DataFrame:
    """The ok rows that have a point on log axes: FLOPs, bytes and a time, none of them zero."""
    ok = g[(g["status"] == "ok") & g["flops"].notna() & g["bytes_min"].notna() & g["time_us_median"].notna()]
    return ok[(ok["flops"] > 0) & (ok["bytes_min"] > 0)]  # an expert-parallel rank with no pair: no point on log axes


def _placed(ok: pd.DataFrame, split: Optional[str]) -> pd.DataFrame:
    """The rows with where each point goes (ai, tf) and its labels: glabel (its GEMM/TP group), mlabel (its marker)."""
    return ok.assign(
        ai=[metrics.intensity(f, b) for f, b in zip(ok["flops"], ok["bytes_min"], strict=False)],
        tf=[metrics.tflops(f, t) for f, t in zip(ok["flops"], ok["time_us_median"], strict=False)],
        glabel=[_label(r) for _, r in ok.iterrows()],
        # the marker's GEMM: in a panel per TP degree the panel's title says the TP, so one GEMM keeps one shape
        mlabel=[_label(r, tp=split != "tp") for _, r in ok.iterrows()],
    )


@dataclass(frozen=True)
class _Roofs:
    """The ceilings one roofline draws, and the intensities its x axis spans: those measured in the run (bandwidth at
    the largest and smallest problem, the peak's median and maximum; None where the rows have none) and the
    datasheet's of the rows' GPU (None for a GPU it does not know)."""

    dtype: str
    gpu: str
    bw_hi: Optional[float]
    bw_lo: Optional[float]
    peak: Optional[float]
    peak_max: Optional[float]
    sheet: Optional[Datasheet]
    ridges: list[float]  # the measured ridge (by the maximum peak) first where measured, then the datasheet's
    x: np.ndarray

    @classmethod
    def of(cls, ok: pd.DataFrame) -> "_Roofs":
        dtype, gpu = str(ok["dtype"].iloc[0]), str(plotdata.gpu_names(ok).iloc[0])
        bw, peak, sheet = ok["ceiling_bw_gbps"].dropna(), ok["ceiling_tflops"].dropna(), datasheet(gpu)
        measured = len(bw) > 0 and len(peak) > 0
        if not (sheet and dtype in sheet.tflops):
            sheet = None
        ridges = [float(peak.max()) * 1e3 / float(bw.max())] if measured else []
        if sheet:
            ridges.append(sheet.tflops[dtype] * 1e3 / sheet.bw_gbps)
        x = np.geomspace(ok["ai"].min() / 2, max(ok["ai"].max() * 2, max(ridges, default=1.0) * 2.5), 400)
        if not measured:
            return cls(dtype, gpu, None, None, None, None, sheet, ridges, x)
        return cls(dtype, gpu, float(bw.max()), float(bw.min()), float(peak.median()), float(peak.max()), sheet,
                   ridges, x)  # fmt: skip

    @property
    def top(self) -> list[float]:
        """The ceilings' peaks, for the y axis."""
        return ([self.peak_max] if self.peak_max is not None else []) + (
            [self.sheet.tflops[self.dtype]] if self.sheet else []
        )


def _canvas(n: int) -> tuple[Figure, list, int]:
    """The figure with one axes per panel (a grid of shared axes for several), and the grid's columns."""
    rows, cols = _grid(n)
    if n == 1:
        fig, axes = new_figure(8.6, 5.6)
    else:
        side = 4.4 if cols < 3 else 3.9  # inches a panel, so that three columns stay a page wide
        fig, axes = new_figure(3.4 + side * cols, 0.8 + 0.85 * side * rows, rows, cols, sharex=True, sharey=True)
    for i in range(n, rows * cols):
        axes[i // cols, i % cols].remove()  # an empty cell of the grid
    return fig, [axes[i // cols, i % cols] for i in range(n)], cols


def _draw_roofs(panel_axes: list, roofs: _Roofs) -> tuple[list, list[str]]:
    """Every panel's ceilings on log axes -> (the legend's entries for them, the footnotes about them)."""
    for ax in panel_axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        if roofs.peak is not None:
            _draw_measured(ax, roofs)
        if roofs.sheet:
            _draw_datasheet(ax, roofs)
    handles, notes = [], []
    if roofs.peak is not None:
        handles += _measured_key(roofs)
        notes.append(
            f"Solid: ceilings measured in this run: {roofs.bw_hi:.0f} GB/s, the streaming-read bandwidth at the "
            f"largest problem's size (shaded down to {roofs.bw_lo:.0f} GB/s, the bandwidth at the smallest: each "
            f"point's own bound uses the bandwidth at its size), and {roofs.peak:.0f} TFLOP/s, the best cuBLAS "
            f"{roofs.dtype} median over a ladder of GEMM sizes."
        )
    else:
        notes.append("No measured ceilings in these rows (a CPU run, or no ceiling measurement).")
    if roofs.sheet:
        sp, sb = roofs.sheet.tflops[roofs.dtype], roofs.sheet.bw_gbps
        handles.append((Line2D([], [], color="0.333", lw=1.2, ls="--"),
                        f"datasheet {roofs.sheet.product}: {sb / 1e3:.2f} TB/s, {sp:.0f} TFLOP/s"))  # fmt: skip
    else:
        notes.append(unknown_gpu_note(roofs.gpu))
    return handles, notes


def _draw_measured(ax, roofs: _Roofs) -> None:
    """The measured roof (solid), its band of bandwidths and its ridge, with the ridge's intensity on a dotted drop
    line written at the bottom, where no point sits."""
    x, bw_hi, bw_lo, pk = roofs.x, roofs.bw_hi, roofs.bw_lo, roofs.peak
    assert bw_hi is not None and bw_lo is not None and pk is not None
    ridge = pk * 1e3 / bw_hi
    mem = x <= ridge
    ax.plot(x[mem], x[mem] * bw_hi / 1e3, color="black", lw=1.6, gid="ceiling:measured:memory")
    ax.plot(x[~mem], np.full((~mem).sum(), pk), color="black", lw=1.6, gid="ceiling:measured:compute")
    ax.fill_between(x, np.minimum(x * bw_lo / 1e3, pk), np.minimum(x * bw_hi / 1e3, pk), color="black", alpha=0.07,
                    lw=0, gid="ceiling:measured:band")  # fmt: skip
    ax.plot([ridge], [pk], marker="o", ms=7, mfc="white", mec="black", mew=1.5, ls="none", gid="ridge:measured")
    ax.axvline(ridge, color="black", lw=0.8, ls=":", gid="ridge:measured:line")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, 0.02), xycoords=("data", "axes fraction"), xytext=(4, 0),
                textcoords="offset points", fontsize=8, rotation=90, va="bottom",
                gid="ridge:measured:label")  # fmt: skip


def _measured_key(roofs: _Roofs) -> list:
    assert roofs.bw_hi is not None and roofs.bw_lo is not None
    return [
        (Line2D([], [], color="black", lw=1.6), f"measured: {roofs.bw_hi / 1e3:.2f} TB/s, {roofs.peak:.0f} TFLOP/s"),
        (Patch(facecolor="black", alpha=0.12, lw=0),
         f"bandwidth at the problems' sizes: {roofs.bw_lo / 1e3:.2f}–{roofs.bw_hi / 1e3:.2f} TB/s"),
    ]  # fmt: skip


def _draw_datasheet(ax, roofs: _Roofs) -> None:
    """The datasheet's roof (dashed) and its ridge."""
    assert roofs.sheet is not None
    sp, sb = roofs.sheet.tflops[roofs.dtype], roofs.sheet.bw_gbps
    ax.plot(roofs.x, np.minimum(roofs.x * sb / 1e3, sp), color="0.333", lw=1.2, ls="--", gid="ceiling:datasheet")
    ax.plot([sp * 1e3 / sb], [sp], marker="o", ms=5, mfc="white", mec="0.333", ls="none", gid="ridge:datasheet")


@dataclass(frozen=True)
class _Key:
    """Who wears what: a marker per GEMM (hollow from the 15th to the 28th), a colour per variant."""

    gemms: list[str]
    marker: dict[str, str]
    hollow: dict[str, bool]
    variants: list[str]
    palette: dict[str, str]

    @classmethod
    def of(cls, ok: pd.DataFrame) -> "_Key":
        gemms = list(dict.fromkeys(ok["mlabel"]))
        variants = sorted(ok["variant"].astype(str).unique())
        return cls(
            gemms,
            {gl: MARKERS[i % len(MARKERS)] for i, gl in enumerate(gemms)},
            {gl: len(MARKERS) <= i < 2 * len(MARKERS) for i, gl in enumerate(gemms)},
            variants,
            colors(variants),
        )

    def handles(self) -> list:
        """The legend's entries: a dot per variant in its colour, then a grey marker per GEMM."""
        dots = [(Line2D([], [], ls="none", marker="o", ms=6, color=self.palette[v]), v) for v in self.variants]
        return dots + [
            (Line2D([], [], ls="none", marker=self.marker[gl], ms=6, color="0.4",
                    mfc="none" if self.hollow[gl] else "0.4"), gl)
            for gl in self.gemms
        ]  # fmt: skip


def _draw_points(panel_axes: list, parts: list, ok: pd.DataFrame) -> _Key:
    """Each panel's points (and its title), the points above their own roofline ringed in red."""
    key = _Key.of(ok)
    variants = key.variants
    # variants within a few % of each other sit on one spot: each later variant's marker is smaller, so every
    # colour stays visible as a ring around the next
    size = dict(zip(variants, np.linspace(64, 16, len(variants)) if len(variants) > 1 else [36], strict=False))
    for ax, (name, p) in zip(panel_axes, parts, strict=True):
        if name is not None:
            ax.set_title(name, fontsize=9)
        groups = sorted(p.groupby(["glabel", "mlabel", "variant"], sort=False), key=lambda x: -size[x[0][2]])
        for (gl, ml, variant), s in groups:
            c, hollow = key.palette[str(variant)], key.hollow[ml]
            # rasterized: in an SVG (a report's figures) thousands of markers as vector shapes made a roofline a
            # third of a megabyte; as one image they weigh a fraction of that, and a PNG is the same either way
            ax.scatter(s["ai"], s["tf"], marker=key.marker[ml], s=size[variant], facecolors="none" if hollow else c,
                       edgecolors=c if hollow else "white", linewidths=1.2 if hollow else 0.4, zorder=3,
                       gid=f"points:{gl}:{variant}", rasterized=True)  # fmt: skip
        over = above_ceiling(p)
        if len(over):
            over = p.loc[over.index]
            ax.scatter(over["ai"], over["tf"], s=140, facecolors="none", edgecolors="red", linewidths=1.4, zorder=4,
                       gid="above-ceiling")  # fmt: skip
    return key


def _ring_key(ok: pd.DataFrame) -> list:
    """The legend's entry for the red rings, where there are some."""
    if above_ceiling(ok).empty:
        return []
    return [
        (Line2D([], [], ls="none", marker="o", ms=10, mfc="none", mec="red", mew=1.4), "above its measured ceiling")
    ]


def _ring_notes(ok: pd.DataFrame) -> list[str]:
    """Why the ringed points are above their roofline: above the memory ceiling, or above the compute ceiling."""
    over = above_ceiling(ok)
    if over.empty:
        return []
    over = ok.loc[over.index]
    mem = sum(_memory_bound(r) for _, r in over.iterrows())
    why = [f"{mem} above the memory ceiling (data from cache, or a wrong byte count)"] if mem else []
    if len(over) > mem:
        why.append(f"{len(over) - mem} above the compute ceiling (the measured peak, the best cuBLAS median over a "
                   f"ladder of sizes, is below what this shape reaches at these clocks)")  # fmt: skip
    return [
        f"Red rings: {len(over)} point(s) faster than their own measured roofline "
        f"({over['pct_of_roofline'].max():.1f}% at most), never a win: {'; '.join(why)}."
    ]


def _frame(panel_axes: list, cols: int, ok: pd.DataFrame, roofs: _Roofs) -> None:
    """Every panel's limits and grid; x labels on the lowest panel of each column, y labels on the first."""
    ymax = max([ok["tf"].max()] + roofs.top)
    n_panels = len(panel_axes)
    for n, ax in enumerate(panel_axes):
        ax.set_ylim(ok["tf"].min() / 2, ymax * 1.6)
        ax.set_xlim(roofs.x[0], roofs.x[-1])
        ax.grid(True, which="major", alpha=0.3)
        if n + cols >= n_panels:  # the lowest panel of its column: shared x axes show tick labels there only
            ax.tick_params(labelbottom=True)
            # the long form is wider than a panel of a grid: side by side, two would run into each other
            ax.set_xlabel(
                "arithmetic intensity (FLOP per byte of minimum DRAM traffic)"
                if n_panels == 1
                else "FLOP per byte of minimum DRAM traffic"
            )
        if n % cols == 0:
            ax.set_ylabel("TFLOP/s")


def _closing_notes(g: pd.DataFrame, ok: pd.DataFrame, key: _Key, split: Optional[str]) -> list[str]:
    """The footnotes after the ceilings' and the rings': markers shared, what M and the bytes are, the panels, and
    what is not drawn."""
    notes = []
    if len(key.gemms) > 2 * len(MARKERS):
        notes.append(f"{len(key.gemms)} GEMMs share {2 * len(MARKERS)} marker shapes: narrow with --shapes or --tp.")
    notes.append(
        "Numbers beside the points: M. Minimum bytes: A and B read once, C written once"
        + (" (MoE: the weights of the experts hit)." if (ok["E"] > 1).any() else ".")
    )
    if split is not None:
        notes.append(
            f"{ok['glabel'].nunique()} GEMM/TP groups: one panel per {'TP degree' if split == 'tp' else 'GEMM'}, "
            f"on shared axes."
        )
    notes.append(plotdata.not_drawn(g))
    return notes


def _title(ok: pd.DataFrame, dtype: str) -> str:
    sets = ", ".join(sorted(ok["shape_set"].astype(str).unique()))
    tps = sorted(ok["tp"].unique())
    tp = f", TP={tps[0]}" if len(tps) == 1 and tps[0] > 1 else ""
    scaling = ok["scaling"].iloc[0] if "scaling" in ok.columns else None
    accum = ok["fp8_accum"].iloc[0] if "fp8_accum" in ok.columns else None
    return f"Roofline: {sets}{tp}, {dtypes.label(dtype, scaling, accum)}"
