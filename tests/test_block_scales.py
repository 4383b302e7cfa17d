"""fp8 with block scales on the CPU: quantisation, the reference, the planted neighbouring-scale kernel, every
block-scaled Triton variant under the interpreter, the skipped reasons, the CLI's bad input, rows keyed on scaling.

Shapes: K = 320 is two full 128-column groups and a partial one of 64; N = 200 is one full 128-row block and a
partial one of 72; M = 1 and 33 (decode, and rows past one 16-row tile)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import run_row, stamp
from typer.testing import CliRunner

from gemmbench import dtypes, registry
from gemmbench.cli import app
from gemmbench.configs import config_files, tuning
from gemmbench.measure.check import check_cell, reference
from gemmbench.measure.device import DeviceInfo
from gemmbench.measure.inputs import make_inputs, quantize_fp8_blocks
from gemmbench.plot import data as plotdata
from gemmbench.registry import Launch, Variant
from gemmbench.results import metrics, store, tables
from gemmbench.shapes import Problem

CPU = DeviceInfo(kind="cpu", name="cpu")
runner = CliRunner()


def dense(M=33, scaling="block", N=200, K=320, dtype="fp8"):
    return Problem("t", "g", M, N, K, dtype, scaling=scaling)


def moe(ep=1, scaling="block"):
    return Problem("t", "w13", 5, 200, 320, "fp8", E=4, topk=2, ep=ep, scaling=scaling)


# ---------------------------------------------------------------- quantisation


@pytest.mark.parametrize("scaling", ["block", "block-ue8m0"])
def test_block_quantisation_shapes_partial_blocks_and_values(scaling):
    x = make_inputs(dense(M=33, scaling=scaling), 1, "cpu")
    # activations: one scale per row and 128 columns of K: ceil(320/128) = 3 groups, the last one 64 wide
    assert x.a_scale.shape == (33, 3) and x.b_scale.shape == (2, 3)  # weight: ceil(200/128) = 2 block rows
    a, b = x.dequantized()
    # the values are (randn + 1) / sqrt(K): draw them again with the same seed to compare with the originals
    gen = torch.Generator().manual_seed(1)
    a0 = torch.randn((33, 320), generator=gen).add_(1).div_(math.sqrt(320))
    b0 = torch.randn((200, 320), generator=gen).add_(1).div_(math.sqrt(320))
    for q, orig, scales, rows in ((a, a0, x.a_scale, 1), (b, b0, x.b_scale, 128)):
        # each block's scale is its own amax / 448 (ue8m0: the next power of two up), partial blocks included
        for r in range(scales.shape[0]):
            for c in range(3):
                block = orig[r * rows : (r + 1) * rows, c * 128 : (c + 1) * 128]
                exact = float(block.abs().max()) / 448
                got = float(scales[r, c])
                if scaling == "block":
                    assert got == pytest.approx(exact, rel=1e-6)
                else:  # a power of two, at least the exact scale and less than twice it
                    assert math.log2(got) == int(math.log2(got)) and exact <= got < 2 * exact
        # e4m3 keeps 3 mantissa bits: a value within half a unit of its place, 2^-4 relative, of the original;
        # below e4m3's smallest normal (2^-6 of the scale) the spacing is the subnormals' 2^-9: half of it absolute
        el = scales.repeat_interleave(rows, dim=0)[: orig.shape[0]].repeat_interleave(128, dim=1)[:, :320]
        bound = torch.maximum(orig.abs() * 2**-4, el * 2**-10) * (1 + 1e-6)
        assert torch.all((q - orig).abs() <= bound)


def test_moe_weight_blocks_per_expert_and_draw_equals_whole_quantisation():
    x = make_inputs(moe(), 2, "cpu")
    assert x.b_scale.shape == (4, 2, 3)  # (E, ceil(200/128), ceil(320/128))
    _, s = quantize_fp8_blocks(x.dequantized()[1], "block", weight=True)
    # quantising the dequantised weight again gives the same scales (each block's amax is 448 * its scale)
    torch.testing.assert_close(s, x.b_scale, rtol=1e-6, atol=0)


# ---------------------------------------------------------------- the reference


def test_reference_equals_a_float64_product_of_the_block_dequantised_operands():
    p = dense(M=33)
    x = make_inputs(p, 3, "cpu")
    # dequantised by hand in float64: each element times its group's / block's scale
    a = x.a.double() * x.a_scale.double().repeat_interleave(128, dim=1)[:, :320]
    b = x.b.double() * x.b_scale.double().repeat_interleave(128, dim=0)[:200].repeat_interleave(128, dim=1)[:, :320]
    want = a @ b.t()
    got = reference(p, x).double()
    assert float((got - want).abs().max() / want.abs().max()) < 1e-6


def _planted(neighbour: bool) -> Variant:
    """A plugin-style variant computing in torch, with the right block scales or with the weight scales of the
    NEIGHBOURING K group (group c takes group (c + 1) % 3's scale): what a kernel off by one K block does."""

    def make(problem, inputs):
        s = inputs.b_scale
        if neighbour:
            s = s.roll(-1, dims=1)
        a = inputs.a.float() * inputs.a_scale.repeat_interleave(128, dim=1)[:, : problem.K]
        b = (
            inputs.b.float()
            * s.repeat_interleave(128, dim=0)[: problem.N].repeat_interleave(128, dim=1)[:, : problem.K]
        )
        return Launch(fn=lambda: (a @ b.t()).to(inputs.out_dtype))

    return Variant("planted", "test", ("fp8",), "planted", make, scalings=("block",))


def test_a_neighbouring_block_scale_is_wrong_and_the_right_one_passes():
    p = dense(M=33)
    x = make_inputs(p, 4, "cpu")
    right = check_cell(p, _planted(False), x).result
    wrong = check_cell(p, _planted(True), x).result
    assert right.ok, right.detail
    assert not wrong.ok and wrong.max_rel_err > dtypes.FP8.tolerance


# ---------------------------------------------------------------- the Triton variants, under the interpreter


@pytest.mark.parametrize(
    "name,M",
    [("triton_dp_grouped", 1), ("triton_dp_row", 33), ("triton_splitk_atomic", 33), ("triton_splitk_reduce", 1)],
)
def test_dense_block_variants_are_ok(name, M):
    p = dense(M=M)
    v = registry.get(name)
    assert v.unsupported_reason(p, CPU) is None
    r = check_cell(p, v, make_inputs(p, 5, "cpu"))
    assert r.result.ok, r.result.detail
    if "splitk" in name:
        assert r.launch.config["SPLIT_K"] == 2  # the reduction ran: K split over two programs


@pytest.mark.parametrize("block_n", [32, 128, 256])
def test_dense_block_tiles_inside_one_weight_block_and_across_two(block_n):
    """gemmbench/kernels/tile_loop.weight_scale_ptrs: a BLOCK_N dividing 128 (32, 128) reads one weight scale per tile and K step,
    256 one per column (its tile spans both of N = 200's block rows, the full one and the partial one)."""
    from gemmbench.kernels.dense_dp import DenseConfig

    p = dense(M=1)
    x = make_inputs(p, 7, "cpu")
    t = registry.get("triton_dp_grouped").tunable
    launch = t.build(p, x, DenseConfig.tile(16, block_n, 64, 4, 1, GROUP_M=1))
    r = check_cell(p, registry.get("triton_dp_grouped"), x, launch=launch).result
    assert r.ok, r.detail


@pytest.mark.parametrize(
    "name,ep",
    [
        ("triton_moe_col", 1),
        ("triton_moe_splitk", 2),
        ("triton_moe_col", 2),
        ("triton_moe_persistent", 2),
        ("triton_moe_permuted", 2),
    ],
)
def test_fused_moe_block_variants_are_ok(name, ep):
    p = moe(ep=ep, scaling="block-ue8m0")
    r = check_cell(p, registry.get(name), make_inputs(p, 6, "cpu"))
    assert r.result.ok, r.result.detail


def test_block_search_spaces_keep_block_k_within_one_scale_block(monkeypatch):
    monkeypatch.setattr(tuning, "sm_count", lambda: 132)  # the GPU spaces, as on an H100 (132 SMs), without one
    monkeypatch.setattr(tuning, "has_tma", lambda: True)
    for name, p in (("triton_dp_row", dense(M=16)), ("triton_splitk_atomic", dense(M=2048)), ("triton_moe_col", moe())):
        t = registry.get(name).tunable
        block = {c.BLOCK_K for c in t.space(p, True, True)}
        tensor = {c.BLOCK_K for c in t.space(p.with_(scaling="tensor"), True, True)}
        assert block <= {64, 128} and 256 not in block and (256 in tensor or block == tensor), (name, block, tensor)
    # BLOCK_K 256 of a decode fp8 space becomes 128 (a duplicate then: dropped); 64 and 128 stay
    from gemmbench.kernels.splitk import SplitKConfig
    from gemmbench.kernels.tile_loop import fit_block_k

    cs = [SplitKConfig.tile(16, 64, bk, 4, 3, SPLIT_K=1) for bk in (64, 128, 256)]
    assert [c.BLOCK_K for c in fit_block_k(cs, True)] == [64, 128]
    assert [c.BLOCK_K for c in fit_block_k(cs, False)] == [64, 128, 256]


# ---------------------------------------------------------------- skipped reasons


def test_skipped_reasons():
    fp16_block = dense(dtype="fp16", scaling="block")
    assert "applies to fp8 only" in registry.get("cublas_fp16").unsupported_reason(fp16_block, CPU)
    assert dense(dtype="fp16", scaling="tensor").scaling == "none"  # a 16-bit dtype scales nothing
    plugin = Variant("plug", "p", ("fp8",), "x", lambda p, i: None, fp8_scaling="row")  # the pre-issue-19 field
    assert plugin.scalings == ("row",)
    assert plugin.unsupported_reason(dense(), CPU) == "plug declares no block support: runs row"
    assert "cuBLAS only" in registry.get("cublas_fp8_block").unsupported_reason(dense(N=256, K=256), CPU)
    rowwise = registry.get("triton_splitk_atomic_rowwise")
    assert (
        rowwise.unsupported_reason(dense(), CPU) == "triton_splitk_atomic_rowwise declares no block support: runs row"
    )


def test_baselines_by_scaling():
    assert registry.baseline_for("fp8", False, "block") == "cublas_fp8_block"
    assert registry.baseline_for("fp8", False, "block-ue8m0") == "cublas_fp8_block"
    assert registry.baseline_for("fp8", False, "row") == "cublas_fp8_rowwise"
    assert registry.baseline_for("fp8", False, "tensor") == "cublas_fp8"
    # no MoE block baseline: the per-tensor one, torch_moe_loop, which runs no fp8: no speedup
    assert registry.baseline_for("fp8", True, "block") == "torch_moe_loop"


def test_bytes_count_the_block_scales():
    p = dense(M=33)
    # A 33*320 + B 200*320 bytes of e4m3, C 33*200 of bf16; scales: A 33*3, B 2*3, fp32
    assert metrics.bytes_min(p) == 33 * 320 + 200 * 320 + 2 * 33 * 200 + 4 * (33 * 3 + 2 * 3)
    # ue8m0: the same scales of one byte each
    assert metrics.bytes_min(p.with_(scaling="block-ue8m0")) == 33 * 320 + 200 * 320 + 2 * 33 * 200 + (33 * 3 + 2 * 3)
    # MoE, 3 experts hit by 5 tokens, 10 pairs: each expert's 2x3 blocks, each token's 3 groups
    m = moe()
    assert metrics.bytes_min(m, 3) == 3 * 200 * 320 + 5 * 320 + 2 * 10 * 200 + 4 * (3 * 6 + 5 * 3)


def test_stored_configs_are_named_by_a_scaling_other_than_tensor(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path))
    assert config_files.config_path("v", dense(scaling="tensor"), "H100").name == "N=200,K=320,dtype=fp8.json"
    assert config_files.config_path("v", dense(), "H100").name == "N=200,K=320,dtype=fp8,scaling=block.json"
    # ue8m0 scales run the same kernel (only the scales' values differ): they share the block configs
    assert (
        config_files.config_path("v", dense(scaling="block-ue8m0"), "H100").name
        == "N=200,K=320,dtype=fp8,scaling=block.json"
    )


