"""`gemmbench plot --kind layer`: a layer table (gemmbench.engine.layer) as stacked bars per M, one pair of bars (eager,
graph) per plan (the variants the layer ran): the lower part is the kernel-time sum, the hatched part what the
launches add on top of it.  The question the figure answers is the seed's (docs/SEEDS.md, TK-GEMM §5): how much
of a layer is launch gaps, and how much of that a CUDA graph removes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.patches import Patch

from gemmbench import dtypes
from gemmbench.plot import data as plotdata
from gemmbench.plot.style import (
    Drawn,
    colors,
    dtype_title,
    finish,
    headroom,
    legend,
    lighter,
    new_figure,
    shown,
    subtitle,
)
from gemmbench.results.metrics import GAP_NOISE, gap_below_zero

FIGURE_COLS = ("shape_set", "layer_kind", "tp", "ep", "dtype", "scaling", "fp8_accum", "layers")
MODES = ("eager", "graph")
GAP_COLUMN = {"eager": "gap_us", "graph": "graph_gap_us"}
REASON_COLUMN = {"graph": "graph_reason"}  # why a plan has no time in a mode, where the table says


def figures(layers: pd.DataFrame) -> list[Drawn]:
    rows = layers[layers["part"] == "layer"]
    keyed = plotdata.groups(rows, FIGURE_COLS)
    out = []
    for key, g in keyed:
        layers = f"-x{key['layers']}" if (key.get("layers") or 1) > 1 else ""
        ep = f"-ep{key['ep']}" if (key.get("ep") or 1) > 1 else ""
        kind = f"-{key['layer_kind']}" if key.get("layer_kind") else ""
        # fp8-block, fp8-fast; fp8 per tensor and precise as before
        dt = dtypes.label(key["dtype"], key.get("scaling"), key.get("fp8_accum")).replace(" ", "-")
        stem = re.sub(r"[^A-Za-z0-9._=+-]+", "_", f"layer-{key['shape_set']}{kind}-tp{key['tp']}{ep}-{dt}{layers}")
        fig = figure(g, key)
        out.append(Drawn(stem, key, fig, note=None if fig is not None else f"{stem}: nothing to draw (no ok layer)"))
    return out


def figure(g: pd.DataFrame, key: dict) -> Optional[Figure]:
    ok = g[(g["status"] == "ok") & g["eager_us"].notna()]
    if ok.empty:
        return None
    plans = plotdata.series(ok)  # one bar group per plan (the layer row's variant), per run where two share an M
    at = _Slots.of(plans, ok)
    fig, axes = new_figure(max(6.0, 1.2 + 0.45 * at.bars * len(at.ms)), 4.2)
    ax = axes[0][0]
    notes: list[str] = []
    palette = colors(p for p, _ in plans)  # one colour per plan: two plans that share a first kernel still differ
    handles, labels, values = [], [], []
    for i, (plan, s) in enumerate(plans):
        for mode in MODES:
            handle, texts, said = _bars(ax, at, i, (plan, s), mode, palette[plan])
            notes += said
            values += texts
            if handle is not None:
                handles.append(handle)
                labels.append(f"{plan}, {mode}")
    _axes(ax, at.ms, handles, labels)
    notes.append(
        "Host wall time per layer (GPU idle and L2 emptied before, synchronised after); kernels: each step "
        "timed alone with cold L2, summed. Runs: " + ", ".join(sorted({shown(r) for r in ok["run_id"]}))
    )
    fig = finish(fig, _title(ok, key), subtitle(ok, how="gemmbench layer"), notes)
    headroom(ax, values)  # the totals written above the bars end inside the frame
    return fig


def _total(r, mode: str) -> Optional[float]:
    """A layer row's time per layer in one mode (eager_us, graph_us); None where it has none."""
    t = None if r is None else r.get(f"{mode}_us")
    return None if t is None or pd.isna(t) else float(t)


