"""`gemmbench plot` and `gemmbench report` on committed H100 results: the figures' series, axes, ceilings and
footnote counts (read from the matplotlib objects, never from pixels), the report's tables against the data, and
the one-line errors.  Expected numbers are computed here from the DataFrame, not with the code under test."""

from __future__ import annotations

import os

os.environ["MPLBACKEND"] = "Agg"  # before anything imports matplotlib: no GUI backend in a test

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_cli import bad, invoke, text

from gemmbench.plot import data as plotdata
from gemmbench.plot import figures as plots
from gemmbench.plot import report
from gemmbench.plot.datasheet import datasheet
from gemmbench.results import side_tables, store

ROOT = Path(__file__).resolve().parent.parent
# the committed H100 runs (scripts/bench/*.sh measured them; docs/BENCHMARKS.md has their tables)
# Llama3-70B's 5 GEMMs at TP=8, M 512-4096, fp8 per tensor + bf16
TP8 = ROOT / "benchmarks/data/prefill/prefill.parquet"
ATTN_TP8 = ["attn_*"]  # --shapes for its attention GEMMs: the README's roofline
ATTN = ROOT / "benchmarks/data/decode/attn.parquet"  # attn at TP=1, decode M 1-64, one run ...
SHIPPED = ROOT / "gemmbench/baselines/h100.parquet"  # ... and the shipped baseline: its cells again, per tensor and row
MLP = ROOT / "benchmarks/data/decode/mlp.parquet"  # the MLP GEMMs at TP=1, decode M
MOE_COLD = ROOT / "benchmarks/data/moe/moe-cold.parquet"  # Mixtral's expert GEMMs at TP=2, 1-4096 tokens
MOE_STREAM = ROOT / "benchmarks/data/moe/moe-stream.parquet"  # torch_moe_loop cells skipped (not capturable)
PROFILE = ROOT / "benchmarks/data/profile/attn-m16.parquet"  # ncu of ATTN's GEMMs at M=16
GPU = "NVIDIA H100 80GB HBM3"


def prepared(paths, baseline=None, df=None, **filters) -> pd.DataFrame:
    """The rows a plot draws, as `gemmbench plot` prepares them."""
    f = plotdata.Filters(**filters)
    rows = plotdata.read(paths).runs if df is None else df
    return plotdata.keep_variants(plotdata.with_speedups(plotdata.select(rows, f), baseline), f)


def one(drawn, stem):
    found = [d for d in drawn if d.stem == stem]
    assert len(found) == 1, [d.stem for d in drawn]
    return found[0].figure


def lines(ax, prefix="series:") -> dict:
    return {ln.get_gid()[len(prefix) :]: ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith(prefix)}


def gid(ax, name):
    found = [a for a in ax.get_children() if a.get_gid() == name]
    assert len(found) == 1, name
    return found[0]


def title(fig) -> str:
    return fig._suptitle.get_text()


def footnote(fig) -> str:
    notes = [t.get_text() for t in fig.texts if t.get_gid() == "footnote"]
    assert len(notes) == 1
    return " ".join(notes[0].split())  # unwrapped


def speedups_by_hand(df: pd.DataFrame, gemm: str, dtype: str, baseline: str) -> pd.DataFrame:
    """baseline time / variant time of the ok rows, joined on M: what every speedup series must show."""
    g = df[(df["gemm"] == gemm) & (df["dtype"] == dtype) & (df["status"] == "ok")]
    base = g[g["variant"] == baseline].set_index("M")["time_us_median"]
    return g.assign(expected=g["M"].map(base) / g["time_us_median"]).dropna(subset=["expected"])


@pytest.fixture(scope="module")
def tp8():
    return store.load([TP8])


# ------------------------------------------------------------------ speedup


def title_of(df: pd.DataFrame, gemm: str, dtype: str) -> str:
    """'attn_qkv (N=1280, K=8192, TP=8), fp8': the GEMM's shape as its rows give it."""
    r = df[df["gemm"] == gemm].iloc[0]
    tp = f", TP={r['tp']}" if r["tp"] > 1 else ""
    return f"{gemm} (N={r['N']}, K={r['K']}{tp}), {dtype}"