# ---------------------------------------------------------------- rows, comparisons, plots keyed on scaling


def _row(variant, scaling, t, dtype="fp8"):
    return run_row(run_id="r", timestamp=stamp(), shape_set="t", gemm="g", M=16, N=256, K=256, E=1,
                topk=1, tp=1, ep=1, dtype=dtype, scaling=scaling, variant=variant, status="ok",
                time_us_median=t, time_us_p20=t, time_us_p80=t, samples_us=[t] * 5, flops=2 * 16 * 256 * 256,
                timing_mode="cold", gpu="H100")  # fmt: skip


def test_speedups_and_figures_never_mix_two_scalings(tmp_path):
    rows = [_row("cublas_fp8", "tensor", 10.0), _row("triton_dp_row", "tensor", 5.0),
            _row("cublas_fp8_block", "block", 20.0), _row("triton_dp_row", "block", 8.0)]  # fmt: skip
    sp = tables.speedups(rows)
    assert sp[id(rows[1])] == 2.0  # 10 / 5: against cuBLAS per tensor
    assert sp[id(rows[3])] == 2.5  # 20 / 8: against cuBLAS block-scaled, never 10 / 8
    path = tmp_path / "r.parquet"
    store.write_rows(path, rows)
    df = plotdata.with_speedups(store.load([path]))
    groups = plotdata.groups(df, plotdata.FIGURE_COLS)
    assert [set(g["scaling"]) for _, g in groups] == [{"tensor"}, {"block"}]
    assert plotdata.stems("speedup", [k for k, _ in groups]) == ["speedup-g-fp8", "speedup-g-fp8-block"]
    from gemmbench.results import compare

    verdicts = compare.compare(store.load([path]), store.load([path]))
    assert len(verdicts) == 4 and any("fp8 block" in v.cell for v in verdicts)  # four cells, not two