@dataclass(frozen=True)
class _Slots:
    """Where the bars go: each M's bars side by side, centred on its tick; only the (plan, mode) pairs measured at
    that M take a slot (a --best-from layer runs another plan at each M; a plan without graph time has no graph bar)."""

    ms: list[int]
    rows: list[dict]  # per plan: its rows by M
    at: dict[int, list[tuple[int, str]]]  # M -> its (plan index, mode) pairs, left to right

    @classmethod
    def of(cls, plans: list, ok: pd.DataFrame) -> "_Slots":
        ms = sorted({int(m) for m in ok["M"]})
        rows = [{int(r["M"]): r for _, r in s.iterrows()} for _, s in plans]
        at = {
            m: [(i, mode) for i in range(len(plans)) for mode in MODES if _total(rows[i].get(m), mode) is not None]
            for m in ms
        }
        return cls(ms, rows, at)

    @property
    def bars(self) -> int:
        return max(len(v) for v in self.at.values())

    @property
    def width(self) -> float:
        return 0.8 / self.bars

    def x(self, k: int, m: int, i: int, mode: str) -> float:
        return k + self.width * (self.at[m].index((i, mode)) - (len(self.at[m]) - 1) / 2)


def _bars(ax, at: _Slots, i: int, plan: tuple, mode: str, c: str) -> tuple[Optional[tuple], list, list[str]]:
    """One plan's bars in one mode, each a kernel part and a hatched gap part above it, its total written on top ->
    (its legend entry, None where it has no bar; the totals' texts; the notes about it)."""
    name, s = plan
    x, kern, gap, totals, noise = [], [], [], [], []
    for k, m in enumerate(at.ms):
        r, t = at.rows[i].get(m), _total(at.rows[i].get(m), mode)
        if t is None:
            continue
        x.append(at.x(k, m, i, mode))
        kern.append(r["kernel_us"])
        gap.append(max(t - r["kernel_us"], 0.0))  # a total below the sum: noise, drawn as no gap
        totals.append((m, t))
        if gap_below_zero(r.get(GAP_COLUMN[mode])):
            noise.append(m)
    if not x:
        reasons = sorted({str(r) for r in s[REASON_COLUMN[mode]].dropna()}) if mode in REASON_COLUMN else []
        return None, [], [f"{name}: no {mode} time" + (f" ({'; '.join(reasons)})" if reasons else "")]
    # metrics.gap_note: a gap below zero is noise, not a cost
    notes = (
        [f"{name}, {mode}: gap N/A at M = {', '.join(map(str, noise))} ({GAP_NOISE.format(mode=mode)})"]
        if noise
        else []
    )
    # the graph bar in the plan's colour mixed with white (not transparency: the grid would show through)
    face = c if mode == "eager" else lighter(c)
    kernels = dict(facecolor=face, edgecolor=c, linewidth=0.8)
    gaps = dict(facecolor="white", edgecolor=c, linewidth=0.8, hatch="///")
    ax.bar(x, kern, at.width * 0.92, gid=f"kernels:{name}:{mode}", **kernels)
    ax.bar(x, gap, at.width * 0.92, bottom=kern, gid=f"gaps:{name}:{mode}", **gaps)
    texts = [
        ax.text(xi, k_ + g_, f" {t:.0f}" + (", gap N/A" if m in noise else ""), ha="center", va="bottom", fontsize=6.5,
                rotation=90, gid=f"value:{name}:{mode}:{m}")
        for xi, k_, g_, (m, t) in zip(x, kern, gap, totals, strict=False)
    ]  # fmt: skip
    # the key of a bar is the bar itself: its kernel part beside its gap part, in its own colours
    return (Patch(**kernels), Patch(**gaps)), texts, notes


def _axes(ax, ms: list[int], handles: list, labels: list[str]) -> None:
    """Ticks at the Ms, the axes' labels, the grid, and the legend that says how to read a bar."""
    ax.set_xticks(np.arange(len(ms)), [str(m) for m in ms])
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("µs per layer")
    ax.grid(True, axis="y", alpha=0.3)
    legend(
        ax,
        handles,
        labels,
        title="each M: eager bar, then graph bar (lighter)\nleft, solid: kernel time (sum, each alone)\n"
        "right, hatched: launch gaps (time − kernels)",
        handler_map={tuple: HandlerTuple(ndivide=None, pad=0.0)},
        handlelength=3.2,
    )


def _title(ok: pd.DataFrame, key: dict) -> str:
    steps = int(ok["steps"].iloc[0])
    layers = int(key.get("layers") or 1)
    return (
        f"{shown(key['shape_set'])}{' ' + key['layer_kind'] if key.get('layer_kind') else ''} layer ({steps} steps), "
        f"TP={shown(key['tp'])}"
        + (f", EP={key['ep']}" if (key.get("ep") or 1) > 1 else "")
        + f", {dtype_title(key)}: eager vs CUDA graph"
        + (f", {layers} layers per sample" if layers > 1 else "")
    )
