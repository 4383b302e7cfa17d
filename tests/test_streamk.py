"""The stream-K GEMM (gemmbench/kernels/streamk.py) under Triton's CPU interpreter, which runs the programs one after another:
shares of the MAC iterations that cross tile boundaries in different places, both reductions, every fp8 scaling, K
and N tails, a repeated call (the buffers and counters left clean), and its search space's rules.  bf16 and the real
TP8 QKV shape run on the GPU (tests/test_gpu_streamk.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gemmbench import registry
from gemmbench.kernels.streamk import PREFILL_TILES, StreamKConfig, dp_tiles, fits, max_pieces, owner, search_space
from gemmbench.measure.check import check_cell
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

V = registry.get("triton_streamk")

# (dtype, scaling, M, N, K, BLOCK_N, BLOCK_K, PROGRAMS asked, programs launched, most pieces of one tile), BLOCK_M 16.
# total = tiles x K blocks; program p's share is [p * total // P, (p + 1) * total // P).
CASES = [
    # 2 tiles x 8 K blocks = 16; P 3: [0,5) [5,10) [10,16): p1 ends tile 0 (kb 5-7) and starts tile 1 (kb 0-1)
    ("fp16", "none", 5, 64, 256, 32, 32, 3, 3, 2),
    # P 5: [0,3) [3,6) [6,9) [9,12) [12,16): p2 holds tile 0's kb 6-7 and tile 1's kb 0; 3 pieces a tile
    ("fp16", "none", 5, 64, 256, 32, 32, 5, 5, 3),
    # P 2: [0,8) [8,16): one program a whole tile, stored directly (no buffer, no counter)
    ("fp16", "none", 5, 64, 256, 32, 32, 2, 2, 1),
    # P 40 > 16 iterations: capped at 16, one K block each, so 8 pieces a tile
    ("fp16", "none", 5, 64, 256, 32, 32, 40, 16, 8),
    # 4 tiles x 8 = 32; P 7: starts 0 4 9 13 18 22 27 (32): tile 0 = p0 p1, tile 1 = p1 p2 p3, tile 2 = p3 p4 p5,
    # tile 3 = p5 p6
    ("fp8", "tensor", 16, 128, 512, 32, 64, 7, 7, 3),
    # N tail: 96 over BLOCK_N 64 is 2 tiles, the second half past N; K 320 = 5 blocks of 64: total 10, P 4: [0,2) [2,5) [5,7) [7,10): tile 0 = p0 p1, tile 1 = p2 p3
    ("fp8", "row", 1, 96, 320, 64, 64, 4, 4, 2),
    # K tail: 272 = 4 blocks of 64 and a masked 16; N 80 = 3 tiles of 32 (the last half empty): total 15, P 6:
    # starts 0 2 5 7 10 12 (15): tile 0 (0-4) = p0 p1, tile 1 (5-9) = p2 p3, tile 2 (10-14) = p4 p5
    ("fp16", "none", 7, 80, 272, 32, 64, 6, 6, 2),
    # block scales (1x128, 128x128) applied per K step inside each share: 2 tiles x 4 blocks = 8, P 3: [0,2) [2,5)
    # [5,8): tile 0 = p0 p1, tile 1 = p1 p2
    ("fp8", "block", 3, 128, 256, 64, 64, 3, 3, 2),
]


@pytest.mark.parametrize("reduce", ["atomic", "ordered"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-M{c[2]}N{c[3]}K{c[4]}-P{c[7]}")
def test_streamk_is_right_and_leaves_its_buffers_clean(case, reduce):
    dtype, scaling, M, N, K, bn, bk, asked, programs, pieces = case
    p = Problem("t", "g", M, N, K, dtype, scaling=scaling)
    x = make_inputs(p, 1, "cpu")
    launch = V.tunable.build(p, x, StreamKConfig.tile(16, bn, bk, 4, 1, PROGRAMS=asked, REDUCE=reduce))
    gemm = launch.fn
    assert gemm.programs == programs == launch.params.PROGRAMS
    tiles, k_blocks = -(-N // bn), -(-K // bk)
    assert max_pieces(tiles, k_blocks, programs) == pieces
    assert gemm.buf.shape[0] == (1 if reduce == "atomic" else pieces)
    _right_twice_and_clean(p, x, launch, reduce)


def _right_twice_and_clean(p, x, launch, reduce: str) -> None:
    """Two calls of one launch, each checked against the reference; the second call finds the counters zero again
    (and, atomic, the buffer); ordered: pieces summed in piece order, so the same bits every call."""
    gemm = launch.fn
    outs = []
    for call in range(2):
        r = check_cell(p, V, x, launch=launch).result  # the output is filled with NaN before each launch
        assert r.ok, f"call {call}: {r.detail}"
        assert not gemm.count.any()
        if reduce == "atomic":
            assert not gemm.buf.any()
        outs.append(launch.out.clone())
    if reduce == "ordered":
        assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("reduce", ["atomic", "ordered"])
def test_hybrid_gives_whole_waves_whole_and_shares_the_rest(reduce):
    # 8 tiles of 16 x 32 (N 256), 2 K blocks of 32 each, 3 programs: (8 // 3 - 1) * 3 = 3 tiles whole (one each);
    # the other 5 tiles' 10 iterations shared [0,3) [3,6) [6,10): stream-K tile 1 (iterations 2, 3) is p0's and p1's
    p = Problem("t", "g", 5, 256, 64, "fp16")
    x = make_inputs(p, 1, "cpu")
    launch = V.tunable.build(p, x, StreamKConfig.tile(16, 32, 32, 4, 1, PROGRAMS=3, REDUCE=reduce, HYBRID=True))
    gemm = launch.fn
    assert (gemm.dp_tiles, gemm.programs) == (3, 3)
    assert max_pieces(5, 2, 3) == 2 and gemm.buf.shape[0] == (1 if reduce == "atomic" else 2)
    _right_twice_and_clean(p, x, launch, reduce)


def test_dp_tiles_by_hand():
    assert dp_tiles(320, 132, True) == 132  # 2.4 waves: one whole, 1.4 shared
    assert dp_tiles(264, 132, True) == 132  # exactly 2: the second is shared out one whole tile each
    assert dp_tiles(263, 132, True) == 0  # under two waves: all stream-K
    assert dp_tiles(1000, 132, True) == 792  # 7.6 waves: 6 whole
    assert dp_tiles(1000, 132, False) == 0


def test_owner_by_hand():
    # 16 iterations over 3 programs: starts 0, 5, 10 (16 * p // 3), so iteration 4 is p0's, 5 and 9 p1's, 10 p2's
    assert [owner(i, 16, 3) for i in (0, 4, 5, 9, 10, 15)] == [0, 0, 1, 1, 2, 2]
    # as many programs as iterations: each its own
    assert [owner(i, 6, 6) for i in range(6)] == list(range(6))


def test_make_runs_the_interpreter_config():
    p = Problem("t", "g", 2, 64, 128, "fp8", scaling="tensor")
    x = make_inputs(p, 2, "cpu")
    launch = V.make(p, x)
    # 16 x 32 x 32 tiles: 2 tiles x 4 K blocks = 8 iterations over 3 programs, [0,2) [2,5) [5,8): p1 crosses
    assert launch.params.PROGRAMS == 3 and launch.provenance.source == "only"
    r = check_cell(p, V, x, launch=launch).result
    assert r.ok, r.detail


def test_fits_by_hand():
    # fp8 16 x 128 x 256, 5 stages: 5 * 144 * 256 + 32768 = 217088 bytes <= 232448; 6 stages: 253952, too many
    assert fits(16, 128, 256, 4, 5, 1) and not fits(16, 128, 256, 4, 6, 1)
    # 16 x 32 on 8 warps: 512 / 256 threads = 2 accumulator registers a thread, under the floor of 4; 4 warps: 4
    assert not fits(16, 32, 64, 8, 3, 1) and fits(16, 32, 64, 4, 3, 1)


def test_search_space_rules(monkeypatch):
    from gemmbench.configs import tuning

    monkeypatch.setattr(tuning, "sm_count", lambda: 132)
    for dtype, scaling, M, bm in (("fp8", "tensor", 16, 16), ("bf16", "none", 1, 16), ("fp8", "row", 32, 32),
                                  ("fp8", "block", 8, 16)):  # fmt: skip
        p = Problem("t", "g", M, 1280, 8192, dtype, scaling=scaling)
        space = search_space(p, on_gpu=True)
        quick = search_space(p, on_gpu=True, full=False)
        assert space[: len(quick)] == quick and len(quick) == 1
        assert len(set(space)) == len(space) > 20
        elem = 1 if dtype == "fp8" else 2
        tiles = 2 if scaling == "block" else 1
        for c in space:
            assert c.BLOCK_M == bm and c.PROGRAMS in (132, 66)
            assert fits(c.BLOCK_M, c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages, elem, tiles), c
            assert scaling != "block" or c.BLOCK_K <= 128
    assert search_space(Problem("t", "g", 4, 64, 64, "fp16"), on_gpu=False) == [
        StreamKConfig.tile(16, 32, 32, 4, 1, PROGRAMS=3)
    ]


def test_prefill_space_rules(monkeypatch):
    from gemmbench.configs import tuning

    monkeypatch.setattr(tuning, "sm_count", lambda: 132)
    for dtype, scaling, M, N in (
        ("bf16", "none", 333, 8192),
        ("fp8", "tensor", 4096, 1280),
        ("fp8", "block", 2048, 7168),
    ):
        p = Problem("t", "g", M, N, 8192, dtype, scaling=scaling)
        space = search_space(p, on_gpu=True)
        quick = search_space(p, on_gpu=True, full=False)
        assert space[: len(quick)] == quick and len({(c.BLOCK_M, c.BLOCK_N, c.num_stages) for c in quick}) == 1
        assert len(set(space)) == len(space) >= 4
        for c in space:
            assert c.PROGRAMS == 132 and c.TMA and c.REDUCE == "atomic"
            tiles_of_dtype = PREFILL_TILES["fp8" if dtype == "fp8" else "16-bit"]
            assert (c.BLOCK_M, c.BLOCK_N, c.num_warps, c.num_stages) in tiles_of_dtype
            tiles = -(-M // c.BLOCK_M) * -(-N // c.BLOCK_N)
            # the hybrid twin exactly where the grid has two waves or more (elsewhere it is all stream-K anyway)
            assert (replace(c, HYBRID=True) in space) == (tiles >= 264)
            assert scaling != "block" or c.BLOCK_M * c.BLOCK_N * 2 // (32 * c.num_warps) <= 128  # two fp32 tiles fit