# ---------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    "args,says",
    [
        (["--dtype", "fp16", "--scaling", "block"], "applies to fp8 only"),
        (["--dtype", "fp8", "--scaling", "blocky"], "--scaling 'blocky'"),
        (["--dtype", "fp8", "--scaling", "block", "--variants", "cublas_fp8,*_rowwise"], "no selected fp8 variant"),
    ],
)
def test_bad_scaling_is_one_line_and_exit_2(tmp_path, args, says):
    r = runner.invoke(app, ["run", "--shapes", "smoke", "--m", "1", "--out", str(tmp_path), *args])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0]
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_row_without_scaling_counts_as_tensor():
    assert tables.baseline_for({"dtype": "fp8", "E": 1, "variant": "x"}) == "cublas_fp8"


def test_cublas_block_asks_its_k_rule_only_where_k_blocks_are_not_a_multiple_of_four(monkeypatch):
    """cuBLAS reads the weight's scales over rows padded to a multiple of 4 blocks of 128: K 2048 (16 blocks) and
    2560 (20) need no padding and are not asked about; K 2304 (18 blocks), 256 (2) and 2112 (17, the last partial)
    are, and take the torch's rule as their skip reason (docs/GPU-FACTS.md §8)."""
    from gemmbench.kernels import cublas_block

    asked = []
    monkeypatch.setattr(cublas_block, "_block_probe", lambda: None)
    monkeypatch.setattr(cublas_block, "_k_blocks_probe", lambda: asked.append(1) or "THE K RULE")
    hopper = DeviceInfo("cuda", "NVIDIA H200", (9, 0), 132, 50 << 20)
    v = registry.get("cublas_fp8_block")
    reasons = {K: v.unsupported_reason(dense(M=16, N=7168, K=K), hopper) for K in (2048, 2560, 2304, 256, 2112)}
    assert reasons == {2048: None, 2560: None, 2304: "THE K RULE", 256: "THE K RULE", 2112: "THE K RULE"}
    assert len(asked) == 3