def test_speedup_series_match_the_data(tp8):
    drawn = plots.figures("speedup", prepared([TP8], dtypes=["fp8"]))
    # one figure per GEMM, in the shape set's order; fp8 per tensor keeps the plain name (the per-row and block
    # variants are skipped rows of it: no figure of their own)
    assert [d.stem for d in drawn] == [f"speedup-{g}-tp8-fp8" for g in tp8["gemm"].unique()]
    assert all(d.figure is not None for d in drawn)
    fig = one(drawn, "speedup-attn_qkv-tp8-fp8")
    ax = fig.axes[0]
    series = lines(ax)
    rows = tp8[(tp8["gemm"] == "attn_qkv") & (tp8["dtype"] == "fp8")]
    # the baseline is the line at 1.0, not a series
    assert series and set(series) == set(rows[rows["status"] == "ok"]["variant"]) - {"cublas_fp8"}
    want = speedups_by_hand(tp8, "attn_qkv", "fp8", "cublas_fp8")
    for variant, ln in series.items():
        w = want[want["variant"] == variant].sort_values("M")
        assert list(ln.get_xdata()) == sorted(rows["M"].unique())
        np.testing.assert_allclose(ln.get_ydata(), w["expected"], rtol=1e-12)
    assert list(gid(ax, "baseline").get_ydata()) == [1.0, 1.0]
    assert "speedup over cublas_fp8" in ax.get_ylabel() and "×" in ax.get_ylabel()
    assert ax.get_xlabel().startswith("M") and ax.get_xscale() == "log"
    assert ax.get_yscale() == "log" and ax.yaxis.get_transform().base == 2  # 2x faster as far as 2x slower
    assert "cublas_fp8 = 1.0" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert title_of(tp8, "attn_qkv", "fp8") in title(fig)
    (day,) = {str(t)[:10] for t in tp8["timestamp"]}  # the day the file's rows were measured
    assert GPU in title(fig) and day in title(fig) and "cold timing" in title(fig)
    # the cells that are not ok (the per-row and block variants at per-tensor scaling: skipped) are counted
    skipped = rows[rows["status"] != "ok"]
    assert set(skipped["status"]) == {"skipped"}
    # each reason once, after the variants it is theirs
    note = " ".join(footnote(fig).split())
    assert f"Not drawn: {len(skipped)} skipped (" in note
    for why, variants in skipped.groupby("reason")["variant"]:
        assert f"{', '.join(sorted(variants.unique()))}: {' '.join(why.split())}" in note


def test_speedup_never_from_a_wrong_or_skipped_row(tp8):
    df = tp8.copy()
    qkv = (df["gemm"] == "attn_qkv") & (df["dtype"] == "fp8")
    wrong = qkv & (df["variant"] == "cublas_fp8") & (df["M"] == 1024)  # the baseline itself is wrong at M = 1024
    skipped = qkv & (df["variant"] == "triton_persistent") & (df["M"] == 2048)
    df.loc[wrong, ["status", "reason"]] = ["wrong", "max rel err 0.5 at rows 0..15"]
    df.loc[skipped, ["status", "reason"]] = ["skipped", "no fp8 here"]
    fig = one(plots.figures("speedup", prepared(None, df=df, dtypes=["fp8"])), "speedup-attn_qkv-tp8-fp8")
    series = lines(fig.axes[0])
    for variant, ln in series.items():
        assert 1024 not in list(ln.get_xdata()), variant  # no baseline at 1024: no speedup for anyone
    assert 2048 not in list(series["triton_persistent"].get_xdata())
    assert 2048 in list(series["triton_streamk"].get_xdata())
    note = footnote(fig)
    assert "Not drawn: 1 wrong (cublas_fp8: max rel err 0.5" in note
    now_skipped = df[qkv & (df["status"] == "skipped")]  # the file's skipped cells and the one made here
    assert f"{len(now_skipped)} skipped (" in note and "triton_persistent: no fp8 here" in note
    assert "triton_persistent" in now_skipped["variant"].values
    others = df[qkv & (df["M"] == 1024) & (df["status"] == "ok") & (df["variant"] != "cublas_fp8")]
    assert f"No speedup for {len(others)} ok cells" in note  # every other ok row at M = 1024


def test_baseline_option_replaces_the_default(tp8):
    fig = one(
        plots.figures("speedup", prepared([TP8], baseline="triton_dp_grouped", dtypes=["bf16"])),
        "speedup-attn_o-tp8-bf16",
    )
    series = lines(fig.axes[0])
    assert "triton_dp_grouped" not in series and "cublas_bf16" in series
    want = speedups_by_hand(tp8, "attn_o", "bf16", "triton_dp_grouped")
    w = want[want["variant"] == "cublas_bf16"].sort_values("M")
    np.testing.assert_allclose(series["cublas_bf16"].get_ydata(), w["expected"], rtol=1e-12)
    assert "speedup over triton_dp_grouped" in fig.axes[0].get_ylabel()


