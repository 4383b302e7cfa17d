"""Figures a reader can decode, read from the matplotlib objects, never from pixels: one colour
per series in a figure and a variant's own colour across figures, legend swatches equal to their bars, every
label inside its axes, a roofline split into panels when it holds many GEMM/TP groups with M labels that do not
overlap, CPU runs titled as such, and "N/A" (never "nan") for what the rows lack."""

from __future__ import annotations

import os

os.environ["MPLBACKEND"] = "Agg"  # before anything imports matplotlib: no GUI backend in a test

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.colors import to_hex, to_rgb
from matplotlib.offsetbox import DrawingArea, HPacker, TextArea
from matplotlib.text import Text
from test_cli import invoke
from test_plots import ATTN, ATTN_TP8, MLP, MOE_COLD, PROFILE, ROOT, TP8, footnote, prepared, title, two_runs

from gemmbench import registry
from gemmbench.plot import data as plotdata
from gemmbench.plot import figures as plots
from gemmbench.plot import layer as plots_layer
from gemmbench.plot import style
from gemmbench.results import store

LAYERS = ROOT / "benchmarks/data/layer"  # gemmbench layer: Llama3-70B at TP=8 in fp8, Mixtral 8x7B at TP=2 in bf16
MIX = LAYERS / "mixtral.parquet"  # one plan, cublas_bf16+triton_moe_col: the dense steps by cuBLAS, the experts fused


def two_plans() -> pd.DataFrame:
    """MIX's layer table and a copy of it as a second plan that also starts with cublas_bf16, in a run of its own:
    two such plans' bars once shared a colour, and no committed table holds two."""
    layers = plotdata.read([MIX]).layers
    other = layers.assign(variant=layers["variant"].str.replace("triton_moe_col", "triton_moe_splitk"),
                          run_id="second-plan")  # fmt: skip
    return pd.concat([layers, other], ignore_index=True)


# ------------------------------------------------------------------ reading the figures


def hexes(colors) -> set:
    return {to_hex(c) for c in np.atleast_2d(colors)}


def grey(c) -> bool:
    r, g, b = to_rgb(c)
    return max(r, g, b) - min(r, g, b) <= 0.1


def series_colors(fig) -> dict:
    """{series: colour} of every drawn series of a figure, by gid: lines ("series:<label>"), roofline points
    ("points:<gemm>:<variant>", the series is the variant), layer bars ("kernels:<plan>:<mode>", the plan's colour
    is the bars' edge) and profile bars ("bars:<metric>:<variant>").  A series drawn twice in two colours fails."""
    found: dict = {}
    for a in fig.findobj():
        gid = a.get_gid() or ""
        kind, _, rest = gid.partition(":")
        if kind == "series":
            name, cs = rest, {to_hex(a.get_color())}
        elif kind == "points":
            name = rest.rsplit(":", 1)[1]
            cs = hexes(a.get_facecolor()) if len(a.get_facecolor()) else hexes(a.get_edgecolor())
        elif kind == "kernels":
            name, cs = rest.rsplit(":", 1)[0], {to_hex(a.get_edgecolor())}
        elif kind == "bars":
            name, cs = rest.split(":", 1)[1], {to_hex(a.get_facecolor())}
        else:
            continue
        assert len(cs) == 1, (gid, cs)
        found.setdefault(name, set()).update(cs)
    assert all(len(c) == 1 for c in found.values()), found
    return {name: c.pop() for name, c in found.items()}


def assert_one_colour_per_series(fig) -> dict:
    colors = series_colors(fig)
    assert colors, "no series found"
    assert len(set(colors.values())) == len(colors), colors  # never two series of one figure in one colour
    assert not [c for c in colors.values() if grey(c)], colors  # a grey means a ceiling or a legend key
    for name, c in colors.items():  # a registered variant wears its own colour, in every figure
        if style.variant_color(name) is not None:
            assert c == style.variant_color(name), (name, c)
    return colors


