"""The stream-K GEMM (gemmbench/kernels/streamk.py) on the GPU: the TP8 QKV decode shape (N 1280, K 8192) it is built for, in
bf16, fp8 per-tensor and fp8 row-wise, at M 1, 7 and 16, over grids whose shares cross tile boundaries (132 and 66
programs, and 100, which divides no tile count), both reductions, BLOCK_K 128 and 256, and several calls of one
launch (the counters and buffer it leaves clean; ordered: the same bits every call).  No timing is asserted."""

import pytest

pytestmark = pytest.mark.gpu

CASES = [("bf16", "none"), ("fp8", "tensor"), ("fp8", "row"), ("fp8", "block")]
TILES = [  # (BLOCK_N, BLOCK_K, warps, stages, PROGRAMS, REDUCE)
    (64, 128, 4, 4, 132, "atomic"),
    (64, 256, 4, 3, 66, "atomic"),
    (128, 128, 8, 4, 100, "ordered"),
    (32, 128, 4, 5, 132, "ordered"),
]


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("dtype,scaling", CASES)
@pytest.mark.parametrize("M", [1, 7, 16])
def test_streamk_on_gpu(M, dtype, scaling, tile):
    import torch

    from gemmbench import registry
    from gemmbench.kernels.streamk import StreamKConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get("triton_streamk")
    p = Problem("test", "g", M, 1280, 8192, dtype, scaling=scaling)
    assert v.unsupported_reason(p, detect()) is None
    inputs = make_inputs(p, 3, "cuda")
    bn, bk, warps, stages, programs, reduce = tile
    if dtype == "bf16" and bk == 256:
        bk = 128  # 16-bit tiles of 256 K do not leave room for the stages
    if scaling == "block":
        bk = 128  # one K step within one 128-column scale block
    config = StreamKConfig.tile(16, bn, bk, warps, stages, PROGRAMS=programs, REDUCE=reduce)
    launch = v.tunable.build(p, inputs, config)
    assert launch.fn.programs == programs  # 1280 / bn tiles x 8192 / bk K blocks >= 640: never capped here
    ref = reference(p, inputs)
    outs = []
    for call in range(3):
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"
        assert not launch.fn.count.any()
        if reduce == "atomic":
            assert not launch.fn.buf.any()
        outs.append(launch.out.clone())
    if reduce == "ordered":  # pieces summed in piece order, whichever finished last: the same bits every call
        assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_streamk_through_make_on_gpu():
    """The variant as a sweep runs it: make() picks a config (stored, or the quick candidate)."""
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get("triton_streamk")
    for dtype, scaling in (("fp8", "tensor"), ("bf16", "none")):
        p = Problem("test", "g", 16, 1280, 8192, dtype, scaling=scaling)
        result = check_cell(p, v, make_inputs(p, 4, "cuda")).result
        assert result.ok, result.detail


PREFILL = [  # (M, dtype, scaling, BLOCK_M, BLOCK_N, warps, stages, HYBRID): TP 8 QKV (N 1280, K 8192) at prefill
    (333, "bf16", "none", 128, 256, 8, 4, False),  # 3 x 5 = 15 tiles over 132 programs: every tile in pieces
    (2048, "bf16", "none", 128, 64, 4, 5, True),  # 16 x 20 = 320 tiles: 132 whole, 188 shared
    (2048, "fp8", "tensor", 256, 128, 8, 4, False),
    (4096, "fp8", "row", 128, 128, 8, 5, True),  # 32 x 10 = 320 tiles, row-wise scales after the sum
    (1000, "fp8", "block", 128, 128, 8, 4, False),  # 8 x 10 = 80 tiles, block scales in the K loop
]


@pytest.mark.parametrize("case", PREFILL, ids=lambda c: "-".join(map(str, c)))
def test_streamk_prefill_tiles_on_gpu(case):
    """The prefill space's tiles (TMA, atomic reduction), all stream-K and hybrid, checked twice on one launch."""
    from gemmbench import registry
    from gemmbench.kernels.streamk import StreamKConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    M, dtype, scaling, bm, bn, warps, stages, hybrid = case
    v = registry.get("triton_streamk")
    p = Problem("test", "g", M, 1280, 8192, dtype, scaling=scaling)
    inputs = make_inputs(p, 5, "cuda")
    bk = 128 if dtype == "fp8" else 64
    config = StreamKConfig.tile(bm, bn, bk, warps, stages, PROGRAMS=132, TMA=True, HYBRID=hybrid)
    launch = v.tunable.build(p, inputs, config)
    assert launch.params.TMA and launch.fn.dp_tiles == (132 if hybrid else 0)
    ref = reference(p, inputs)
    for call in range(2):
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"
        assert not launch.fn.count.any() and not launch.fn.buf.any()
