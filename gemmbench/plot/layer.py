"""`gemmbench plot --kind layer`: a layer table (gemmbench.engine.layer) as stacked bars per M, one pair of bars (eager,
graph) per plan (the variants the layer ran): the lower part is the kernel-time sum, the hatched part what the
launches add on top of it.  The question the figure answers is the seed's (docs/SEEDS.md, TK-GEMM §5): how much
of a layer is launch gaps, and how much of that a CUDA graph removes."""

from __future__ import annotations

import re
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

FIGURE_COLS = ("shape_set", "layer_kind", "tp", "ep", "dtype", "scaling", "layers")
MODES = ("eager", "graph")
GAP_COLUMN = {"eager": "gap_us", "graph": "graph_gap_us"}


def figures(layers: pd.DataFrame) -> list[Drawn]:
    rows = layers[layers["part"] == "layer"]
    keyed = plotdata.groups(rows, FIGURE_COLS)
    out = []
    for key, g in keyed:
        layers = f"-x{key['layers']}" if (key.get("layers") or 1) > 1 else ""
        ep = f"-ep{key['ep']}" if (key.get("ep") or 1) > 1 else ""
        kind = f"-{key['layer_kind']}" if key.get("layer_kind") else ""
        dt = dtypes.label(key["dtype"], key.get("scaling")).replace(" ", "-")  # fp8-block; fp8 per tensor as before
        stem = re.sub(r"[^A-Za-z0-9._=+-]+", "_", f"layer-{key['shape_set']}{kind}-tp{key['tp']}{ep}-{dt}{layers}")
        fig = figure(g, key)
        out.append(Drawn(stem, key, fig, note=None if fig is not None else f"{stem}: nothing to draw (no ok layer)"))
    return out


def figure(g: pd.DataFrame, key: dict) -> Optional[Figure]:
    ok = g[(g["status"] == "ok") & g["eager_us"].notna()]
    if ok.empty:
        return None
    plans = plotdata.series(ok)  # one bar group per plan (the layer row's variant), per run where two share an M
    ms = sorted({int(m) for m in ok["M"]})

    def total(r, mode: str) -> Optional[float]:
        t = None if r is None else r.get(f"{mode}_us")
        return None if t is None or pd.isna(t) else float(t)

    rows = [{int(r["M"]): r for _, r in s.iterrows()} for _, s in plans]
    # each M's bars side by side, centred on its tick: only the (plan, mode) pairs measured at that M take a slot
    # (a --best-from layer runs another plan at each M; a plan without graph time has no graph bar)
    slots = {
        m: [(i, mode) for i in range(len(plans)) for mode in MODES if total(rows[i].get(m), mode) is not None]
        for m in ms
    }
    bars = max(len(v) for v in slots.values())
    width = 0.8 / bars
    fig, axes = new_figure(max(6.0, 1.2 + 0.45 * bars * len(ms)), 4.2)
    ax = axes[0][0]
    notes = []
    palette = colors(p for p, _ in plans)  # one colour per plan: two plans that share a first kernel still differ
    handles, labels, values = [], [], []
    for i, (plan, s) in enumerate(plans):
        c = palette[plan]
        for mode in MODES:
            x, kern, gap, totals, noise = [], [], [], [], []
            for k, m in enumerate(ms):
                r, t = rows[i].get(m), total(rows[i].get(m), mode)
                if t is None:
                    continue
                x.append(k + width * (slots[m].index((i, mode)) - (len(slots[m]) - 1) / 2))
                kern.append(r["kernel_us"])
                gap.append(max(t - r["kernel_us"], 0.0))  # a total below the sum: noise, drawn as no gap
                totals.append((m, t))
                if gap_below_zero(r.get(GAP_COLUMN[mode])):
                    noise.append(m)
            if noise:  # metrics.gap_note: a gap below zero is noise, not a cost
                at = ", ".join(map(str, noise))
                notes.append(f"{plan}, {mode}: gap N/A at M = {at} ({GAP_NOISE.format(mode=mode)})")
            if not x:
                reasons = sorted({str(r) for r in s["graph_reason"].dropna()}) if mode == "graph" else []
                notes.append(f"{plan}: no {mode} time" + (f" ({'; '.join(reasons)})" if reasons else ""))
                continue
            # the graph bar in the plan's colour mixed with white (not transparency: the grid would show through)
            face = c if mode == "eager" else lighter(c)
            kernels = dict(facecolor=face, edgecolor=c, linewidth=0.8)
            gaps = dict(facecolor="white", edgecolor=c, linewidth=0.8, hatch="///")
            ax.bar(x, kern, width * 0.92, gid=f"kernels:{plan}:{mode}", **kernels)
            ax.bar(x, gap, width * 0.92, bottom=kern, gid=f"gaps:{plan}:{mode}", **gaps)
            # the key of a bar is the bar itself: its kernel part beside its gap part, in its own colours
            handles.append((Patch(**kernels), Patch(**gaps)))
            labels.append(f"{plan}, {mode}")
            for xi, k_, g_, (m, t) in zip(x, kern, gap, totals, strict=False):
                values.append(
                    ax.text(
                        xi,
                        k_ + g_,
                        f" {t:.0f}" + (", gap N/A" if m in noise else ""),
                        ha="center",
                        va="bottom",
                        fontsize=6.5,
                        rotation=90,
                        gid=f"value:{plan}:{mode}:{m}",
                    )
                )
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
    steps = int(ok["steps"].iloc[0])
    layers = int(key.get("layers") or 1)
    title = (
        f"{shown(key['shape_set'])}{' ' + key['layer_kind'] if key.get('layer_kind') else ''} layer ({steps} steps), "
        f"TP={shown(key['tp'])}"
        + (f", EP={key['ep']}" if (key.get("ep") or 1) > 1 else "")
        + f", {dtype_title(key)}: eager vs CUDA graph"
        + (f", {layers} layers per sample" if layers > 1 else "")
    )
    notes.append(
        "Host wall time per layer (GPU idle and L2 emptied before, synchronised after); kernels: each step "
        "timed alone with cold L2, summed. Runs: " + ", ".join(sorted({shown(r) for r in ok["run_id"]}))
    )
    fig = finish(fig, title, subtitle(ok, how="gemmbench layer"), notes)
    headroom(ax, values)  # the totals written above the bars end inside the frame
    return fig