def texts_outside(fig) -> list:
    """Every non-empty text of every axes whose window extent leaves its axes' (after a draw: the layout and every
    text's place, without rasterising the pixels, which no extent reads)."""
    fig.draw_without_rendering()
    out = []
    for ax in fig.axes:
        frame = ax.get_window_extent()
        for t in ax.texts:
            if not t.get_visible() or not t.get_text().strip():
                continue
            b = t.get_window_extent()
            if b.x0 < frame.x0 or b.x1 > frame.x1 or b.y0 < frame.y0 or b.y1 > frame.y1:
                out.append((t.get_gid(), t.get_text(), b.extents.round(1), frame.extents.round(1)))
    return out


def legend_rows(ax) -> dict:
    """{label: [the swatch artists drawn beside it]} of an axes' legend."""
    rows = {}
    for box in ax.get_legend().findobj(HPacker):
        kids = box.get_children()
        if len(kids) == 2 and isinstance(kids[0], DrawingArea) and isinstance(kids[1], TextArea):
            rows[kids[1].get_text()] = kids[0].get_children()
    return rows


def by_gid(fig, gid: str) -> list:
    return [a for a in fig.findobj() if a.get_gid() == gid]


def cpu_rows(df: pd.DataFrame, **extra) -> pd.DataFrame:
    """The rows as the CPU path writes them (gemmbench.measure.device.provenance without CUDA): device cpu, no GPU name,
    UUID, SM count, driver, CUDA or measured ceilings."""
    none = dict.fromkeys(("gpu", "gpu_uuid", "sm_count", "driver", "cuda"))
    if "ceiling_bw_gbps" in df.columns:
        none.update(ceiling_bw_gbps=np.nan, ceiling_tflops=np.nan, pct_of_roofline=np.nan, roofline_bound_us=np.nan)
    return df.assign(device="cpu", **none, **extra)


@pytest.fixture(scope="module")
def tp8():
    return store.load([TP8])


@pytest.fixture(scope="module")
def layer_figures():
    """The committed layer tables' figures, then MIX's with a second plan (two_plans)."""
    return plots_layer.figures(plotdata.read([LAYERS]).layers) + plots_layer.figures(two_plans())


@pytest.fixture(scope="module")
def committed_rooflines():
    """The roofline figures of TP8's run and of MOE_COLD's, drawn once for the tests that read them."""
    return {path: plots.figures("roofline", prepared([path])) for path in (TP8, MOE_COLD)}


@pytest.fixture(scope="module")
def panel_rooflines():
    """The dense decode runs at TP=1 and the prefill run at TP=8: more GEMM/TP groups than one panel holds."""
    return plots.figures("roofline", prepared([ATTN, MLP, TP8]))


# ------------------------------------------------------------------ 1. one colour per series


def test_colors_are_distinct_keep_the_registry_colour_and_avoid_greys():
    names = [v.name for v in registry.all_variants()]
    plans = [f"{a}+{b}" for a, b in itertools.permutations(names[:8], 2)]  # 56 layer plans
    runs = [f"{v} ({r})" for v in names[:3] for r in ("run-a", "run-b")]
    labels = names + plans + runs + ["my_plugin", "z"]
    got = style.colors(labels)
    assert list(got) == labels
    assert len(set(got.values())) == len(labels)
    assert not [c for c in got.values() if grey(c)]
    owned = {style.variant_color(n) for n in names}
    assert len(owned) == len(names)  # no two built-ins share a colour
    for n in names:
        assert got[n] == style.variant_color(n) == style.colors([n])[n]  # whatever else the figure holds
    assert not owned & {got[lab] for lab in plans + runs}  # a plan never looks like a kernel of another figure
    # the first colours a figure's non-variant series get are the palette's own, in the order given
    # (the palette's colours from 20 on that no built-in wears: the built-ins own the first ones, in registration order)
    spare = [c for c in style.PALETTE[20:] if c not in owned]
    assert style.colors(["b+c", "a+b"]) == {"b+c": spare[0], "a+b": spare[1]}


