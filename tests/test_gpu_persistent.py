"""The persistent TMA GEMM (gemmbench/kernels/persistent.py) on the GPU: every dtype and fp8 scaling, the tile shapes of its
search space (256-row tiles, 8 warps, BLOCK_K 64 and 128), both epilogues, warp specialisation, an output whose rows
a descriptor cannot write (the masked store), and several calls of one launch.  No timing is asserted."""

import pytest

pytestmark = pytest.mark.gpu

# (M, N, K): decode; several tiles per program (2048 x 10240 at 128 x 256: 640 tiles on 132 SMs); partial tiles in
# M, N and K; N = 100, whose bf16 rows (200 bytes) a descriptor cannot store
SHAPES = [(1, 1280, 8192), (2048, 10240, 1024), (333, 384, 208), (64, 100, 256)]
CASES = [
    ("bf16", "none"),
    ("fp16", "none"),
    ("fp8", "tensor"),
    ("fp8", "row"),
    ("fp8", "block"),
    ("fp8", "block-ue8m0"),
]
TILES = [  # (BLOCK_M, BLOCK_N, warps, stages, extra)
    (64, 128, 4, 3, {}),
    (128, 256, 8, 3, {}),
    (128, 256, 8, 3, {"EPILOGUE_SUBTILE": False}),
    (256, 128, 8, 3, {"GROUP_M": 32}),
    (128, 128, 8, 4, {"WARP_SPECIALIZE": True}),
]


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t[:4])) + "".join(f"-{k}" for k in t[4]))
@pytest.mark.parametrize("dtype,scaling", CASES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_persistent_on_gpu(M, N, K, dtype, scaling, tile):
    from gemmbench import registry
    from gemmbench.kernels.persistent import PersistentConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get("triton_persistent")
    p = Problem("test", "g", M, N, K, dtype, scaling=scaling)
    assert v.unsupported_reason(p, detect()) is None
    inputs = make_inputs(p, 3, "cuda")
    bm, bn, warps, stages, extra = tile
    bk = 128 if dtype == "fp8" else 64
    launch = v.tunable.build(p, inputs, PersistentConfig.tile(bm, bn, bk, warps, stages, **extra))
    assert launch.fn.c_desc == (N * 2 % 16 == 0)  # the descriptor store wherever the output's rows allow it
    ref = reference(p, inputs)
    for call in range(2):  # a persistent program's loop state starts afresh every launch
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"


def test_persistent_through_make_on_gpu():
    """The variant as a sweep runs it: make() picks a config (stored, or a few quick candidates timed)."""
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    for dtype in ("bf16", "fp8"):
        p = Problem("test", "g", 512, 2560, 1024, dtype, scaling="tensor" if dtype == "fp8" else "none")
        result = check_cell(p, registry.get("triton_persistent"), make_inputs(p, 4, "cuda")).result
        assert result.ok, f"{dtype}: {result.detail}"
