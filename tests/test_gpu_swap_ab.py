"""SplitK's SWAP_AB on the GPU (marker `gpu`; skipped without CUDA): swapped against unswapped and against the fp32
reference, in bf16 (which the CPU interpreter computes wrongly) and fp8 with per-tensor and row-wise scales, at
decode M on Llama-70B TP 8's QKV projection (N 1280, K 8192) and on N 8192, K 1024.  No timing is asserted."""

import pytest

pytestmark = pytest.mark.gpu

SHAPES = [(1280, 8192), (8192, 1024)]
KERNELS = [  # (variant, dtype): the _rowwise variants run fp8 with (M, 1) and (N, 1) scales
    (name + suffix, dtype)
    for name in ("triton_splitk_atomic", "triton_splitk_reduce")
    for suffix, dtype in (("", "bf16"), ("", "fp8"), ("_rowwise", "fp8"))
]


def _configs(M: int, dtype: str):
    """(unswapped, swapped) configs of one decode M: the same BLOCK_K and split; swapped, BLOCK_M tiles N and the
    narrow BLOCK_N the tokens."""
    from gemmbench.kernels.splitk import SplitKConfig

    bk = 256 if dtype == "fp8" else 128
    rows = 16 if M <= 16 else 64
    plain = SplitKConfig.tile(rows, 64, bk, 4, 4, SPLIT_K=4)
    swapped = SplitKConfig.tile(64, rows, bk, 4, 4, SPLIT_K=4, SWAP_AB=True)
    return plain, swapped


@pytest.mark.parametrize("name,dtype", KERNELS)
@pytest.mark.parametrize("N,K", SHAPES)
@pytest.mark.parametrize("M", [1, 16, 64])
def test_swapped_matches_unswapped_and_the_reference(name, dtype, N, K, M):
    from gemmbench import registry
    from gemmbench.measure.check import check_cell, compare, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get(name)
    p = Problem("test", "g", M, N, K, dtype, scaling=v.scalings[0] if dtype == "fp8" else "none")
    inputs = make_inputs(p, 6, "cuda", scaling=v.fp8_scaling)
    ref = reference(p, inputs)
    outs = []
    for config in _configs(M, dtype):
        launch = v.tunable.build(p, inputs, config)
        assert launch.config.get("SWAP_AB") is config.SWAP_AB  # unset is left out of the JSON
        for call in range(3):  # the buffers the last split clears are right for the next call too
            checked = check_cell(p, None, inputs, launch=launch, ref=ref)
            assert checked.result.ok, f"SWAP_AB={config.SWAP_AB} call {call}: {checked.result.detail}"
        outs.append(checked.out.float().clone())
    plain, swapped = outs
    agree = compare(p, swapped, plain)
    assert agree.ok, f"swapped against unswapped: {agree.detail}"


@pytest.mark.parametrize("M", [1, 16, 64])
def test_swap_candidates_run_in_a_tune(M):
    """Every SWAP_AB candidate of the full search compiles and is right on this GPU (a config that needs more shared
    memory than the GPU has would only be dropped by the tuner: here it fails)."""
    from gemmbench import registry
    from gemmbench.kernels.splitk import search_space
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get("triton_splitk_atomic")
    p = Problem("test", "g", M, 1280, 8192, "fp8")
    inputs = make_inputs(p, 6, "cuda")
    ref = reference(p, inputs)
    swapped = [c for c in search_space(p, True, True) if c.SWAP_AB]
    assert swapped
    for config in swapped:
        result = check_cell(p, None, inputs, launch=v.tunable.build(p, inputs, config), ref=ref).result
        assert result.ok, f"{config}: {result.detail}"