RUN_SETS = {
    "tp8": (lambda: prepared([TP8]), ("roofline", "speedup", "tflops", "latency")),
    # "variant (run)" series: two runs of one cell
    "two-runs": (lambda: prepared(None, df=two_runs()), ("speedup", "tflops")),
    "moe": (lambda: prepared([MOE_COLD]), ("roofline", "schedules", "speedup")),
    "tp-panels": (lambda: prepared([ATTN, MLP, TP8]), ("roofline",)),
}


ROOFLINE_OF = {"tp8": TP8, "moe": MOE_COLD}  # the cases whose roofline committed_rooflines holds


@pytest.mark.parametrize("case", list(RUN_SETS))
def test_committed_runs_one_colour_per_series(case, committed_rooflines):
    rows_of, kinds = RUN_SETS[case]
    rows = rows_of()
    seen = 0
    for kind in kinds:
        shared = kind == "roofline" and case in ROOFLINE_OF
        for d in committed_rooflines[ROOFLINE_OF[case]] if shared else plots.figures(kind, rows):
            if d.figure is not None:
                assert_one_colour_per_series(d.figure)
                seen += 1
    assert seen > 0
    if case == "two-runs":  # the case the palette's variant colour alone cannot serve
        fig = plots.figures("speedup", prepared(None, df=two_runs(), dtypes=["fp8"], shapes=["attn_o"]))[0].figure
        labels = set(series_colors(fig))
        assert len({lab for lab in labels if lab.startswith("triton_dp_grouped (")}) == 2


def test_committed_layers_and_profiles_one_colour_per_series(layer_figures):
    assert len(layer_figures) == 3  # Llama3-70B's, Mixtral's, and Mixtral's with two plans
    colors = assert_one_colour_per_series(layer_figures[-1].figure)
    plans = set(two_plans().query("part == 'layer'")["variant"])
    assert len(plans) == 2 and all(p.startswith("cublas_bf16+") for p in plans)
    assert set(colors) == plans  # were both one colour
    for d in layer_figures:
        assert_one_colour_per_series(d.figure)
        faces = {}  # (plan, mode) -> its kernel bars' face: eager and graph bars of all plans differ too
        for a in d.figure.findobj():
            if (a.get_gid() or "").startswith("kernels:"):
                faces.setdefault(a.get_gid(), set()).add(to_hex(a.get_facecolor()))
        assert all(len(f) == 1 for f in faces.values())
        assert len({f.pop() for f in faces.values()}) == len(faces), d.stem
    prof = plotdata.read([PROFILE]).profiles
    for d in plots.figures("profile", profiles=plotdata.select(prof, plotdata.Filters())):
        assert_one_colour_per_series(d.figure)


def test_many_series_get_distinct_colours(tp8):
    base = tp8[(tp8["gemm"] == "attn_o") & (tp8["dtype"] == "fp8") & (tp8["scaling"] == "tensor")]  # one figure
    base = base[base["status"] == "ok"]  # the drawn ones
    plugins = [base.assign(variant=f"plugin_{i:02d}") for i in range(40)]
    rows = prepared(None, df=pd.concat([base, *plugins], ignore_index=True))
    for kind in ("tflops", "roofline"):
        (d,) = plots.figures(kind, rows)
        colors = assert_one_colour_per_series(d.figure)
        assert len(colors) == base["variant"].nunique() + 40
    layers = plotdata.read([MIX]).layers  # one run: a series per plan
    top = layers[layers["part"] == "layer"]
    many = pd.concat([top.assign(variant=f"cublas_bf16+kernel_{i}") for i in range(12)])
    (d,) = plots_layer.figures(many)
    assert len(assert_one_colour_per_series(d.figure)) == 12


# ------------------------------------------------------------------ 2. legend swatches are their bars


