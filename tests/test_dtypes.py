"""The one dtype/scaling table (gemmbench.dtypes) and the baselines the variants declare (Variant.baseline,
registry.baseline_for, tables.baseline_for).

The values pinned here are those of the seven tables the dtype table replaced (shapes.DTYPES, inputs.TORCH_DTYPES,
metrics ACT_BYTES/OUT_BYTES, check.TOLERANCE, tables.BASELINE, ceilings.Ceilings.peak_for, plot.datasheet.DATASHEET):
moving them must change no number."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
import torch

from gemmbench import dtypes, registry, shapes
from gemmbench.measure.ceilings import Ceilings
from gemmbench.measure.inputs import make_inputs
from gemmbench.plot import datasheet
from gemmbench.registry import Launch, RegistryError, Variant
from gemmbench.results import tables

# ---------------------------------------------------------------- the dtype table


@pytest.mark.parametrize(
    "name, torch_dtype, nbytes, out, out_bytes, tol, peak, scaled",
    [
        ("fp16", torch.float16, 2, "fp16", 2, 2e-3, "bf16", False),
        ("bf16", torch.bfloat16, 2, "bf16", 2, 1.6e-2, "bf16", False),
        ("fp8", torch.float8_e4m3fn, 1, "bf16", 2, 1.6e-2, "fp8", True),
    ],
)
def test_dtype_table_holds_the_old_values(name, torch_dtype, nbytes, out, out_bytes, tol, peak, scaled):
    d = dtypes.get(name)
    assert (d.name, d.torch, d.bytes, d.out, d.out_bytes, d.tolerance, d.peak, d.scaled) == (
        name,
        torch_dtype,
        nbytes,
        out,
        out_bytes,
        tol,
        peak,
        scaled,
    )
    assert dtypes.get(name).torch is torch_dtype


def test_dtype_names_and_order_are_the_dtype_choices():
    assert dtypes.NAMES == ("fp16", "bf16", "fp8")
    assert dtypes.FP8.max_value == 448.0 == float(torch.finfo(torch.float8_e4m3fn).max)
    assert dtypes.FP16.max_value is None and dtypes.BF16.max_value is None


def test_unknown_dtype_and_scaling_are_errors():
    with pytest.raises(ValueError, match=r"unknown dtype 'fp4' \(expected one of fp16, bf16, fp8\)"):
        dtypes.get("fp4")
    with pytest.raises(
        ValueError, match=r"unknown scaling 'blocky' \(expected one of tensor, row, block, block-ue8m0\)"
    ):
        dtypes.scaling("blocky")


def test_every_peak_is_one_ceilings_measures():
    # the shared peaks (DType.peak): fp16 falls back to bf16's where the ladder has no fp16 rung (an older cache)
    assert {d.peak for d in dtypes.ALL.values()} == {"bf16", "fp8"}
    c = Ceilings(mode="cold", bandwidth_ladder=[], peak_tflops={"bf16": 700.0, "fp8": 1300.0})
    assert [c.peak_for(d) for d in dtypes.NAMES] == [700.0, 700.0, 1300.0]  # fp16 shares bf16's


def test_datasheet_peaks_are_the_old_ones():
    for gpu, product, bw in (("NVIDIA H100 80GB HBM3", "H100 SXM", 3350.0), ("NVIDIA H200", "H200 SXM", 4800.0)):
        sheet = datasheet.datasheet(gpu)
        assert (sheet.product, sheet.bw_gbps) == (product, bw)
        assert sheet.tflops == {"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0}
    assert datasheet.datasheet("NVIDIA A100-SXM4-80GB") is None


def test_make_inputs_follows_the_table():
    for name in dtypes.NAMES:
        p = shapes.Problem("s", "g", 3, 16, 32, name)
        inputs = make_inputs(p, 0, "cpu")
        d = dtypes.get(name)
        assert inputs.a.dtype == inputs.b.dtype == d.torch
        assert inputs.out_dtype == dtypes.get(d.out).torch
        assert (inputs.a_scale is not None) == d.scaled


def test_light_modules_do_not_import_torch():
    code = "import sys, gemmbench.dtypes, gemmbench.shapes, gemmbench.results.metrics; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


# ---------------------------------------------------------------- the scaling table


@pytest.mark.parametrize("M,N,K", [(1, 16, 32), (16, 8192, 8192), (33, 80, 160)])
def test_scale_counts(M, N, K):
    tensor, row = dtypes.scaling("tensor"), dtypes.scaling("row")
    assert (tensor.act_scales(M, K), tensor.weight_scales(N, K)) == (1, 1)
    assert (row.act_scales(M, K), row.weight_scales(N, K)) == (M, N)
    assert tensor.scale_bytes == row.scale_bytes == 4  # fp32
    # room for block scalings: a 1x128 / 128x128 layout counts its partial edge blocks
    block = dtypes.Scaling("block", "test", (1, 128), (128, 128))
    assert (block.act_scales(M, K), block.weight_scales(N, K)) == (M * -(-K // 128), -(-N // 128) * -(-K // 128))


# ---------------------------------------------------------------- baselines


def old_baseline_for(row: dict) -> str:
    """tables.baseline_for before the registry declared baselines: a name table and suffix parsing; since rows
    carry their scaling, cublas_fp8_rowwise's own rows are its own baseline's (row-scaled cells)."""
    if row["E"] > 1:
        return "torch_moe_loop"
    if row["dtype"] == "fp8" and row["variant"].endswith("_rowwise"):
        return "cublas_fp8_rowwise"
    return {"fp8": "cublas_fp8", "bf16": "cublas_bf16", "fp16": "cublas_fp16"}[row["dtype"]]


def _row(variant: str, dtype: str, E: int = 1) -> dict:
    """A row of the one scaling each built-in ran before block scales: fp8 per tensor, but per row for the
    *_rowwise variants; a 16-bit dtype none."""
    scaling = "none" if dtype != "fp8" else "row" if variant.endswith("_rowwise") else "tensor"
    return {"variant": variant, "dtype": dtype, "E": E, "scaling": scaling}


BUILTINS = [v.name for v in registry.all_variants() if v.source == "builtin"]


@pytest.mark.parametrize("variant", BUILTINS)
@pytest.mark.parametrize("dtype", dtypes.NAMES)
@pytest.mark.parametrize("E", [1, 8])
def test_every_builtin_row_keeps_its_baseline(variant, dtype, E):
    row = _row(variant, dtype, E)
    assert tables.baseline_for(row) == old_baseline_for(row)


def test_baselines_pinned():
    def base(variant, dtype, E=1):
        return tables.baseline_for(_row(variant, dtype, E))

    # the built-ins this covers, so that a renamed or dropped variant fails here rather than passing vacuously
    assert {"triton_splitk_atomic_rowwise", "triton_splitk_reduce_rowwise", "cublas_fp8_rowwise"} <= set(BUILTINS)
    for name in ("triton_splitk_atomic_rowwise", "triton_splitk_reduce_rowwise"):
        assert base(name, "fp8") == "cublas_fp8_rowwise"  # same scales, same work
    assert base("cublas_fp8_rowwise", "fp8") == "cublas_fp8_rowwise"  # a row-scaled cell: never two scalings
    assert base("cublas_fp8", "fp8") == "cublas_fp8"
    assert base("triton_dp_row", "fp8") == "cublas_fp8"
    assert base("triton_dp_row", "bf16") == "cublas_bf16"
    assert base("triton_splitk_atomic", "fp16") == "cublas_fp16"
    assert base("cublas_fp16", "fp16") == "cublas_fp16"
    for dtype in dtypes.NAMES:  # fp8 too: torch_moe_loop has no fp8 path, so those rows show no speedup
        assert base("triton_moe_splitk", dtype, E=8) == "torch_moe_loop"
        assert base("moe_align", dtype, E=8) == "torch_moe_loop"
        assert base("torch_moe_loop", dtype, E=8) == "torch_moe_loop"


def test_registry_baseline_lookup():
    assert [registry.baseline_for(d, moe=False) for d in dtypes.NAMES] == ["cublas_fp16", "cublas_bf16", "cublas_fp8"]
    assert registry.baseline_for("fp8", moe=False, scaling="row") == "cublas_fp8_rowwise"
    assert registry.baseline_for("bf16", moe=False, scaling="row") == "cublas_bf16"  # 16-bit has no scales
    assert [registry.baseline_for(d, moe=True) for d in dtypes.NAMES] == ["torch_moe_loop"] * 3
    # a scaling that no variant is the baseline of: the reference (per-tensor) scaling's baseline
    assert registry.baseline_for("fp8", moe=True, scaling="row") == "torch_moe_loop"
    assert registry.baseline_for("fp8", moe=False, scaling="block") == "cublas_fp8_block"


def test_a_variant_this_process_does_not_know_counts_as_per_tensor():
    # a plugin's rows read from a results file without the plugin: its scaling is unknown here
    assert tables.baseline_for({"variant": "someones_plugin_rowwise", "dtype": "fp8", "E": 1}) == "cublas_fp8"
    assert tables.baseline_for({"variant": "someones_moe_plugin", "dtype": "bf16", "E": 4}) == "torch_moe_loop"


@pytest.fixture(autouse=True)
def _unregister_test_variants():
    """The variants a test here registers leave the registry with it: another test in this process (the default
    variants) must not see them."""
    yield
    for v in registry.all_variants():
        if v.name.startswith("dtypestest_"):
            registry.unregister(v.name)


def _variant(**kw) -> Variant:
    name = f"dtypestest_{uuid.uuid4().hex[:10]}"
    return Variant(name, "test", ("fp8",), "a test variant", lambda p, i: Launch(fn=lambda: None), **kw)


def test_a_registered_variant_is_measured_against_its_scalings_baseline():
    v = registry.register(_variant(fp8_scaling="row"))  # the field older plugins use
    assert v.scalings == ("row",)
    assert tables.baseline_for({"variant": v.name, "dtype": "fp8", "E": 1, "scaling": "row"}) == "cublas_fp8_rowwise"


def test_a_second_baseline_for_one_dtype_kind_and_scaling_is_refused():
    before = registry.all_variants()
    with pytest.raises(
        RegistryError, match=r"cublas_fp8_rowwise \(builtin\) is already the baseline of fp8 row-scaled"
    ):
        registry.register(_variant(fp8_scaling="row", baseline=("fp8",)))
    with pytest.raises(RegistryError, match=r"torch_moe_loop \(builtin\) is already the baseline of bf16 MoE rows"):
        registry.register(_variant(moe=True, baseline=("bf16",)))
    with pytest.raises(RegistryError, match=r"baseline: unknown dtype 'int8'"):
        registry.register(_variant(baseline=("int8",)))
    assert registry.all_variants() == before