def two_runs() -> pd.DataFrame:
    """ATTN and the shipped baseline: two runs of the decode attention cells (fp8 per tensor, bf16).  Every variant
    is in both; the baseline's triton_streamk rows are left out here, to have one variant measured by one run only."""
    df = plotdata.read([ATTN, SHIPPED]).runs
    (shipped,) = store.load([SHIPPED]).query("gemm == 'attn_o'")["run_id"].unique()
    return df[~((df["run_id"] == shipped) & (df["variant"] == "triton_streamk"))]


def test_two_runs_of_one_cell_are_two_series_each_against_its_own_baseline():
    df = prepared(None, df=two_runs(), dtypes=["fp8"], shapes=["attn_o"])
    fig = one(plots.figures("speedup", df), "speedup-attn_o-fp8")
    series = lines(fig.axes[0])
    by_run = {p: store.load([p]).query("gemm == 'attn_o' and dtype == 'fp8' and scaling == 'tensor'")
              for p in (ATTN, SHIPPED)}  # fmt: skip
    runs = {p: rows["run_id"].unique().item() for p, rows in by_run.items()}
    assert {f"triton_dp_grouped ({r})" for r in runs.values()} <= set(series)
    assert "triton_streamk" in series  # in one run only: plain name
    for path, rows in by_run.items():
        want = speedups_by_hand(rows, "attn_o", "fp8", "cublas_fp8")
        w = want[want["variant"] == "triton_dp_grouped"].sort_values("M")
        np.testing.assert_allclose(series[f"triton_dp_grouped ({runs[path]})"].get_ydata(), w["expected"], rtol=1e-12)


# ------------------------------------------------------------------ roofline


def test_roofline_ceilings_points_and_m_labels(tp8):
    drawn = plots.figures("roofline", prepared([TP8], dtypes=["fp8"], shapes=ATTN_TP8))  # the README's figure
    assert [d.stem for d in drawn] == ["roofline-fp8"] and drawn[0].warnings == []
    fig = drawn[0].figure
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "FLOP per byte" in ax.get_xlabel() and ax.get_ylabel() == "TFLOP/s"
    attn = tp8[tp8["gemm"].str.startswith("attn_") & (tp8["dtype"] == "fp8") & (tp8["scaling"] == "tensor")]
    rows = attn[attn["status"] == "ok"]  # the per-tensor roofline's points
    bw, peak = rows["ceiling_bw_gbps"].max(), rows["ceiling_tflops"].iloc[0]
    mem, comp = gid(ax, "ceiling:measured:memory"), gid(ax, "ceiling:measured:compute")
    np.testing.assert_allclose(mem.get_ydata() / mem.get_xdata(), bw / 1e3)  # TFLOP/s per FLOP/B = TB/s
    np.testing.assert_allclose(comp.get_ydata(), peak)
    np.testing.assert_allclose(gid(ax, "ridge:measured").get_xdata(), [peak * 1e3 / bw])
    sheet = gid(ax, "ceiling:datasheet")
    assert sheet.get_linestyle() == "--" and mem.get_linestyle() == "-"
    np.testing.assert_allclose(sheet.get_ydata()[0] / sheet.get_xdata()[0], 3.35)
    assert max(sheet.get_ydata()) == 1979.0
    # one point per ok cell, at (FLOPs / minimum bytes, TFLOP/s)
    for (gemm, variant), s in rows.groupby(["gemm", "variant"]):
        pts = gid(ax, f"points:{gemm} tp8:{variant}").get_offsets()
        s = s.sort_values("M")
        np.testing.assert_allclose(pts[:, 0], s["flops"] / s["bytes_min"])
        np.testing.assert_allclose(pts[:, 1], s["tflops"], rtol=1e-9)
    points = {a.get_gid() for a in ax.collections if (a.get_gid() or "").startswith("points:")}
    assert points == {f"points:{g} tp8:{v}" for g, v in rows[["gemm", "variant"]].drop_duplicates().values}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"attn_qkv tp8", "attn_o tp8", "cublas_fp8", "triton_dp_grouped"} <= set(legend)
    assert not {"cublas_fp8_rowwise", "cublas_fp8_block"} & set(legend)  # skipped here: not drawn
    labels = sorted({a.get_text() for a in ax.texts if (a.get_gid() or "").startswith("m-label:")}, key=int)
    assert labels == [str(m) for m in sorted(rows["M"].unique())]
    assert not [a for a in ax.get_children() if a.get_gid() == "above-ceiling"]
    assert (rows["pct_of_roofline"] <= 100).all()  # the premise of the line above
    (shape_set,) = rows["shape_set"].unique()
    assert f"Roofline: {shape_set}, TP=8, fp8" in title(fig) and GPU in title(fig)