def test_layer_legend_swatches_equal_their_bars(layer_figures):
    for d in layer_figures:
        fig = d.figure
        ax = fig.axes[0]
        rows = legend_rows(ax)
        drawn = {g.split(":", 1)[1] for a in fig.findobj() if (g := a.get_gid() or "").startswith("kernels:")}
        assert {f"{plan}, {mode}" for plan, mode in (k.rsplit(":", 1) for k in drawn)} == set(rows), d.stem
        for label, swatches in rows.items():
            plan, mode = label.rsplit(", ", 1)
            kernels, gaps = swatches  # left: the kernel part, right: the gaps, as in the bar
            for swatch, part in ((kernels, "kernels"), (gaps, "gaps")):
                bars = by_gid(fig, f"{part}:{plan}:{mode}")
                assert bars, (d.stem, part, plan, mode)
                for bar in bars:
                    assert to_hex(swatch.get_facecolor()) == to_hex(bar.get_facecolor()), (label, part)
                    assert to_hex(swatch.get_edgecolor()) == to_hex(bar.get_edgecolor()), (label, part)
                    assert swatch.get_hatch() == bar.get_hatch(), (label, part)
            assert not grey(kernels.get_facecolor())  # no key patch in a colour that means something else
        assert "solid: kernel time" in ax.get_legend().get_title().get_text()


def test_roofline_legend_markers_equal_their_points(tp8):
    # the README's roofline: the attention GEMMs at TP=8, fp8 per tensor (one panel)
    (d,) = plots.figures("roofline", prepared([TP8], dtypes=["fp8"], shapes=ATTN_TP8))
    ax = d.figure.axes[0]
    leg = ax.get_legend()
    keys = dict(zip([t.get_text() for t in leg.get_texts()], leg.legend_handles, strict=True))
    rows = tp8[tp8["gemm"].str.startswith("attn_") & (tp8["dtype"] == "fp8") & (tp8["status"] == "ok")]
    assert rows["variant"].nunique() > 1
    for variant in rows["variant"].unique():
        points = [a for a in ax.collections if (a.get_gid() or "").endswith(f":{variant}")]
        assert points and {to_hex(keys[variant].get_markerfacecolor())} == set().union(
            *(hexes(p.get_facecolor()) for p in points)
        )


# ------------------------------------------------------------------ 3. labels inside the frame


def test_layer_value_labels_inside_the_frame(layer_figures):
    for d in layer_figures:
        values = [t for t in d.figure.axes[0].texts if (t.get_gid() or "").startswith("value:")]
        bars = [a for a in d.figure.findobj() if (a.get_gid() or "").startswith("kernels:")]
        assert len(values) == len(bars) > 0  # one total above each bar
        assert texts_outside(d.figure) == [], d.stem


def test_profile_value_labels_inside_the_frame():
    prof = plotdata.read([PROFILE]).profiles
    drawn = plots.figures("profile", profiles=plotdata.select(prof, plotdata.Filters()))
    assert len(drawn) == prof[prof["status"] == "ok"].groupby(["gemm", "dtype"]).ngroups  # one per GEMM and dtype
    for d in drawn:
        assert [t for ax in d.figure.axes for t in ax.texts if (t.get_gid() or "").startswith("value:")]
        assert texts_outside(d.figure) == [], d.stem


def test_roofline_labels_inside_the_frame(panel_rooflines, committed_rooflines):
    drawn = panel_rooflines + committed_rooflines[TP8] + committed_rooflines[MOE_COLD]
    for d in drawn:
        assert [t for ax in d.figure.axes for t in ax.texts if (t.get_gid() or "").startswith("m-label:")]
        assert texts_outside(d.figure) == [], d.stem


def test_a_total_far_above_the_others_still_fits():
    layers = two_plans()
    big = layers.copy()
    top = (big["part"] == "layer") & (big["M"] == 64) & big["eager_us"].notna()
    big.loc[top, "eager_us"] = big.loc[top, "eager_us"] * 40  # one bar 40x the others: its label at the very top
    (d,) = plots_layer.figures(big)
    assert texts_outside(d.figure) == []


# ------------------------------------------------------------------ 4. a roofline with many groups


def m_labels(ax) -> list:
    return [t for t in ax.texts if (t.get_gid() or "").startswith("m-label:")]


