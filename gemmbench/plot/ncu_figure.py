"""The Nsight Compute profile figure (`gemmbench plot --kind profile`): per variant and M, DRAM throughput against the
peak ncu reports and the datasheet's, L1 and L2 hit rates, from the summed ncu row of each profiled cell.  Same
conventions as gemmbench.plot.figures."""

from __future__ import annotations

from typing import Optional

import pandas as pd
from matplotlib.figure import Figure

from gemmbench.plot import data as plotdata
from gemmbench.plot.datasheet import Datasheet, datasheet, unknown_gpu_note
from gemmbench.plot.style import colors, finish, gemm_title, headroom, legend, new_figure, shown, subtitle
from gemmbench.profile.ncu import SUM_KERNEL
from gemmbench.results.store import CELL_KEY, StoreError


def summed_profiles(profiles: pd.DataFrame) -> pd.DataFrame:
    """One row per profiled cell: its summed ncu row (ncu_kernel == ncu.SUM_KERNEL; a failed cell's row has no
    kernel), the latest where a cell was profiled twice."""
    need = ("ncu_kernel", "ncu_dram_gbps", "ncu_dram_peak_gbps", "ncu_l1_hit_pct", "ncu_l2_hit_pct")
    missing = [c for c in need if c not in profiles.columns]
    if missing:
        raise StoreError(f"the profile tables have no {missing[0]} column: profile with `gemmbench profile --ncu`")
    rows = profiles[(profiles["ncu_kernel"] == SUM_KERNEL) | (profiles["status"] != "ok")]
    return rows.sort_values("timestamp").drop_duplicates(list(CELL_KEY), keep="last").sort_index()


# the three panels: the column drawn, the y label
PANELS = (
    ("ncu_dram_gbps", "DRAM throughput (GB/s)"),
    ("ncu_l1_hit_pct", "L1 hit rate (%)"),
    ("ncu_l2_hit_pct", "L2 hit rate (%)"),
)
DRAM = PANELS[0][0]


def profile(g: pd.DataFrame) -> Optional[Figure]:
    """DRAM throughput against the peak, L1 and L2 hit rates of each variant (bars) at each M, for one GEMM and
    dtype, from the summed rows of ncu profiles.  None when no row is ok."""
    ok = g[g["status"] == "ok"]
    if ok.empty:
        return None
    k = plotdata.groups(g, plotdata.PROFILE_COLS)[0][0]
    gpu = str(plotdata.gpu_names(ok).iloc[0])
    sheet = datasheet(gpu)
    fig, axes = new_figure(11.0, 4.0, ncols=3, width_ratios=[1.4, 1, 1])
    variants = sorted(ok["variant"].astype(str).unique())
    palette = colors(variants)
    values = {  # axes -> the value labels on its bars
        ax: _panel(ax, ok, palette, col, ylabel, moe=(k.get("E") or 1) > 1)
        for ax, (col, ylabel) in zip(axes[0], PANELS, strict=False)
    }
    dram = axes[0, 0]
    values[dram].append(_draw_peaks(dram, ok, sheet))
    notes = [
        "Nsight Compute, one eager launch per cell, caches flushed, clocks not locked; the sum over a cell's "
        "kernels. Labels on the bars: DRAM throughput as % of the peak ncu reports (bytes/cycle × DRAM clock).",
        f"Dashed: datasheet {sheet.product} {sheet.bw_gbps / 1e3:.2f} TB/s." if sheet else unknown_gpu_note(gpu),
        "L1 hit rate is 0 for loads through TMA (they bypass L1).",
        plotdata.not_drawn(g),
        ("Profile run: " if ok["run_id"].nunique() == 1 else "Profile runs: ")
        + ", ".join(sorted({shown(r) for r in ok["run_id"]})),
    ]
    legend(axes[0, -1], *axes[0, 0].get_legend_handles_labels())
    fig = finish(fig, f"DRAM throughput and cache hit rates: {gemm_title(k)}", subtitle(g, "Nsight Compute"), notes)
    for ax, texts in values.items():
        headroom(ax, texts)  # the values written above the bars (a 100% hit rate too) end inside the frame
    return fig


def _panel(ax, ok: pd.DataFrame, palette: dict, col: str, ylabel: str, moe: bool) -> list:
    """One panel: a bar per variant (palette's keys, in the order drawn) at each M, each labelled; returns the
    labels."""
    variants = list(palette)
    ms = sorted(int(m) for m in ok["M"].unique())
    width = 0.8 / len(variants)
    values: list = []
    for i, v in enumerate(variants):
        s = ok[ok["variant"] == v].set_index("M")
        xs = [j + (i - (len(variants) - 1) / 2) * width for j, m in enumerate(ms) if m in s.index]
        ys = [float(s.loc[m, col]) for m in ms if m in s.index]
        bars = ax.bar(xs, ys, width * 0.95, color=palette[v], label=v, gid=f"bars:{col}:{v}")
        if col == DRAM:
            pct = [float(s.loc[m, DRAM] / s.loc[m, "ncu_dram_peak_gbps"] * 100) for m in ms if m in s.index]
            texts = ax.bar_label(bars, [f"{p:.0f}%" for p in pct], fontsize=6.5, padding=1)
        else:  # labels of rates under 1% would run into each other at the axis: one note says so instead
            texts = ax.bar_label(
                bars, ["" if y < 1 else f"{y:.1f}" if y < 10 else f"{y:.0f}" for y in ys], fontsize=6.5, padding=1
            )
            if any(y < 1 for y in ys) and not any(t.get_gid() == "under1" for t in ax.texts):
                ax.text(0.02, 0.97, "unlabelled bars: < 1%", transform=ax.transAxes, fontsize=7, va="top", gid="under1")
        for t in texts:
            t.set_gid(f"value:{col}:{v}")
        values.extend(texts)
    ax.set_xticks(range(len(ms)), [str(m) for m in ms])
    ax.set_xlabel("tokens (M)" if moe else "M")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if col != DRAM:
        ax.set_ylim(0, 105)
    return values


def _draw_peaks(dram, ok: pd.DataFrame, sheet: Optional[Datasheet]):
    """The DRAM panel's peaks: ncu's (solid, labelled) and the datasheet's (dashed); returns the label."""
    peak = float(ok["ncu_dram_peak_gbps"].median())
    dram.axhline(peak, color="black", lw=1.2, gid="peak:ncu")
    # x in axes fraction: at a data x left of the first bar it started outside the frame
    label = dram.text(0.01, peak, f"peak (ncu) {peak / 1e3:.2f} TB/s", transform=dram.get_yaxis_transform(),
                      fontsize=7.5, va="bottom", gid="peak:ncu:label")  # fmt: skip
    if sheet:
        dram.axhline(sheet.bw_gbps, color="0.333", lw=1.0, ls="--", gid="peak:datasheet")
    dram.set_ylim(0, max(peak, sheet.bw_gbps if sheet else 0, ok["ncu_dram_gbps"].max()) * 1.15)
    return label