def low_peak(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    """TP8's run as if its fp8 peak had been measured 12% low, written as a run file: no committed point is above
    its measured ceiling, and that is what a low peak measurement makes.  Each row's roofline is recomputed here
    (bound = max(bytes / bandwidth, FLOPs / peak), % = bound / time), with its fp8 rows' ceiling_tflops lowered."""
    df = store.load([TP8])
    fp8 = df["dtype"] == "fp8"
    df.loc[fp8, "ceiling_tflops"] = df.loc[fp8, "ceiling_tflops"] * 0.88
    memory_us = (df["bytes_min"] / (df["ceiling_bw_gbps"] * 1e3)).astype("float64")  # NaN where skipped
    compute_us = (df["flops"] / (df["ceiling_tflops"] * 1e6)).astype("float64")
    df["roofline_bound_us"] = np.maximum(memory_us, compute_us)
    df["pct_of_roofline"] = 100 * df["roofline_bound_us"] / df["time_us_median"]
    df["bound_by"] = np.where(memory_us >= compute_us, "memory", "compute")
    path = tmp_path / "low-peak.parquet"
    store.write_rows(path, store.records(df.drop(columns="bound_by")))
    return path, df


def test_points_above_a_measured_ceiling_are_ringed_and_warned(tmp_path):
    path, df = low_peak(tmp_path)
    over = df[fp8_ok(df) & (df["pct_of_roofline"] > 100)].sort_values("pct_of_roofline", ascending=False)
    assert len(over) > 1 and set(over["variant"]) == {"cublas_fp8"}  # cuBLAS fp8 prefill beats the lowered peak
    d = plots.figures("roofline", prepared([path], dtypes=["fp8"]))[0]
    rings = [a.get_offsets() for ax in d.figure.axes for a in ax.get_children() if a.get_gid() == "above-ceiling"]
    np.testing.assert_allclose(sorted(np.concatenate(rings)[:, 1]), sorted(over["tflops"]), rtol=1e-9)
    n = len(over)
    top = over.iloc[0]
    assert len(d.warnings) == 1 and d.warnings[0].startswith(f"{n} point(s) above their measured ceiling")
    assert (f"{top['gemm']} tp8 fp8 M={top['M']} cublas_fp8 {top['pct_of_roofline']:.1f}% of its "
            f"{top['bound_by']} ceiling") in d.warnings[0]  # fmt: skip
    assert f"Red rings: {n} point(s)" in footnote(d.figure)
    result = invoke("plot", path, "--kind", "roofline", "--dtype", "fp8", "--out", tmp_path / "figs")
    assert result.exit_code == 0
    assert f"warning: roofline-fp8: {n} point(s) above their measured ceiling" in text(result.stderr)


def fp8_ok(df: pd.DataFrame) -> pd.Series:
    return (df["dtype"] == "fp8") & (df["status"] == "ok")


def test_unknown_gpu_has_no_datasheet_lines_and_says_so(tp8):
    df = tp8.assign(gpu="NVIDIA A100-SXM4-80GB")
    fig = plots.figures("roofline", prepared(None, df=df, dtypes=["bf16"]))[0].figure
    assert len(fig.axes) > 1  # five GEMMs at TP=8: a panel each, and each has its ceilings
    for ax in fig.axes:
        assert not [a for a in ax.get_children() if (a.get_gid() or "").endswith(":datasheet")]
        assert gid(ax, "ceiling:measured:memory") is not None
    assert "No datasheet ceilings for 'NVIDIA A100-SXM4-80GB', so no dashed lines" in footnote(fig)


# ------------------------------------------------------------------ tflops, latency, schedules, profile


def test_tflops_and_latency_lines_with_p20_p80_bands(tp8):
    df = prepared([TP8], dtypes=["bf16"], shapes=["attn_o"])
    rows = tp8[(tp8["gemm"] == "attn_o") & (tp8["dtype"] == "bf16")]
    tf = plots.figures("tflops", df)[0].figure
    lat = one(plots.figures("latency", df), "latency-attn_o-tp8-bf16")
    assert set(lines(tf.axes[0])) == set(lines(lat.axes[0])) == set(rows["variant"])
    for variant, s in rows.groupby("variant"):
        s = s.sort_values("M")
        np.testing.assert_allclose(lines(tf.axes[0])[variant].get_ydata(), s["flops"] / (s["time_us_median"] * 1e6))
        np.testing.assert_allclose(lines(lat.axes[0])[variant].get_ydata(), s["time_us_median"])
        band = gid(lat.axes[0], f"band:{variant}").get_paths()[0].vertices[:, 1]
        assert band.min() == pytest.approx(s["time_us_p20"].min()) and band.max() == pytest.approx(
            s["time_us_p80"].max()
        )
        band = gid(tf.axes[0], f"band:{variant}").get_paths()[0].vertices[:, 1]
        assert band.max() == pytest.approx((s["flops"] / (s["time_us_p20"] * 1e6)).max())
    assert "TFLOP/s" in tf.axes[0].get_ylabel() and "(µs)" in lat.axes[0].get_ylabel()
    assert "bands: 20th to 80th percentile" in footnote(lat)


def test_schedules_by_tokens():
    moe = store.load([MOE_COLD])
    bf16 = moe[moe["dtype"] == "bf16"]
    drawn = plots.figures("schedules", prepared([MOE_COLD], dtypes=["bf16"]))
    assert [d.stem for d in drawn] == [f"schedules-{g}-tp2-bf16" for g in bf16["gemm"].unique()]
    fig = drawn[0].figure
    top, bottom = fig.axes[0], fig.axes[1]
    fused = {v for v in bf16["variant"] if v.startswith("triton_moe_")}
    assert len(fused) == 4 and set(lines(top)) == set(bf16["variant"])  # the fused schedules and torch_moe_loop
    rel = lines(bottom, "relative:")
    assert set(rel) == fused
    ys = np.array([ln.get_ydata() for ln in rel.values()])
    np.testing.assert_allclose(ys.max(axis=0), 1.0)  # at each token count one schedule is the fastest
    assert list(rel["triton_moe_col"].get_xdata()) == sorted(bf16["M"].unique())
    (e, topk), *_ = bf16[["E", "topk"]].drop_duplicates().values
    assert bottom.get_xlabel().startswith("tokens") and f"E={e} top-{topk}" in title(fig)
    assert "dashed: torch references" in footnote(fig)  # torch_moe_loop is drawn here
    alone = plots.figures("schedules", prepared([MOE_COLD], dtypes=["bf16"], variants=["triton_moe_*"]))[0].figure
    assert "dashed" not in footnote(alone)  # no reference drawn: the footnote does not name one


def test_skipped_cells_are_absent_and_counted():
    df = prepared([MOE_STREAM], dtypes=["bf16"], shapes=["moe_w2"])
    rows = store.load([MOE_STREAM]).query("dtype == 'bf16' and gemm == 'moe_w2'")
    skipped = rows[rows["status"] == "skipped"]
    assert set(skipped["variant"]) == {"torch_moe_loop"} and len(skipped) == rows["M"].nunique()  # every M
    fig = plots.figures("latency", df)[0].figure
    assert "torch_moe_loop" not in lines(fig.axes[0]) and lines(fig.axes[0])
    assert f"Not drawn: {len(skipped)} skipped (torch_moe_loop: --timing stream captures a CUDA graph" in footnote(fig)
    # speedup over torch_moe_loop: its every row is skipped, so there is nothing to draw, and the note says why
    d = plots.figures("speedup", df)[0]
    assert d.figure is None and "no ok torch_moe_loop rows" in d.note


def test_profile_dram_against_peak_and_hit_rates():
    prof = plotdata.read([PROFILE]).profiles
    drawn = plots.figures("profile", profiles=plotdata.select(prof, plotdata.Filters()))
    # a figure per GEMM and dtype (the table's fp8 is per tensor: the plain name)
    assert set(prof["scaling"]) == {"tensor", "none"}
    stems = [f"profile-{g}-{t}" for g, t in prof[["gemm", "dtype"]].drop_duplicates().values]
    assert sorted(d.stem for d in drawn) == sorted(stems)
    fig = one(drawn, "profile-attn_qkv-fp8")
    dram, l1, l2 = fig.axes
    summed = prof[(prof["ncu_kernel"] == "(all kernels)") & (prof["gemm"] == "attn_qkv") & (prof["dtype"] == "fp8")]
    for _, r in summed.iterrows():
        for ax, col in ((dram, "ncu_dram_gbps"), (l1, "ncu_l1_hit_pct"), (l2, "ncu_l2_hit_pct")):
            bars = [a for a in ax.patches if a.get_gid() == f"bars:{col}:{r['variant']}"]  # one per M: here M = 16
            assert [b.get_height() for b in bars] == pytest.approx([r[col]])
    assert gid(dram, "peak:ncu").get_ydata()[0] == pytest.approx(summed["ncu_dram_peak_gbps"].median())
    assert gid(dram, "peak:datasheet").get_ydata()[0] == 3350.0
    assert "GB/s" in dram.get_ylabel() and "L1" in l1.get_ylabel() and "L2" in l2.get_ylabel()
    (day,) = {str(t)[:10] for t in prof["timestamp"]}
    assert "Nsight Compute" in title(fig) and day in title(fig)


# ------------------------------------------------------------------ file names


def test_file_names_add_the_timing_mode_only_when_needed():
    keys = [
        {"gemm": "attn_qkv", "tp": 1, "dtype": "fp8", "timing_mode": m, "shape_set": "s", "N": 1, "K": 2}
        for m in ("cold", "stream")
    ]
    assert plotdata.stems("speedup", keys) == ["speedup-attn_qkv-fp8-cold", "speedup-attn_qkv-fp8-stream"]
    assert plotdata.stems("speedup", keys[:1]) == ["speedup-attn_qkv-fp8"]


# ------------------------------------------------------------------ the commands


def test_plot_command_writes_each_file_and_prints_its_path(tmp_path):
    result = invoke("plot", TP8, "--kind", "roofline,speedup", "--dtype", "fp8", "--shapes", ",".join(ATTN_TP8),
                    "--format", "png,svg", "--out", tmp_path / "figs")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    printed = result.stdout.split()
    names = ["roofline-fp8", "speedup-attn_qkv-tp8-fp8", "speedup-attn_o-tp8-fp8"]
    assert printed == [str(tmp_path / "figs" / f"{n}.{e}") for n in names for e in ("png", "svg")]
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(Path(p).name for p in printed)  # no temp
    assert (tmp_path / "figs/roofline-fp8.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "figs/speedup-attn_o-tp8-fp8.svg").read_bytes()[:2000]


def test_several_gpus_need_gpu_and_h200_gets_its_datasheet(tmp_path):
    t = pq.read_table(TP8)
    for col, value in (("gpu", "NVIDIA H200"), ("run_id", "h200-run")):
        t = t.set_column(t.column_names.index(col), col, pa.array([value] * len(t)))
    pq.write_table(t, tmp_path / "h200.parquet")
    line = bad(invoke("plot", TP8, tmp_path / "h200.parquet", "--kind", "roofline", "--out", tmp_path / "x"))
    assert "2 GPU models" in line and "NVIDIA H200" in line and "--gpu" in line
    df = prepared([TP8, tmp_path / "h200.parquet"], gpu="h200", dtypes=["bf16"])
    assert set(df["gpu"]) == {"NVIDIA H200"}
    sheet = gid(plots.figures("roofline", df)[0].figure.axes[0], "ceiling:datasheet")
    np.testing.assert_allclose(sheet.get_ydata()[0] / sheet.get_xdata()[0], 4.8)


def _truncated(d: Path) -> Path:
    data = TP8.read_bytes()
    (d / "cut.parquet").write_bytes(data[: len(data) // 2])
    return d / "cut.parquet"


def _older(d: Path) -> Path:
    t = pq.read_table(TP8).replace_schema_metadata({b"gemmbench.schema_version": b"7"})  # gemmbench 0.1's key
    pq.write_table(t, d / "old.parquet")
    return d / "old.parquet"


TP8_GEMMS = ", ".join(sorted(set(pq.read_table(TP8, columns=["gemm"]).column("gemm").to_pylist())))  # what it has

ERRORS = {
    # id: (RESULTS, extra options, fragments of the one error line)
    "missing-file": (lambda d: [d / "nope.parquet"], [], ["nope.parquet", "no such file or folder"]),
    "truncated-file": (lambda d: [_truncated(d)], [], ["cut.parquet", "truncated or not Parquet"]),
    "older-schema": (lambda d: [_older(d)], [], ["old.parquet", "gemmbench 0.1", "re-run it"]),
    "no-rows-dtype": (lambda d: [TP8], ["--dtype", "fp16"], ["no run rows match --dtype 'fp16'", "bf16, fp8"]),
    "no-rows-shapes": (lambda d: [TP8], ["--shapes", "moe_*"], ["--shapes 'moe_*'", TP8_GEMMS]),
    "no-rows-variants": (lambda d: [TP8], ["--variants", "nope*"], ["--variants 'nope*'"]),
    "bad-kind": (lambda d: [TP8], ["--kind", "pie"], ["--kind 'pie'", "roofline, speedup"]),
    "bad-baseline": (lambda d: [TP8], ["--baseline", "cublas_fp4"], ["--baseline 'cublas_fp4'", "cublas_fp8"]),
    "schedules-no-moe": (lambda d: [TP8], ["--kind", "schedules"], ["--kind schedules", "MoE"]),
    "profile-no-table": (lambda d: [TP8], ["--kind", "profile"], ["--kind profile", "profile tables"]),
    "run-kind-on-profile": (lambda d: [PROFILE], [], ["--kind speedup", "only profile tables"]),
}


# report takes the same RESULTS and filters; it has no --kind, and it reads profile tables alone
REPORT_ERRORS = [c for c, (_, extra, _) in ERRORS.items() if "--kind" not in extra and c != "run-kind-on-profile"]


@pytest.mark.parametrize("command,case", [("plot", c) for c in ERRORS] + [("report", c) for c in REPORT_ERRORS])
def test_bad_input_is_one_error_line_and_exit_2(command, case, tmp_path):
    results, extra, fragments = ERRORS[case]
    kind = [] if command == "report" or "--kind" in extra else ["--kind", "speedup"]
    line = bad(invoke(command, *results(tmp_path), *kind, *extra, "--out", tmp_path / "out"))
    for frag in fragments:
        assert frag in line, (frag, line)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the report


def _md_tables(md: str, header_start: str) -> list[list[list[str]]]:
    tables, cur = [], None
    for ln in md.splitlines():
        if ln.startswith(header_start):
            cur = []
            tables.append(cur)
        elif cur is not None and ln.startswith("|") and not ln.startswith("|---"):
            cur.append([c.strip() for c in ln.strip("|").split(" | ")])
        elif not ln.startswith("|"):
            cur = None
    return tables


def test_report_tables_match_the_data(tmp_path):
    # the decode attention run and the ncu profile of its GEMMs at M = 16
    result = invoke("report", ATTN, PROFILE, "--out", tmp_path / "rep")
    assert result.exit_code == 0, result.stderr
    attn = store.load([ATTN])
    md = (tmp_path / "rep/report.md").read_text()
    sections = re.findall(r"^## (attn_\w+) \(N=(\d+), K=(\d+)\), (\w+(?: row)?) · cold$", md, re.M)
    cells = attn[["gemm", "N", "K", "dtype"]].drop_duplicates()  # a section per GEMM and dtype, in the file's order
    assert sections == [(g, str(n), str(k), t) for g, n, k, t in cells.values]
    winner_tables = _md_tables(md, "| M | winner |")
    assert len(winner_tables) == len(sections)
    for (gemm, _, _, dtype), table in zip(sections, winner_tables, strict=True):
        g = attn[(attn["gemm"] == gemm) & (attn["dtype"] == dtype)]
        base_name = f"cublas_{dtype}"
        base = g[g["variant"] == base_name].set_index("M")["time_us_median"]
        # the tie rule (README): among ok rows that are not noisy, the rows of an M whose p20-p80 overlaps the
        # fastest's; with any, "≈ a, b"
        ranked = g[(g["status"] == "ok") & ~g["noisy"].astype(bool)]
        want = ranked.loc[ranked.groupby("M")["time_us_median"].idxmin()].sort_values("M")
        assert [row[0] for row in table] == [str(m) for m in want["M"]]
        for row, (_, w) in zip(table, want.iterrows(), strict=True):
            at_m = ranked[ranked["M"] == w["M"]]
            near = at_m[(at_m["time_us_p20"] <= w["time_us_p80"]) & (at_m["time_us_p80"] >= w["time_us_p20"])]
            tied = list(near.sort_values("time_us_median")["variant"])
            assert row[1] == ("≈ " + ", ".join(tied) if len(tied) > 1 else w["variant"])
            assert row[2] == f"{w['time_us_median']:.1f}"
            assert row[3] == f"{base[w['M']] / w['time_us_median']:.2f}×" and row[4] == base_name
            assert row[5] == f"{w['pct_of_roofline']:.0f}"
    assert any(r[1].startswith("≈ ") for t in winner_tables for r in t)  # ties ...
    assert any(not r[1].startswith("≈ ") for t in winner_tables for r in t)  # ... and clear winners
    # the full tables: one row per cell, every variant's median (none for a skipped row)
    full = _md_tables(md, "| M | variant | µs |")
    assert sum(len(t) for t in full) == len(attn)
    m16 = {r[1]: r[2] for r in full[0] if r[0] == "16"}
    q = attn[(attn["gemm"] == sections[0][0]) & (attn["dtype"] == sections[0][3]) & (attn["M"] == 16)]
    ranked = q[(q["status"] == "ok") & ~q["noisy"].astype(bool)]
    w = ranked.loc[ranked["time_us_median"].idxmin()]
    near = ranked[(ranked["time_us_p20"] <= w["time_us_p80"]) & (ranked["time_us_p80"] >= w["time_us_p20"])]
    # M 16: the fastest starred when clear of the others (the Markdown escapes the star), else its ties marked ≈
    marks = {w["variant"]: "\\* "} if len(near) == 1 else dict.fromkeys(near["variant"], "≈ ")
    want16 = {marks.get(v, "") + v: (f"{t:.2f}" if ok == "ok" else "")
              for v, t, ok in zip(q["variant"], q["time_us_median"], q["status"], strict=True)}  # fmt: skip
    assert m16 == want16
    # the profile tables: a table per GEMM and dtype, a line per variant and M (a skipped one says so)
    prof = side_tables.load_profile_tables([PROFILE])
    tables = _md_tables(md, "| M | variant | ncu µs |")
    assert len(tables) == prof.groupby(["gemm", "dtype"]).ngroups
    assert sum(len(t) for t in tables) == prof.groupby(["gemm", "dtype", "scaling", "variant", "M"]).ngroups
    # every image the Markdown names exists, and the HTML carries the same ones inside it
    images = re.findall(r"!\[[^\]]*\]\((img/[^)]+\.svg)\)", md)
    assert "img/roofline-fp8.svg" in images and "img/speedup-attn_o-bf16.svg" in images
    # rooflines (one per dtype), a speedup figure per section (TFLOP/s with --throughput), a profile figure per
    # profile table
    assert len(images) == attn["dtype"].nunique() + len(sections) + len(tables)
    assert all((tmp_path / "rep" / i).is_file() for i in images)
    html_text = (tmp_path / "rep/report.html").read_text()
    assert html_text.count('src="data:image/svg+xml,') == len(images) and 'src="img/' not in html_text
    assert result.stdout.split()[-2:] == [str(tmp_path / "rep/report.md"), str(tmp_path / "rep/report.html")]


def test_report_markdown_and_html_hold_the_same_tables(tp8):
    rep = report.build(prepared([TP8], dtypes=["fp8"], shapes=["attn_o"]), None, [TP8])
    md, page = report.to_markdown(rep), report.to_html(rep)
    tables = [b for b in rep.blocks if b[0] == "table"]
    assert page.count("<table class=") == len(tables) == sum(ln.startswith("|---") for ln in md.splitlines())
    for row in tables[-1][2]:  # the full table of attn_o fp8: every cell as it is, in one row
        assert "<td>" + row[2] + "</td>" in page
    assert datasheet(GPU).bw_gbps == 3350.0


def test_an_empty_speedup_figure_names_the_real_cause():
    import pandas as pd

    from gemmbench.plot.figures import _why_empty

    # the baseline's rows are ok, every other row failed: the baseline is there, there is nothing to compare with it
    only_base = pd.DataFrame({"status": ["ok", "error"], "variant": ["cublas_bf16", "triton_x"],
                              "baseline": ["cublas_bf16", "cublas_bf16"]})  # fmt: skip
    assert (
        _why_empty("speedup", only_base)
        == "only cublas_bf16 has ok rows here: no other variant to measure a speedup of"
    )
    no_base = pd.DataFrame({"status": ["error", "ok"], "variant": ["cublas_bf16", "triton_x"],
                            "baseline": ["cublas_bf16", "cublas_bf16"]})  # fmt: skip
    assert _why_empty("speedup", no_base).startswith("no ok cublas_bf16 rows to measure a speedup against")