def assert_m_labels_apart(fig) -> None:
    fig.draw_without_rendering()  # the laid-out extents, as texts_outside reads them
    for ax in fig.axes:
        boxes = [t.get_window_extent() for t in m_labels(ax)]
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), (a, b)


def test_roofline_of_two_tp_degrees_has_a_panel_each(panel_rooflines):
    df = store.load([ATTN, MLP, TP8])
    tps = sorted(df["tp"].unique())
    assert tps == [1, 8]
    for d in panel_rooflines:
        fig = d.figure
        assert [ax.get_title() for ax in fig.axes] == [f"TP={tp}" for tp in tps], d.stem
        rows = df[(df["dtype"] == d.key["dtype"]) & (df["status"] == "ok")]
        for ax, tp in zip(fig.axes, tps, strict=True):
            points = {a.get_gid() for a in ax.collections if (a.get_gid() or "").startswith("points:")}
            suffix = f" tp{tp}" if tp > 1 else ""
            want = {f"points:{g}{suffix}:{v}" for g, v in rows[rows["tp"] == tp][["gemm", "variant"]].values}
            assert points == want
            # every M of the panel is written, once per spot
            assert {t.get_text() for t in m_labels(ax)} == {str(m) for m in rows[rows["tp"] == tp]["M"]}
        # one legend for the grid; marker = GEMM, TP in the panel's title
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert len(legends) == 1
        keys = {t.get_text() for t in legends[0].get_texts()}
        assert set(rows["gemm"]) <= keys and not {k for k in keys if " tp" in k}
        groups = rows[["gemm", "tp"]].drop_duplicates()
        assert len(groups) > 4  # more than one panel holds (plots_roofline.MAX_GROUPS)
        assert f"{len(groups)} GEMM/TP groups: one panel per TP degree" in footnote(fig)
        assert_m_labels_apart(fig)


def test_roofline_of_many_gemms_at_one_tp_has_a_panel_per_gemm(tp8):
    rows = tp8[(tp8["dtype"] == "bf16") & tp8["gemm"].str.startswith("attn_")]
    qkv = rows[rows["gemm"] == "attn_qkv"]
    five = pd.concat([rows] + [qkv.assign(gemm=f"attn_qkv_{i}") for i in range(3)], ignore_index=True)  # at TP=8
    (d,) = plots.figures("roofline", prepared(None, df=five))
    titles = [ax.get_title() for ax in d.figure.axes]
    assert titles == ["attn_qkv", "attn_o", "attn_qkv_0", "attn_qkv_1", "attn_qkv_2"]
    assert "5 GEMM/TP groups: one panel per GEMM" in footnote(d.figure)
    assert_m_labels_apart(d.figure)
    assert texts_outside(d.figure) == []
    # up to plots_roofline.MAX_GROUPS groups stay one panel
    (one,) = plots.figures("roofline", prepared([TP8], dtypes=["bf16"], shapes=ATTN_TP8))
    assert len(one.figure.axes) == 1 and one.figure.axes[0].get_title() == ""
    # the whole run, five GEMMs at TP=8: a panel each, in the shape set's order
    (all5,) = plots.figures("roofline", prepared([TP8], dtypes=["bf16"]))
    assert [ax.get_title() for ax in all5.figure.axes] == list(tp8["gemm"].unique())
    assert_m_labels_apart(all5.figure)


# ------------------------------------------------------------------ 5. CPU runs, and N/A for what is missing


