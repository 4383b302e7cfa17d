"""`gemmbench plot --kind layer`: a layer table (gemmbench.layer) as stacked bars per M, one pair of bars (eager,
graph) per plan (the variants the layer ran): the lower part is the kernel-time sum, the hatched part what the
launches add on top of it.  The question the figure answers is the seed's (docs/SEEDS.md, TK-GEMM §5): how much
of a layer is launch gaps, and how much of that a CUDA graph removes."""

from __future__ import annotations

import re
from typing import Optional

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gemmbench.plot import data as plotdata
from gemmbench.plot.style import Drawn, color, finish, legend, new_figure, subtitle

FIGURE_COLS = ("shape_set", "tp", "dtype", "layers")
MODES = ("eager", "graph")


def figures(layers: pd.DataFrame) -> list[Drawn]:
    rows = layers[layers["part"] == "layer"]
    keyed = plotdata.groups(rows, FIGURE_COLS)
    out = []
    for key, g in keyed:
        layers = f"-x{key['layers']}" if (key.get("layers") or 1) > 1 else ""
        stem = re.sub(r"[^A-Za-z0-9._=+-]+", "_", f"layer-{key['shape_set']}-tp{key['tp']}-{key['dtype']}{layers}")
        fig = figure(g, key)
        out.append(Drawn(stem, key, fig, note=None if fig is not None else f"{stem}: nothing to draw (no ok layer)"))
    return out


def figure(g: pd.DataFrame, key: dict) -> Optional[Figure]:
    ok = g[(g["status"] == "ok") & g["eager_us"].notna()]
    if ok.empty:
        return None
    plans = plotdata.series(ok)  # one bar group per plan (the layer row's variant), per run where two share an M
    ms = sorted({int(m) for m in ok["M"]})
    bars = len(plans) * len(MODES)
    width = 0.8 / bars
    fig, axes = new_figure(max(6.0, 1.2 + 0.45 * bars * len(ms)), 4.2)
    ax = axes[0][0]
    notes = []
    for i, (plan, s) in enumerate(plans):
        c = color(plan.split("+")[0])
        by_m = {int(r["M"]): r for _, r in s.iterrows()}
        for j, mode in enumerate(MODES):
            x, kern, gap, totals = [], [], [], []
            for k, m in enumerate(ms):
                r = by_m.get(m)
                total = None if r is None else r.get(f"{mode}_us")
                if total is None or pd.isna(total):
                    continue
                x.append(k - 0.4 + width * (i * len(MODES) + j + 0.5))
                kern.append(r["kernel_us"])
                gap.append(max(total - r["kernel_us"], 0.0))  # a total below the sum: noise, drawn as no gap
                totals.append(total)
            if not x:
                reasons = sorted({str(r) for r in s["graph_reason"].dropna()}) if mode == "graph" else []
                notes.append(f"{plan}: no {mode} time" + (f" ({'; '.join(reasons)})" if reasons else ""))
                continue
            alpha = 1.0 if mode == "eager" else 0.55
            ax.bar(x, kern, width * 0.92, color=c, alpha=alpha, gid=f"kernels:{plan}:{mode}")
            ax.bar(
                x,
                gap,
                width * 0.92,
                bottom=kern,
                color="white",
                edgecolor=c,
                hatch="///",
                alpha=alpha,
                gid=f"gaps:{plan}:{mode}",
            )
            for xi, k_, g_, t in zip(x, kern, gap, totals, strict=False):
                ax.text(xi, k_ + g_, f" {t:.0f}", ha="center", va="bottom", fontsize=6.5, rotation=90)
    ax.set_xticks(np.arange(len(ms)), [str(m) for m in ms])
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("µs per layer")
    ax.grid(True, axis="y", alpha=0.3)
    handles = [Patch(color=color(p.split("+")[0]), label=p) for p, _ in plans]
    handles += [
        Patch(facecolor="#777777", label="kernel time (sum, each alone)"),
        Patch(facecolor="white", edgecolor="#777777", hatch="///", label="launch gaps (time - kernels)"),
    ]
    legend(ax, handles, [h.get_label() for h in handles], title="each M: eager bar, then graph bar (lighter)")
    steps = int(ok["steps"].iloc[0])
    layers = int(key.get("layers") or 1)
    title = f"{key['shape_set']} layer ({steps} steps), TP={key['tp']}, {key['dtype']}: eager vs CUDA graph" + (
        f", {layers} layers per sample" if layers > 1 else ""
    )
    notes.append(
        "Host wall time per layer (GPU idle and L2 emptied before, synchronised after); kernels: each step "
        "timed alone with cold L2, summed. Runs: " + ", ".join(sorted(ok["run_id"].astype(str).unique()))
    )
    return finish(fig, title, subtitle(ok, how="gemmbench layer"), notes)