def test_cpu_rows_are_titled_cpu(tp8):
    cpu = cpu_rows(tp8, cpu=None)  # no column names the processor
    assert set(plotdata.gpu_names(cpu)) == {"CPU"}
    named = cpu_rows(tp8, cpu="AMD EPYC 9654 96-Core Processor")
    assert set(plotdata.gpu_names(named)) == {"CPU (AMD EPYC 9654 96-Core Processor)"}
    (host,) = tp8["cpu"].unique()  # the host's processor, as the run recorded it
    assert set(plotdata.gpu_names(cpu_rows(tp8))) == {f"CPU ({host})"}
    assert set(plotdata.gpu_names(tp8)) == {"NVIDIA H100 80GB HBM3"}  # GPU rows as before
    assert set(plotdata.gpu_names(tp8.assign(gpu=None))) == {"unknown GPU"}
    rows = prepared(None, df=cpu, gpu="cpu")  # --gpu cpu picks them
    (day,) = {str(t)[:10] for t in tp8["timestamp"]}  # the day the rows were measured
    drawn = {kind: plots.figures(kind, rows) for kind in ("roofline", "speedup")}
    for d in drawn["roofline"] + drawn["speedup"]:
        if d.figure is None:  # a row-scaled speedup figure: its one variant is its baseline
            continue
        assert f"\nCPU · {day} · cold timing" in title(d.figure), title(d.figure)
        assert "unknown GPU" not in title(d.figure)
    assert "A CPU run: no GPU datasheet ceilings" in footnote(drawn["roofline"][0].figure)
    layers = plotdata.read([MIX]).layers
    (d,) = plots_layer.figures(cpu_rows(layers, cpu=None))
    (day,) = {str(t)[:10] for t in layers["timestamp"]}
    assert f"\nCPU · {day} · gemmbench layer" in title(d.figure)


def _cpu_parquet(tmp_path: Path) -> Path:
    """TP8's file with the columns a CPU run leaves empty emptied, written as a run file (and no processor name)."""
    t = pq.read_table(TP8)
    for col in ("gpu", "gpu_uuid", "driver", "cuda", "ceiling_bw_gbps", "ceiling_tflops", "pct_of_roofline", "cpu"):
        i = t.column_names.index(col)
        t = t.set_column(i, col, pa.nulls(len(t), t.schema.field(col).type))
    t = t.set_column(t.column_names.index("device"), "device", pa.array(["cpu"] * len(t)))
    pq.write_table(t, tmp_path / "cpu.parquet")
    return tmp_path / "cpu.parquet"


NAN = re.compile(r"\bnan\b|\bNone\b", re.IGNORECASE)


def test_report_and_figures_print_na_never_nan(tmp_path, monkeypatch):
    path = _cpu_parquet(tmp_path)
    made, figures = {}, plots.figures

    def kept(kind, *args, **kwargs):  # the report's own figures, read below rather than drawn a second time
        drawn = figures(kind, *args, **kwargs)
        made.setdefault(kind, []).extend(drawn)
        return drawn

    monkeypatch.setattr(plots, "figures", kept)
    result = invoke("report", path, "--out", tmp_path / "rep")
    assert result.exit_code == 0, result.stderr
    monkeypatch.undo()
    md = (tmp_path / "rep/report.md").read_text()
    page = (tmp_path / "rep/report.html").read_text()
    # the page's words: the figures inside it are SVG, whose styles say `fill: none` (their words are checked below)
    words = re.sub(r'src="data:image/svg\+xml,[^"]*"', 'src=""', page)
    assert 'src=""' in words and not NAN.findall(md) and not NAN.findall(words)
    assert "**CPU**" in md and "unknown GPU" not in md
    assert "CUDA N/A, driver N/A" in md and "CUDA N/A, driver N/A" in page
    # the figures: every text they hold (titles, footnotes, labels, legends); the report draws no TFLOP/s figure
    assert set(made) >= {"roofline", "speedup"} and "tflops" not in made
    made["tflops"] = plots.figures("tflops", prepared([path]))
    for kind in ("roofline", "speedup", "tflops"):
        assert [x for x in made[kind] if x.figure is not None], kind
        for d in (x for x in made[kind] if x.figure is not None):
            words = [t.get_text() for t in d.figure.findobj(Text)]
            assert words and not [w for w in words if NAN.search(w)], (d.stem, [w for w in words if NAN.search(w)])


def test_missing_values_are_na():
    assert [style.shown(v) for v in (None, float("nan"), pd.NA, "", "12.8")] == ["N/A"] * 4 + ["12.8"]
    k = {"gemm": "g", "N": None, "K": 4, "dtype": None}
    assert style.gemm_title(k) == "g (N=N/A, K=4), N/A"
