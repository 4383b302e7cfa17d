"""The Gluon GEMM's host side on the CPU (gemmbench/kernels/gluon_ws*.py): which problems and Tritons it refuses, the
accumulator layout, the register and shared-memory budgets, the grid, the descriptors and the search space.  The
kernel itself runs on the GPU only (tests/test_gpu_gluon_ws.py): Triton's gluon.jit has no CPU interpreter.
Expected values are worked from Hopper's rules in each test."""

from dataclasses import replace

import pytest
import torch

from gemmbench import registry
from gemmbench.kernels import gluon_ws as g
from gemmbench.kernels import gluon_ws_config as gc
from gemmbench.kernels import gluon_ws_space as gs
from gemmbench.measure.device import DeviceInfo
from gemmbench.shapes import Problem

H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", capability=(9, 0))
cfg = gc.GluonConfig.tile


def test_refuses_the_cpu_other_gpus_and_other_tritons(monkeypatch):
    p = Problem("t", "g", 512, 1024, 1024, "bf16")
    assert "CUDA GPU" in g.unsupported(p, DeviceInfo(kind="cpu", name="x"))
    # wgmma exists on compute capability 9.x only: not on Ampere, not on Blackwell
    for cap in ((8, 0), (10, 0)):
        assert "wgmma" in g.unsupported(p, DeviceInfo(kind="cuda", name="x", capability=cap))
    monkeypatch.setattr(g.triton, "__version__", "3.6.0")
    assert g.unsupported(p, H100) is None
    monkeypatch.setattr(g.triton, "__version__", "3.7.1")
    reason = g.unsupported(p, H100)
    assert "3.6" in reason and "3.7.1" in reason


@pytest.mark.parametrize(
    "dtype,N,K,what",
    [
        ("fp8", 1024, 1000, "K=1000"),  # 1000 one-byte elements: 1000 % 16 = 8
        ("bf16", 1024, 1004, "K=1004"),  # 2008 bytes: 2008 % 16 = 8
        ("bf16", 1004, 1024, "N=1004"),  # bf16 output rows of 2008 bytes
        ("fp8", 1004, 1024, "N=1004"),  # fp8's output is bf16: the same rows
    ],
)
def test_rows_tma_cannot_move_are_refused(dtype, N, K, what):
    reason = g.alignment_reason(Problem("t", "g", 64, N, K, dtype))
    assert what in reason and "16-byte" in reason


def test_aligned_rows_pass():
    assert g.alignment_reason(Problem("t", "g", 1, 1008, 1040, "fp8")) is None  # 1040 B and 2016 B rows
    assert g.alignment_reason(Problem("t", "g", 1, 1280, 8192, "bf16")) is None


@pytest.mark.parametrize(
    "bm,bn,warps,bits,want",
    [
        # 128 rows on 8 warps: 16 rows each, all along M; the instruction spans the whole 256 columns; K 32 bytes
        (128, 256, 8, 16, ([8, 1], [16, 256, 16])),
        # 64 rows take one warpgroup (4 warps of 16 rows); the second warpgroup takes the other half of N
        (64, 256, 8, 8, ([4, 2], [16, 128, 32])),
        (128, 128, 4, 8, ([4, 1], [16, 128, 32])),
    ],
)
def test_accumulator_layout(bm, bn, warps, bits, want):
    assert gc.wgmma_layout_params(bm, bn, warps, bits) == want


def test_register_limit_gives_consumers_232_and_the_producer_40():
    # ping-pong: 4 + 4 consumer warps and the producer's warpgroup of 4 (registers move per warpgroup):
    # (232 * 256 + 40 * 128) / 384 threads = 64512 / 384 = 168 registers a thread, within the SM's 65536
    assert gc.max_registers(cfg(128, 128, 64, 4, 4, SCHEDULE="pingpong")) == 168
    assert gc.max_registers(cfg(128, 256, 64, 8, 3, SCHEDULE="ws")) == 168  # 8 consumer warps: the same sum
    assert gc.max_registers(cfg(128, 128, 64, 4, 4, SCHEDULE="ws")) == (232 * 128 + 40 * 128) // 256  # 136
    assert gc.max_registers(cfg(128, 128, 64, 4, 4, SCHEDULE="persistent")) is None  # one partition: no move


def test_shared_memory_counts_the_ring_and_each_consumers_output_tile():
    # 4 stages of (128 + 128) x 64 bf16 = 131072 B, and two 128 x 128 bf16 output tiles = 65536 B
    assert gc.smem_bytes(cfg(128, 128, 64, 4, 4, SCHEDULE="pingpong"), 2) == 196608
    # 3 stages of (128 + 256) x 128 fp8 = 147456 B, one 128 x 256 bf16 output tile = 65536 B
    assert gc.smem_bytes(cfg(128, 256, 128, 8, 3, SCHEDULE="ws"), 1) == 212992


def test_block_scales_in_waves_take_two_fp32_a_row_in_every_stage():
    halves = cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1)
    # 4 stages of (128 + 128) x 128 fp8 = 131072 B, the halves' one 128 x 128 bf16 output tile = 32768 B; block
    # scales: 4 stages of 128 activation + 128 weight scales of 4 bytes = 4096 B
    assert gc.smem_bytes(halves, 1) == 163840
    assert gc.smem_bytes(halves, 1, block=True) == 167936
    # 6 stages: 196608 + 32768 = 229376 B fits 227 KiB (232448 B); with 6 x 1024 B of scales it does not
    six = cfg(128, 128, 128, 4, 6, SCHEDULE="halves", PROMOTE_WAVES=1)
    assert gc.fits(six, 1, True) and not gc.fits(six, 1, True, block=True)
    # the overlapped loop reads its scales from global memory: none in its stages
    overlap = cfg(128, 128, 128, 8, 4, SCHEDULE="ws", PROMOTE_OVERLAP=True)
    assert gc.smem_bytes(overlap, 1, block=True) == gc.smem_bytes(overlap, 1)


def test_fits_keeps_out_what_spills_or_overflows():
    # 128 x 256 on 8 warps: 128 fp32 registers a thread; fp8 promotion adds one instruction's partial, 64 rows by
    # 256 over a warpgroup's 128 threads = 128 more: 256 > 192
    ws_wide = cfg(128, 256, 128, 8, 3, SCHEDULE="ws")
    assert gc.fits(ws_wide, 1, fp8_precise=False)
    assert not gc.fits(ws_wide, 1, fp8_precise=True)
    # ping-pong 128 x 128 on 4 warps: 128 + a 64 x 128 partial (64) = 192: fits; overlapped promotion holds two
    # whole partial tiles: 3 x 128 = 384 does not
    assert gc.fits(cfg(128, 128, 128, 4, 4, SCHEDULE="pingpong"), 1, fp8_precise=True)
    assert not gc.fits(cfg(128, 128, 128, 4, 4, SCHEDULE="pingpong", PROMOTE_OVERLAP=True), 1, fp8_precise=True)
    # 6 stages of (128 + 256) x 64 bf16 = 294912 B: over the SM's 232448
    assert not gc.fits(cfg(128, 256, 64, 8, 6, SCHEDULE="ws"), 2, fp8_precise=False)
    assert not gc.fits(cfg(32, 128, 64, 4, 4, SCHEDULE="ws"), 2, fp8_precise=False)  # 32 rows: half a wgmma


def test_the_halves_overlapped_hold_whole_wgmmas_and_promote_only():
    # the halves split a tile's rows between two consumer warpgroups: a 128-row tile gives each 64 (one wgmma's
    # rows), a 64-row tile 32 (half of one); 128 x 64 overlapped: 64 x 64 fp32 over 128 threads = 32 registers a
    # tile, four counted = 128, within 232 - 40
    halves = dict(SCHEDULE="halves", PROMOTE_WAVES=0, PROMOTE_OVERLAP=True)
    assert gc.fits(cfg(128, 64, 128, 4, 6, **halves), 1, fp8_precise=True)
    assert gc.fits(cfg(128, 64, 128, 4, 6, **halves), 1, fp8_precise=False, block=True)
    assert not gc.fits(cfg(64, 64, 128, 4, 6, **halves), 1, fp8_precise=True)
    assert not gc.fits(cfg(64, 64, 128, 4, 6, **halves), 1, fp8_precise=False, block=True)
    # the overlapped partials are a promotion, as the waves are: not for the 16-bit or fast contracts
    assert not gc.fits(cfg(128, 64, 64, 4, 6, **halves), 2, fp8_precise=False)
    assert not gc.fits(cfg(128, 64, 128, 4, 6, **halves), 1, fp8_precise=False)
    waves = dict(SCHEDULE="halves", PROMOTE_WAVES=1)
    assert not gc.fits(cfg(128, 64, 128, 4, 6, **waves), 1, fp8_precise=False)
    # which run the halves without promotion, the plain K loop on each consumer's 64 rows; the promoted contracts
    # do not (fp8 precise or block scales: their sums are promoted)
    plain = cfg(128, 64, 128, 4, 6, SCHEDULE="halves")
    assert gc.fits(plain, 1, fp8_precise=False) and gc.fits(replace(plain, BLOCK_K=64), 2, fp8_precise=False)
    assert not gc.fits(plain, 1, fp8_precise=True) and not gc.fits(plain, 1, fp8_precise=False, block=True)
    assert not gc.fits(replace(plain, num_warps=8), 1, fp8_precise=False)  # a consumer is one warpgroup


def test_the_overlapped_partials_take_a_second_accumulator_within_four_tiles():
    # a second accumulator of BLOCK_N2 columns runs in the overlapped loop: halves of 128 x (64 + 16), 64 rows a
    # consumer of 128 threads: 64 x 80 / 128 = 40 a tile, four counted = 160 <= 232 - 40; 64 + 32: 48, 192 <= 192;
    # 64 + 64: 64, 256 > 192
    halves = dict(SCHEDULE="halves", PROMOTE_WAVES=0, PROMOTE_OVERLAP=True)
    assert gc.fits(cfg(128, 64, 128, 4, 6, BLOCK_N2=16, **halves), 1, fp8_precise=True)
    assert gc.fits(cfg(128, 64, 128, 4, 4, BLOCK_N2=32, **halves), 1, fp8_precise=True)
    assert not gc.fits(cfg(128, 64, 128, 4, 4, BLOCK_N2=64, **halves), 1, fp8_precise=True)
    # ws 128 x (64 + 16) on 8 warps: 128 x 80 / 256 = 40, four = 160
    assert gc.fits(cfg(128, 64, 128, 8, 6, SCHEDULE="ws", PROMOTE_OVERLAP=True, BLOCK_N2=16), 1, fp8_precise=True)
    # block scales scale a tile's columns by one weight block's scale: no second accumulator there
    assert not gc.fits(cfg(128, 64, 128, 4, 6, BLOCK_N2=16, **halves), 1, fp8_precise=False, block=True)
    # and the search space offers them (N 1280: 1280 / 80 = 16 columns of 80-wide tiles)
    p = Problem("t", "g", 1024, 1280, 8192, "fp8", fp8_accum="precise")
    full = gs.search_space(p, on_gpu=True, full=True)
    assert any(c.PROMOTE_OVERLAP and c.BLOCK_N2 for c in full)


def test_grid_is_one_program_per_tile_or_per_sm():
    # 2048 x 1280 in 128 x 128 tiles: 16 x 10 = 160 tiles
    assert g.programs(cfg(128, 128, 64, 4, 4, SCHEDULE="pipelined"), 2048, 1280, 8192, 132) == 160
    assert g.programs(cfg(128, 128, 64, 4, 4, SCHEDULE="pingpong"), 2048, 1280, 8192, 132) == 132
    assert g.programs(cfg(128, 256, 64, 8, 3, SCHEDULE="ws"), 1, 1280, 8192, 132) == 5  # 1 x 5 tiles
    # split-K: 512 x 1280 is 4 x 10 = 40 tiles; in 3 splits 120 units, in 4 160 (one program per SM at most)
    assert g.programs(cfg(128, 128, 128, 8, 4, SCHEDULE="ws", SPLIT_K=3), 512, 1280, 8192, 132) == 120
    assert g.programs(cfg(128, 128, 128, 8, 4, SCHEDULE="ws", SPLIT_K=4), 512, 1280, 8192, 132) == 132


@pytest.mark.parametrize(
    "split,K,want",
    [
        (3, 8192, (3, 22)),  # 64 K steps of 128: shares of ceil(64 / 3) = 22: 22, 22, 20
        (12, 8192, (11, 6)),  # shares of ceil(64 / 12) = 6: ten of 6 and one of 4 cover K; a twelfth would be empty
        (100, 8192, (64, 1)),  # no more splits than K steps
        (4, 1040, (3, 3)),  # ceil(1040 / 128) = 9 steps: shares of 3, three of them
        (1, 1040, (1, 9)),
    ],
)
def test_split_k_shares_are_ceil_sized_and_none_is_empty(split, K, want):
    assert gc.split_k(cfg(128, 128, 128, 8, 4, SCHEDULE="ws", SPLIT_K=split), K) == want


def test_split_k_fits_one_consumer_order_and_the_meetings_registers():
    precise = dict(elem=1, fp8_precise=True)
    halves = cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1, SPLIT_K=3)
    # a 128-row half tile on 4 warps: 64 x 128 / 128 threads = 64 fp32 a thread, and as much loaded: 128 <= 192
    assert gc.fits(halves, **precise) and gc.fits(halves, **precise, block=True)
    # 256 rows in two waves: 128 a thread, and 128 loaded: 256 > 192 (ptxas spilled it)
    assert not gc.fits(cfg(256, 128, 128, 4, 3, SCHEDULE="halves", PROMOTE_WAVES=2, SPLIT_K=3), **precise)
    assert gc.fits(cfg(256, 128, 128, 4, 3, SCHEDULE="halves", PROMOTE_WAVES=2), **precise)
    # 128 x 256 on 8 warps: 128 a thread, 256 with the loaded copy
    assert not gc.fits(cfg(128, 256, 128, 8, 3, SCHEDULE="ws", SPLIT_K=2), 1, fp8_precise=False)
    assert gc.fits(cfg(128, 128, 128, 8, 4, SCHEDULE="ws", SPLIT_K=2), 1, fp8_precise=False)
    # the halves without promotion meet as one wave of 64 rows a consumer (32 + 32 loaded, 64 a thread); with the
    # overlapped partials they do not (the partials are not the tile)
    assert gc.fits(cfg(128, 64, 128, 4, 6, SCHEDULE="halves", SPLIT_K=2, SPLIT_TAIL=True), 1, fp8_precise=False)
    overlapped = cfg(128, 64, 128, 4, 6, SCHEDULE="halves", PROMOTE_OVERLAP=True)
    assert gc.fits(overlapped, **precise) and not gc.fits(overlapped.split(2), **precise)
    # ping-pong's consumers take alternate units; the second accumulator's columns do not meet
    assert not gc.fits(cfg(128, 128, 128, 4, 4, SCHEDULE="pingpong", SPLIT_K=2), 1, fp8_precise=False)
    assert not gc.fits(cfg(128, 128, 128, 8, 4, SCHEDULE="ws", BLOCK_N2=32, SPLIT_K=2), 1, fp8_precise=False)


# The split model by hand (132 SMs, 128 x 128 fp8 tiles, K steps of 128): a launch costs its whole waves' K steps, then
# per wave of split units ceil(steps / S) + 22 + (S - 1) (its share, a meeting of MEETING_STEPS, and in split order a
# step for each slice past the first that the last unit reads); meeting by atomics ceil(steps / S) + 22
@pytest.mark.parametrize(
    "M,N,K,want,atomic",
    [
        # 4 x 10 = 40 tiles, 64 steps: whole 64; S 2: 80 units, one wave, 32 + 23 = 55; S 3: 22 + 24 = 46;
        # S 4: 160 units, two waves of 16 + 25: 82.  Atomic: S 2 54, S 3 44, S 4 two waves of 38: 76
        (512, 1280, 8192, 3, 3),
        # 8 x 10 = 80 tiles, 64 steps: whole 64; S 2: 160 units, two waves of 55 = 110; S 3: two of 46 = 92; more
        # splits, more waves.  Atomic: S 2 two of 54, S 3 two of 44 = 88: whole (as measured: 3 splits by atomics
        # 37.8 µs against 26.6 whole, docs/BENCHMARKS.md "Stream-K, and what a meeting costs")
        (1024, 1280, 8192, 1, 1),
        # 10 tiles, 64 steps, one wave up to S 13: S 6: 11 + 27 = 38; S 7: 10 + 28 = 38; S 8: 8 + 29 = 37; S 9:
        # 8 + 30 = 38.  Atomic: S 11 6 + 22 = 28, S 12 28, S 13 5 + 22 = 27; S 14 on: two waves
        (128, 1280, 8192, 8, 13),
        (128, 1280, 1024, 1, 1),  # 8 K steps: at least 4 each, so S 2: 4 + 23 = 27 (atomic 26) against 8 whole
        # 32 K steps, at least 4 a split, so S 8 at most: S 4: 8 + 25 = 33, S 5: 7 + 26, S 6: 6 + 27, S 7: 5 + 28,
        # S 8: 4 + 29, all 33, not under 32 whole.  Atomic: S 7 5 + 22 = 27, S 8 4 + 22 = 26
        (128, 1280, 4096, 1, 8),
        # 8 x 18 = 144 tiles, 128 steps: whole two waves, 256; split, one whole wave (128) and the 12 tiles past it in
        # one wave up to S 11: S 9: 15 + 30 = 45, S 10: 13 + 31 = 44, S 11: 12 + 32 = 44 (the fewer: 10).  Atomic:
        # S 10 13 + 22 = 35, S 11 12 + 22 = 34; S 12: 144 units, two waves
        (1024, 2304, 16384, 10, 11),
        # 16 x 64 = 1024 tiles, 64 steps: whole eight waves, 512; S 2: seven whole (448) and 200 units in two
        # waves of 55: 558.  Atomic: 448 + two waves of 54 = 556; S 5: 500 units, four waves of 13 + 22: 588
        (2048, 8192, 8192, 1, 1),
    ],
)
def test_the_split_models_fastest_split_is_a_quick_candidate(monkeypatch, M, N, K, want, atomic):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    # the full search's splits of one config, each way of meeting: the model's, and SPLIT_CHOICES (2, 3, 4, 6, 8,
    # 12, 16) up to twice the model's
    choices = {1: set(), 3: {2, 3, 4, 6}, 8: {2, 3, 4, 6, 8, 12, 16},
               10: {2, 3, 4, 6, 8, 10, 12, 16}, 11: {2, 3, 4, 6, 8, 11, 12, 16},
               13: {2, 3, 4, 6, 8, 12, 13, 16}}  # fmt: skip
    for accum in ("precise", "fast"):
        p = Problem("t", "g", M, N, K, "fp8", fp8_accum=accum)
        split = [c for c in gs.search_space(p, on_gpu=True, full=False) if c.splits() > 1]
        quick = [(want, True, None)] if want > 1 else []
        quick += [(atomic, True, True)] if atomic > 1 else []
        assert [(c.SPLIT_K, c.SPLIT_TAIL, c.SPLIT_ATOMIC) for c in split] == quick
        one = cfg(128, 128, 128, 8, 4, SCHEDULE="ws")
        full = [
            c
            for c in gs.search_space(p, on_gpu=True, full=True)
            if replace(c, SPLIT_K=None, SPLIT_TAIL=None, SPLIT_ATOMIC=None) == one
        ]
        assert {c.splits() for c in full if not c.SPLIT_ATOMIC} == {1} | choices[want]
        assert {c.splits() for c in full if c.SPLIT_ATOMIC} == choices[atomic]
        assert all(c.SPLIT_TAIL for c in full if c.splits() > 1)


def test_only_the_tiles_past_the_whole_waves_are_split_where_the_tail_is():
    # 1024 x 2304: 8 x 18 = 144 tiles on 132 SMs: one whole wave, then 12 tiles in 10 units each
    tail = cfg(128, 128, 128, 8, 4, SCHEDULE="ws", SPLIT_K=10, SPLIT_TAIL=True)
    assert gc.whole_tiles(tail, 1024, 2304, 132) == 132
    assert gc.units(tail, 1024, 2304, 16384, 132) == 132 + 12 * 10
    assert g.programs(tail, 1024, 2304, 16384, 132) == 132
    every = replace(tail, SPLIT_TAIL=None)  # every tile split: 1440 units
    assert gc.whole_tiles(every, 1024, 2304, 132) == 0 and gc.units(every, 1024, 2304, 16384, 132) == 1440
    # 4 x 10 = 40 tiles, fewer than SMs, no whole wave: every tile split, as without the tail
    assert gc.whole_tiles(tail, 512, 1280, 132) == 0 and gc.units(tail, 512, 1280, 8192, 132) == 40 * 10
    # 2048 x 8448: 16 x 66 = 1056 tiles, eight whole waves: nothing left to split
    assert gc.units(tail, 2048, 8448, 8192, 132) == 1056
    assert gc.units(cfg(128, 128, 128, 8, 4, SCHEDULE="ws"), 1024, 2304, 16384, 132) == 144
    # a config of one split keeps no tail; splitting keeps the config's own choice unless told
    assert tail.split(1).SPLIT_TAIL is None and tail.split(3).SPLIT_TAIL is True
    assert cfg(128, 128, 128, 8, 4, SCHEDULE="ws").split(4, tail=True).to_dict()["SPLIT_TAIL"] is True


def test_the_workspace_holds_a_slice_per_split_or_by_atomics_one_zeroed_slice_per_tile(monkeypatch):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    # 128 x 1280 bf16 in 64 x 128 tiles: 2 x 10 = 20 tiles, none whole (fewer than SMs), each in 6 units
    a, b = torch.empty(128, 8192, dtype=torch.bfloat16), torch.empty(1280, 8192, dtype=torch.bfloat16)
    out = torch.empty(128, 1280, dtype=torch.bfloat16)
    split = cfg(64, 128, 64, 4, 6, SCHEDULE="ws").split(6, tail=True)
    ordered = g.GluonGemm(a, b, out, out, out, "none", split, 0)
    assert not ordered.atomic and ordered.workspace.numel() == 20 * 6 * 64 * 128
    atomic = g.GluonGemm(a, b, out, out, out, "none", split.split(6, atomic=True), 0)
    # one 64 x 128 fp32 slice per tile, zero before the first call (each call's last units leave it so)
    assert atomic.atomic and atomic.workspace.numel() == 20 * 64 * 128 and not atomic.workspace.any()
    assert ordered.counters.numel() == atomic.counters.numel() == 2 * 20  # a counter per tile and consumer
    # a config of one split meets in no way; splitting keeps the config's own way unless told
    assert split.split(6, atomic=True).split(1).SPLIT_ATOMIC is None
    assert split.split(6, atomic=True).split(3).SPLIT_ATOMIC is True and split.split(3).SPLIT_ATOMIC is None
    assert "SPLIT_ATOMIC" not in split.to_dict() and split.split(6, atomic=True).to_dict()["SPLIT_ATOMIC"] is True


def test_a_stored_tail_split_runs_whole_where_the_model_finds_no_split_of_this_tail_pays():
    # the M 512 bucket's config of a 10240 x 8192 weight, 128 x 128 tiles split 2 past the whole waves; 132 SMs
    stored = cfg(128, 128, 128, 4, 6, SCHEDULE="halves", PROMOTE_WAVES=1, SPLIT_K=2, SPLIT_TAIL=True)
    # M 512: 4 x 80 = 320 tiles, 64 K steps: whole, three waves = 192; split 2, two whole waves (128) and 56 x 2 =
    # 112 units in one wave of 32 + 22 + 1 = 55: 183.  Kept
    at_512 = Problem("t", "g", 512, 10240, 8192, "fp8")
    assert gs.launched_split(at_512, stored, 132) == stored
    # M 333: 3 x 80 = 240 tiles: whole, two waves = 128; split 2: one whole wave (64) and 108 x 2 = 216 units in two
    # waves of 55 = 174; split 3: 64 + three waves of 22 + 24 = 202; more splits, more waves of units: run whole
    at_333 = Problem("t", "g", 333, 10240, 8192, "fp8")
    launched = gs.launched_split(at_333, stored, 132)
    assert launched.SPLIT_K is None and launched.SPLIT_TAIL is None
    assert replace(launched, SPLIT_K=2, SPLIT_TAIL=True) == stored  # nothing else changed
    # every tile split (no tail): launched as stored
    every = replace(stored, SPLIT_TAIL=None)
    assert gs.launched_split(at_333, every, 132) == every


def test_stream_k_shares_the_tails_k_steps_among_every_sm_and_meets_by_atomics(monkeypatch):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    streamed = cfg(128, 128, 128, 4, 5, SCHEDULE="halves", PROMOTE_WAVES=1).split(3, atomic=True).streamed()
    assert streamed.to_dict()["STREAM_K"] is True and not {"SPLIT_K", "SPLIT_TAIL", "SPLIT_ATOMIC"} & set(
        streamed.to_dict()
    )
    assert type(streamed).from_dict(streamed.to_dict()) == streamed  # a stored stream-K config reads back
    assert streamed.meets() and streamed.split(1).STREAM_K is None and not streamed.split(1).meets()
    # 1024 x 2304: 8 x 18 = 144 tiles, 128 K steps: one whole wave, then the 12 tiles' 12 x 128 = 1536 steps
    # shared by 132 programs
    assert gc.whole_tiles(streamed, 1024, 2304, 132) == 132
    assert gc.units(streamed, 1024, 2304, 16384, 132) == 132 + 1536
    assert g.programs(streamed, 1024, 2304, 16384, 132) == 132
    # 4 x 10 = 40 tiles of 64 steps, fewer than SMs: all 2560 steps streamed
    assert gc.whole_tiles(streamed, 512, 1280, 132) == 0 and gc.units(streamed, 512, 1280, 8192, 132) == 2560
    # 2048 x 8448: 16 x 66 = 1056 tiles, eight whole waves: nothing streamed
    assert gc.whole_tiles(streamed, 2048, 8448, 132) == 1056 and gc.units(streamed, 2048, 8448, 8192, 132) == 1056
    # the meeting's tile and the halves' waves, as split-K's: one consumer order, no second accumulator
    precise = dict(elem=1, fp8_precise=True)
    assert gc.fits(streamed, **precise) and gc.fits(streamed, **precise, block=True)
    assert not gc.fits(replace(streamed, BLOCK_N=64, BLOCK_N2=16), **precise)
    assert not gc.fits(cfg(128, 128, 128, 4, 4, SCHEDULE="pingpong", STREAM_K=True), 1, fp8_precise=False)
    assert not gc.fits(cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_OVERLAP=True, STREAM_K=True), **precise)
    # 128 x 1280 bf16 in 64 x 128 tiles: 2 x 10 = 20 tiles, none whole: streamed, one zeroed fp32 slice a tile
    a, b = torch.empty(128, 8192, dtype=torch.bfloat16), torch.empty(1280, 8192, dtype=torch.bfloat16)
    out = torch.empty(128, 1280, dtype=torch.bfloat16)
    bf16 = cfg(64, 128, 64, 4, 6, SCHEDULE="ws").streamed()
    gemm = g.GluonGemm(a, b, out, out, out, "none", bf16, 0)
    assert gemm.streamed and gemm.atomic and gemm.whole == 0 and gemm.programs == 132
    assert gemm.workspace.numel() == 20 * 64 * 128 and not gemm.workspace.any() and gemm.counters.numel() == 2 * 20
    # on 20 SMs the 20 tiles are one whole wave: nothing to stream, every tile whole and no workspace
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 20)
    whole = g.GluonGemm(a, b, out, out, out, "none", bf16, 0)
    assert not whole.streamed and not whole.atomic and whole.whole == 20 and whole.workspace.numel() == 1


def test_stream_k_is_searched_and_launched_where_a_split_of_the_tail_pays(monkeypatch):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    one = cfg(128, 128, 128, 8, 4, SCHEDULE="ws")
    # 4 x 10 = 40 tiles (split either way), and 128 x 1280 x 4096's 10 tiles (split by atomics only): the split model
    # splits them (test_the_split_models_fastest_split_is_a_quick_candidate), so the config streamed is searched too
    for M, K in ((512, 8192), (128, 4096)):
        full = gs.search_space(Problem("t", "g", M, 1280, K, "fp8", fp8_accum="fast"), on_gpu=True, full=True)
        assert one.streamed() in full
    # 2048 x 8192 x 1024: 1024 tiles of 8 K steps, seven whole waves and 100 tiles; no split of them pays (whole:
    # eight waves of 8 = 64 steps; atomic S 2: 56 + two waves of 4 + 22 = 108): no streamed config searched, and a
    # stored one runs whole
    at = Problem("t", "g", 2048, 8192, 1024, "fp8", fp8_accum="fast")
    assert one.streamed() not in gs.search_space(at, on_gpu=True, full=True)
    assert gs.launched_split(at, one.streamed(), 132) == one
    at_512 = Problem("t", "g", 512, 1280, 8192, "fp8", fp8_accum="fast")
    assert gs.launched_split(at_512, one.streamed(), 132) == one.streamed()


def test_descriptors_take_the_configs_blocks():
    a = torch.empty(333, 1040, dtype=torch.bfloat16)
    b = torch.empty(1008, 1040, dtype=torch.bfloat16)
    out = torch.empty(333, 1008, dtype=torch.bfloat16)
    da, db, db2, dc, dc2 = g.descriptors(a, b, out, cfg(128, 256, 64, 8, 3, SCHEDULE="ws"))
    assert db2 is db and dc2 is dc  # no second accumulator: the first descriptors stand in, never read
    assert (da.block_shape, db.block_shape, dc.block_shape) == ([128, 64], [256, 64], [128, 256])
    # 64 bf16 = 128 bytes a row: the widest (128-byte) swizzle
    assert da.layout.swizzle_byte_width == 128


def test_the_lag_holds_two_partials_beside_the_one_waves_fp32_tile():
    precise = Problem("t", "g", 2048, 8192, 1024, "fp8", fp8_accum="precise")
    block = Problem("t", "g", 2048, 8192, 1024, "fp8", scaling="block")
    full = gs.search_space(precise, on_gpu=True, full=True)
    lagged = lambda bm, bn, w, st, trip, s="halves", **x: cfg(  # noqa: E731
        bm, bn, 128, w, st, SCHEDULE=s, PROMOTE_WAVES=1, PROMOTE_LAG=trip, **x
    )
    # by hand, the halves of 128 x 128 (64 rows on 128 threads): the fp32 tile 64 x 128 / 128 = 64 a thread and two
    # partials as much: 192, the budget; in trips of 4, counted as four tiles, 256: out.  6 stages of (128 + 128) x
    # 128 B and two 64 x 128 bf16 output tiles: 229376 B <= 232448
    assert lagged(128, 128, 4, 6, 2) in full and lagged(128, 128, 4, 6, 4) not in full
    # 128 rows on 8 warps: 128 x 128 / 256 = 64 a thread, the same
    assert lagged(128, 128, 8, 4, 2, "ws") in full and lagged(128, 128, 8, 4, 4, "ws") not in full
    # 128 x (64 + 16) halves: 64 x 80 / 128 = 40 a tile, 120 in trips of 2 and 160 in trips of 4
    assert lagged(128, 64, 4, 6, 2, BLOCK_N2=16) in full and lagged(128, 64, 4, 6, 4, BLOCK_N2=16) in full
    # 128 x (128 + 32) halves: 80 a tile, 240 in trips of 2: out
    assert lagged(128, 128, 4, 4, 2, BLOCK_N2=32) not in full
    # the lag is of one wave's partials: two waves (256 x 128) take none
    assert replace(lagged(128, 128, 4, 6, 2), BLOCK_M=256, PROMOTE_WAVES=2, num_stages=3) not in full
    # the halves of 128 x 128 in trips of 2 start the promoted search; block scales' quick list leaves it out (it
    # ran no faster there) but their full space holds it at 5 stages: 5 x (256 x 128 + 2 x 128 x 4) + 32768 =
    # 201728 B
    assert lagged(128, 128, 4, 6, 2) in gs.search_space(precise, on_gpu=True, full=False)
    assert lagged(128, 128, 4, 5, 2) not in gs.search_space(block, on_gpu=True, full=False)
    assert lagged(128, 128, 4, 5, 2) in gs.search_space(block, on_gpu=True, full=True)


@pytest.mark.parametrize("dtype,accum", [("bf16", "precise"), ("fp8", "precise"), ("fp8", "fast")])
def test_search_space_fits_and_starts_with_the_measured_winners(dtype, accum):
    p = Problem("t", "g", 2048, 8192, 1024, dtype, fp8_accum=accum)
    elem, precise = (1, accum == "precise") if dtype == "fp8" else (2, False)
    full = gs.search_space(p, on_gpu=True, full=True)
    quick = gs.search_space(p, on_gpu=True, full=False)
    assert full[: len(quick)] == quick and len(set(full)) == len(full)
    # the halves promote (the waves or the overlapped partials) where the contract does, fp8 precise; elsewhere each
    # runs the plain K loop on its rows
    assert {c.SCHEDULE for c in full} == {"ws", "pingpong", "halves"}
    halves = [c for c in full if c.SCHEDULE == "halves"]
    assert all(bool(c.PROMOTE_WAVES or c.PROMOTE_OVERLAP) == precise for c in halves)
    # by hand: the halves of 128 x 256 hold 64 x 256 fp32 over 128 threads, 128 a thread, at 3 stages as the
    # cooperative tile (the same shared memory); with promotion a 64 x 256 partial more, 256 > 192
    bk = 128 if dtype == "fp8" else 64
    assert (cfg(128, 256, bk, 4, 3, SCHEDULE="halves") in full) == (not precise)
    wide, tall = cfg(128, 256, bk, 8, 3, SCHEDULE="ws"), cfg(256, 128, bk, 8, 3, SCHEDULE="ws")
    # by hand: 128 x 256 on 8 warps holds 128 fp32 a thread; promotion adds a 64 x 256 partial over 128 threads,
    # 128 more: 256 > 192.  256 x 128: each warpgroup's 128 x 128 (128) and a 64 x 128 partial (64): 192
    assert (wide in full) == (not precise) and tall in full
    # by hand: 4 stages of (128 + 256) x 64 bf16 = 196608 B and a 128 x 256 bf16 output tile = 65536 B: 262144 B,
    # over the 232448 an SM block may hold
    assert cfg(128, 256, 64, 8, 4, SCHEDULE="ws") not in full
    # deep rings where they fit, by hand: 8 stages of (64 + 128) rows x 128 B (64 bf16 or 128 fp8) = 196608 B and a
    # 64 x 128 output tile of 16384 B: 212992 B, within; 128 x 128 at 7 stages, 229376 + 32768 B: over
    assert cfg(64, 128, bk, 4, 8, SCHEDULE="ws") in full
    assert cfg(128, 128, bk, 4, 7, SCHEDULE="ws") not in full
    first = quick[0]
    if precise:  # the halves of 256 x 128: a one-warpgroup consumer on each 128-row half, two waves each
        assert (first.SCHEDULE, first.BLOCK_M, first.BLOCK_N, first.num_warps, first.PROMOTE_WAVES) == (
            "halves",
            256,
            128,
            4,
            2,
        )
    else:
        assert (first.SCHEDULE, first.BLOCK_M, first.BLOCK_N, first.num_warps) == ("ws", 128, 256, 8)
    assert any(c.PROMOTE_OVERLAP for c in full) == precise  # the overlapped promotion is searched for fp8 precise


@pytest.mark.parametrize(
    "M,N,promoted",
    [
        (1, 8192, True),
        (64, 8192, True),  # decode M
        (65, 8192, True),  # not decode, but 1 x 64 = 64 tiles of 128 x 128 is under 132 SMs
        (129, 16384, False),  # 2 x 128 = 256 tiles
        (333, 256, True),  # 3 x 2 = 6 tiles < 132 SMs
        (1024, 2048, True),  # 8 x 16 = 128 < 132
        (1024, 2176, False),  # 8 x 17 = 136 >= 132
        (2048, 8192, False),
    ],
)
def test_fast_accumulation_promotes_where_cublas_fast_is_accurate(monkeypatch, M, N, promoted):
    """Under the fast contract the kernel promotes at M <= 64 and on outputs of fewer 128 x 128 tiles than SMs (one
    long wgmma chain over K leaves the fast tolerance there); its search space is then precise's, which keeps
    128 x 256 out (256 registers)."""
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    fast = Problem("t", "g", M, N, 8192, "fp8", fp8_accum="fast")
    assert gs.promotes(fast) == promoted
    assert gs.promotes(Problem("t", "g", M, N, 8192, "fp8", fp8_accum="precise"))
    assert not gs.promotes(Problem("t", "g", M, N, 8192, "bf16"))
    wide = cfg(128, 256, 128, 8, 3, SCHEDULE="ws")
    assert (wide in gs.search_space(fast, on_gpu=True, full=True)) == (not promoted)
    first = gs.search_space(fast, on_gpu=True, full=False)[0]
    assert (first.BLOCK_M, first.BLOCK_N) == ((256, 128) if promoted else (128, 256))


@pytest.mark.parametrize("dtype,accum", [("bf16", "precise"), ("fp8", "precise"), ("fp8", "fast")])
def test_step_variants_search_their_own_schedule(dtype, accum):
    p = Problem("t", "g", 2048, 8192, 1024, dtype, fp8_accum=accum)
    for name, schedule in (("gluon_pipelined", "pipelined"), ("gluon_persistent", "persistent")):
        for full in (False, True):  # a run's quick candidates too: none would leave the cell without a config
            space = registry.get(name).tunable.space(p, True, full)
            assert space and {c.SCHEDULE for c in space} == {schedule}


def test_config_json_keeps_the_schedule_and_old_files_load():
    c = cfg(128, 128, 64, 4, 4, SCHEDULE="pingpong")
    assert c.to_dict()["SCHEDULE"] == "pingpong"
    loaded = gc.GluonConfig.from_dict({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4})
    assert loaded.SCHEDULE == "pingpong" and loaded.PROMOTE_OVERLAP is False


def test_block_scales_run_a_k_loop_that_scales_each_steps_own_sum():
    p = Problem("t", "g", 2048, 7168, 4096, "fp8", scaling="block")
    full = gs.search_space(p, on_gpu=True, full=True)
    # each K step's own sum is scaled: the overlapped loop's partials, or a wave's
    assert full and all((c.PROMOTE_OVERLAP or c.PROMOTE_WAVES) and not c.BLOCK_N2 for c in full)
    threads = {c: 32 * (4 if c.SCHEDULE in ("pingpong", "halves") else c.num_warps) for c in full}
    for c in full:  # a consumer's rows: halves hold half the tile's each
        tile = (c.BLOCK_M // 2 if c.SCHEDULE == "halves" else c.BLOCK_M) * c.BLOCK_N // threads[c]
        if c.PROMOTE_OVERLAP:  # by hand: the fp32 tile and two partials, counted as four, within the 192 left
            assert 4 * tile <= 192
        else:  # the fp32 tile and one wave's partial within the 192 (the scales are staged in shared memory: no
            # registers held back for them); one weight block wide
            assert tile + tile // c.PROMOTE_WAVES <= 192 and c.BLOCK_N <= 128
    assert any(c.PROMOTE_WAVES for c in full) and any(c.PROMOTE_OVERLAP for c in full)
    # by hand: 256 x 128 on 8 warps in two waves holds 256 x 128 / 256 = 128 and a 128-row wave's partial,
    # 128 x 128 / 256 = 64: 192; on 4 warps 256 + 128 = 384
    assert cfg(256, 128, 128, 8, 3, SCHEDULE="ws", PROMOTE_WAVES=2) in full
    assert cfg(256, 128, 128, 4, 3, SCHEDULE="ws", PROMOTE_WAVES=2) not in full
    assert cfg(128, 128, 128, 8, 4, SCHEDULE="ws", PROMOTE_WAVES=1) in full  # 64 + 64
    quick = gs.search_space(p, on_gpu=True, full=False)
    first = quick[0]
    assert (first.SCHEDULE, first.BLOCK_M, first.BLOCK_N, first.num_warps) == ("halves", 128, 128, 4)
    # the halves of 256 x 128 in two waves, 64 rows a wave: 64 x 128 / 128 = 64 for each of two fp32 tiles and 64 for
    # the partial, 192; 3 stages of 256 + 128 rows of 128 B and 2 x 256 fp32 scales, and a 256 x 128 bf16 output
    # tile: 3 x 51200 + 65536 = 219136 B <= 232448 (4 stages: 270336)
    assert cfg(256, 128, 128, 4, 3, SCHEDULE="halves", PROMOTE_WAVES=2) in quick
    assert cfg(256, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=2) not in full
    # the one-partition steps have no such loop: they decline block scales by declaration
    assert "block" in registry.get("gluon_persistent").declared_reason(p)
    assert registry.get("gluon_ws").declared_reason(p) is None


def test_waves_fit_one_partial_beside_the_fp32_tile():
    precise = Problem("t", "g", 2048, 8192, 1024, "fp8", fp8_accum="precise")
    full = gs.search_space(precise, on_gpu=True, full=True)
    waves = lambda bm, bn, w, st, n, s="ws": cfg(bm, bn, 128, w, st, SCHEDULE=s, PROMOTE_WAVES=n)  # noqa: E731
    # by hand, 8 warps (256 threads): a 256 x 128 or 128 x 256 fp32 tile is 128 a thread, a wave's partial (half
    # the rows) 64: 192, the budget; shared memory 3 x (256 + 128) x 128 B + 256 x 128 x 2 B = 212992 <= 232448
    assert waves(256, 128, 8, 3, 2) in full and waves(128, 256, 8, 3, 2) in full
    assert waves(256, 128, 8, 3, 1) not in full  # one wave: 128 + 128 = 256
    assert waves(64, 128, 4, 4, 2) not in full  # two waves of 32 rows: a wgmma takes 64
    # ping-pong's consumers take turns per tile (the waves are the halves'), though 128 + 64 would fit 4 warps
    assert waves(128, 128, 4, 4, 2, "pingpong") not in full
    assert not any(c.PROMOTE_WAVES for c in full if c.SCHEDULE == "pingpong")
    # a second accumulator of BLOCK_N2 columns in each wave, by hand: halves of 128 x (128 + 32), 64 rows a consumer
    # of 128 threads: 64 x 160 / 128 = 80 and as much for the partial, 160 <= 192; 4 stages of (128 + 160) x 128 B
    # and a 128 x 160 bf16 output tile: 188416 B.  In two 128-row halves of 256 rows: 160 + 80 = 240 > 192
    wide = lambda bm, bn, bn2, w, st, n, s: replace(waves(bm, bn, w, st, n, s), BLOCK_N2=bn2)  # noqa: E731
    assert wide(128, 128, 32, 4, 4, 1, "halves") in full and wide(128, 64, 16, 4, 4, 1, "halves") in full
    assert wide(256, 128, 32, 4, 3, 2, "halves") not in full
    # 8 warps, 128 x 160 in two waves: 128 x 160 / 256 = 80 and a 64-row partial, 40
    assert wide(128, 128, 32, 8, 4, 2, "ws") in full
    # the halves of 128 x 160 are a quick candidate, at 4 stages: 6 x 36864 + 40960 = 262144 B > 232448
    assert wide(128, 128, 32, 4, 4, 1, "halves") in gs.search_space(precise, on_gpu=True, full=False)
    assert wide(128, 128, 32, 4, 6, 1, "halves") not in full
    # halves, two 4-warp consumers of 128 threads on half the rows each: 256 x 128 in two waves of 64 rows holds
    # 128 x 128 / 128 = 128 and a 64 x 128 partial, 64: 192; in one wave 128 + 128 = 256
    assert waves(256, 128, 4, 3, 2, "halves") in full and waves(256, 128, 4, 3, 1, "halves") not in full
    assert waves(256, 128, 8, 3, 2, "halves") not in full  # a half is one warpgroup
    # promoted, the halves promote in the waves' K loop or the overlapped partials: 128 x 64, 64 x 64 / 128 = 32 a
    # thread for each half's fp32 tile, counted four times, 128; 128 x 128: 256, over the 192
    assert all(c.PROMOTE_WAVES or c.PROMOTE_OVERLAP for c in full if c.SCHEDULE == "halves")
    overlapped = lambda bm, bn, st: cfg(bm, bn, 128, 4, st, SCHEDULE="halves", PROMOTE_OVERLAP=True)  # noqa: E731
    assert overlapped(128, 64, 6) in full and overlapped(128, 128, 4) not in full
    assert waves(128, 128, 4, 4, 2, "halves") not in full  # halves of 64 rows in two waves of 32
    # fast accumulation on 16 x 64 = 1024 tiles (>= 132 SMs) promotes nothing: no wave is searched
    fast = Problem("t", "g", 2048, 8192, 1024, "fp8", fp8_accum="fast")
    assert not any(c.PROMOTE_WAVES for c in gs.search_space(fast, on_gpu=True, full=True))
    assert not any(c.PROMOTE_WAVES for c in gs.search_space(Problem("t", "g", 2048, 8192, 1024, "bf16"), True, True))


@pytest.mark.parametrize(
    "extra,promote,scale,want",
    [
        ({"PROMOTE_WAVES": 2}, 128, "tensor", (False, 2)),
        ({"PROMOTE_WAVES": 2}, 0, "tensor", (False, 0)),  # fast accumulation: the plain K loop
        ({"PROMOTE_WAVES": 1}, 0, "block", (False, 1)),  # block scales always scale each step's own sum
        ({}, 0, "block", (True, 0)),
        ({"PROMOTE_OVERLAP": True}, 128, "row", (True, 0)),
        ({"PROMOTE_OVERLAP": True}, 0, "row", (False, 0)),
        ({}, 128, "tensor", (False, 0)),  # Triton's promotion in its wgmma lowering
        # the halves of a promoted config promote, in waves or the overlapped partials: under the fast contract too
        # (a stored promoted config it reads)
        ({"SCHEDULE": "halves", "PROMOTE_WAVES": 2}, 0, "tensor", (False, 2)),
        ({"SCHEDULE": "halves", "PROMOTE_OVERLAP": True}, 0, "tensor", (True, 0)),
        # and without either, the plain K loop on each half (promoted in the wgmma lowering where the problem is)
        ({"SCHEDULE": "halves"}, 0, "tensor", (False, 0)),
        ({"SCHEDULE": "halves"}, 0, "none", (False, 0)),
        ({"SCHEDULE": "halves"}, 128, "tensor", (False, 0)),
    ],
)
def test_which_k_loop_promotes(extra, promote, scale, want):
    assert g.promotion(cfg(128, 128, 128, 8, 4, **{"SCHEDULE": "ws", **extra}), promote, scale) == want


@pytest.mark.parametrize(
    "turns,scale,want",
    [
        (None, "block", True),  # unset: block scales take turns, as before the field
        (None, "tensor", False),
        (None, "row", False),
        (None, "none", False),
        (False, "block", False),  # set: the config's way, whatever the scales
        (True, "tensor", True),
    ],
)
def test_the_halves_take_turns_as_the_config_says_else_with_block_scales_only(turns, scale, want):
    halves = cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1, TURNS=turns)
    assert halves.takes_turns(scale) is want
    saved = halves.to_dict()
    assert ("TURNS" in saved) is (turns is not None)  # unset stays out of the JSON: files from before read the same
    assert gc.GluonConfig.from_dict(saved) == halves


@pytest.mark.parametrize("turns,scale,want", [(None, "block", True), (None, "tensor", False), (True, "tensor", True),
                                               (False, "block", False)])  # fmt: skip
def test_the_launch_hands_the_kernel_the_configs_way_of_taking_turns(monkeypatch, turns, scale, want):
    """What reaches the kernel's TURNS constexpr: the config's field where set, else turns with block scales only."""
    seen = {}

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: seen.update(kw)

    monkeypatch.setattr(g.gluon_ws_device, "warp_specialized_kernel", Recorder())
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    a = torch.empty(256, 1024, dtype=torch.float8_e4m3fn)
    b = torch.empty(1024, 1024, dtype=torch.float8_e4m3fn)
    out = torch.empty(256, 1024, dtype=torch.bfloat16)
    halves = cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1, TURNS=turns)
    g.GluonGemm(a, b, out, out, out, scale, halves, 0)()
    assert seen["TURNS"] is want and seen["HALVES"] is True


def test_the_search_space_tries_the_halves_waves_each_way_of_taking_turns(monkeypatch):
    """The full space holds every halves config in waves twice: TURNS unset (the scales' default) and set the other
    way (block scales: False; per tensor: True); no other config sets it, and the quick candidates keep the
    default."""
    monkeypatch.setattr(gs.tuning, "sm_count", lambda: 132)
    for scaling, other in (("block", False), ("tensor", True), ("row", True)):
        p = Problem("t", "g", 2048, 7168, 2048, "fp8", scaling=scaling, fp8_accum="precise")
        full = gs.search_space(p, on_gpu=True, full=True)
        waves = [c for c in full if c.SCHEDULE == "halves" and c.PROMOTE_WAVES]
        unset = [c for c in waves if c.TURNS is None]
        assert unset and sorted(map(str, waves)) == sorted(map(str, unset + [replace(c, TURNS=other) for c in unset]))
        assert all(c.TURNS is None for c in full if c not in waves)
        assert all(c.TURNS is None for c in gs.search_space(p, on_gpu=True, full=False))
    for dtype, accum in (("fp8", "fast"), ("bf16", "none")):  # no halves in waves at this M: nothing takes turns
        p = Problem("t", "g", 2048, 7168, 2048, dtype, fp8_accum=accum)
        assert all(c.TURNS is None for c in gs.search_space(p, on_gpu=True, full=True))


def test_the_tables_config_column_names_schedule_width_and_swap():
    from gemmbench.results.tables import short_config

    wide = cfg(128, 128, 64, 8, 4, SCHEDULE="ws", BLOCK_N2=32).to_dict()
    assert short_config({**wide, "source": "tuned"}) == "128x128+32x64 ws, tuned"  # 160 columns: 128 + 32
    halves = cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1)
    assert short_config(halves.to_dict()) == "128x128x128 halves"  # the scales' way of taking turns: unnamed
    assert short_config(replace(halves, TURNS=False).to_dict()) == "128x128x128 halves no turns"
    assert short_config(replace(halves, TURNS=True).to_dict()) == "128x128x128 halves in turns"
    swapped = {"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 4, "SWAP_AB": True}
    assert short_config(swapped) == "64x16x256 split 4 swap-AB"
    assert (
        short_config({"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 1})
        == "64x16x256 split 1 = data-parallel"
    )


# The halves' width that fills the waves, by hand (132 SMs, 128-row tiles): a width's fill is its tiles over the
# SM slots of the waves they take
@pytest.mark.parametrize(
    "M,N,want,stages",
    [
        # 8 row blocks; 80 wide: 16 across, 128 tiles, 128 / 132 = 0.97; 96: 14, 112, 0.85; 128: 10, 80, 0.61;
        # 144: 9, 72, 0.55; 160: 8, 64, 0.48.  80 by 0.36 over 128: 6 stages of (128 + 80) x 128 B and a 128 x 80
        # bf16 output tile, 6 x 26624 + 20480 = 180224 B <= 232448
        (1024, 1280, (64, 16), 6),
        # 16 row blocks; 80: 256 tiles in two waves, 256 / 264 = 0.97; 160: 128 tiles, 0.97, the wider; 128: 160
        # tiles, 160 / 264 = 0.61.  5 stages: 5 x 36864 + 40960 = 225280 B (6: 262144)
        (2048, 1280, (128, 32), 5),
        # 32 row blocks; 128: 7168 tiles in 55 waves, 0.987; 160: 5760 in 44, 0.992; 80: 11488 in 88, 0.989: no
        # width beats 128 by 0.05
        (4096, 28672, None, 0),
        # one row block; 64 wide: 128 tiles, 128 / 132 = 0.97; 80: 103, 0.78; 96: 86, 0.65; 128: 64, 0.48; 144: 57,
        # 0.43; 160: 52, 0.39.  6 stages of (128 + 64) x 128 B and a 128 x 64 output tile: 6 x 24576 + 16384 = 163840
        (128, 8192, (64, 0), 6),
        # 3 row blocks; 192 wide: 43 across, 129 tiles, 129 / 132 = 0.977; 96: 86 across, 258 tiles in two waves,
        # 258 / 264 = 0.977, equal to a hundredth: the wider; 64: 384 in three, 0.97; 80: 309, 0.78; 128: 192 in two,
        # 0.73; 144: 171, 0.65; 160: 156, 0.59.  4 stages of (128 + 192) x 128 B and a 128 x 192 bf16 output tile:
        # 4 x 40960 + 49152 = 212992 B (5: 253952)
        (333, 8192, (128, 64), 4),
    ],
)
def test_the_halves_width_that_fills_the_waves_is_a_quick_candidate(monkeypatch, M, N, want, stages):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    p = Problem("t", "g", M, N, 8192, "fp8", fp8_accum="precise")
    assert gs.filling_width(p, 132) == want
    quick = gs.search_space(p, on_gpu=True, full=False)
    if want is not None:
        bn, bn2 = want
        assert cfg(128, bn, 128, 4, stages, SCHEDULE="halves", PROMOTE_WAVES=1, BLOCK_N2=bn2) in quick
    widths = {(c.BLOCK_N, c.BLOCK_N2) for c in quick if c.SCHEDULE == "halves" and c.BLOCK_M == 128}
    assert widths == {(128, 0), (128, 32)} | ({want} if want else set())  # 128 and 160 wide are quick anyway


def test_a_stored_width_runs_narrow_where_it_no_longer_fills_the_waves():
    # the halves of 128 x (128 + 32), 4 stages, stored for the M 512 bucket; 132 SMs, 128-row tiles
    stored = cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1, BLOCK_N2=32)
    narrow = replace(stored, BLOCK_N2=0)
    # N 10240, M 333 (bucket 512): 160 wide, 3 x 64 = 192 tiles in two waves, 192 / 264 = 0.73; 128 wide, 3 x 80 =
    # 240, 0.91: 0.18 better.  At M 512 the width filled: 4 x 64 = 256, 0.97, against 4 x 80 = 320 in three waves,
    # 0.81.  Runs 128 wide
    assert gs.launched_width(Problem("t", "g", 333, 10240, 8192, "fp8"), stored, 132) == narrow
    # at the bucket's own M, as stored
    assert gs.launched_width(Problem("t", "g", 512, 10240, 8192, "fp8"), stored, 132) == stored
    # M 1024: 8 x 64 = 512 tiles in four waves and 8 x 80 = 640 in five, both 0.97: as stored
    assert gs.launched_width(Problem("t", "g", 1024, 10240, 8192, "fp8"), stored, 132) == stored
    # N 8192, M 333: 160 wide, 3 x 52 = 156 tiles, 0.59; 128 wide, 192, 0.73.  But at M 512 the width did not fill
    # better either (4 x 52 = 208 in two waves, 0.79, against 256, 0.97): the tune chose it for its speed, kept
    assert gs.launched_width(Problem("t", "g", 333, 8192, 8192, "fp8"), stored, 132) == stored
    # no second accumulator: nothing to narrow
    assert gs.launched_width(Problem("t", "g", 333, 10240, 8192, "fp8"), narrow, 132) == narrow


@pytest.mark.parametrize(
    "dtype,accum,scaling,want",
    [
        # promoted: the halves of 128 x (128 + 64), 4 stages (the filling test above, by hand)
        ("fp8", "precise", "tensor", cfg(128, 128, 128, 4, 4, SCHEDULE="halves", PROMOTE_WAVES=1, BLOCK_N2=64)),
        # fast, unpromoted (3 x 64 = 192 tiles of 128 x 128, not fewer than 132 SMs): the halves without promotion,
        # a warpgroup a half, the same 212992 B at 4 stages (5: 253952 B, over 227 KB)
        ("fp8", "fast", "tensor", cfg(128, 128, 128, 4, 4, SCHEDULE="halves", BLOCK_N2=64)),
        # bf16: 4 stages of (128 + 192) x 64 x 2 B = 40960 B a stage, the same bytes
        ("bf16", "none", "none", cfg(128, 128, 64, 4, 4, SCHEDULE="halves", BLOCK_N2=64)),
        # block scales scale a tile by one weight block's scale: no second accumulator, no filling tile
        ("fp8", "precise", "block", None),
    ],
)
def test_the_config_fitted_to_m_is_the_filling_tile_of_each_contract(monkeypatch, dtype, accum, scaling, want):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    p = Problem("t", "g", 333, 8192, 8192, dtype, scaling=scaling, fp8_accum=accum)
    assert gs.filling_config(p) == want
    # 192 also loads the least (the test below); no 64-row tile fits one wave (6 x 86 = 516 tiles at 96 wide)
    assert registry.get("gluon_ws").tunable.fitted(p) == ([want] if want else [])
    if want is not None:
        assert want in gs.search_space(p, on_gpu=True, full=False)  # a run without stored configs tries it too
        assert want in gs.search_space(p, on_gpu=True, full=True)  # and the tune
    # where 128 columns fill as well (M 4096 x N 28672: the filling test above), the quick list has no filling tile
    if scaling != "block":
        assert gs.filling_config(p.with_(M=4096, N=28672)) is None


@pytest.mark.parametrize(
    "M,N,dtype,accum,want",
    [
        # 8 row blocks of 64; 64 wide: 20 across, 160 tiles, over 132 SMs; 80: 16 across, 128; 96: 14, 112: 80 wide.
        # Promoted (fp8 precise): the overlapped partials, 64 x 80 / 128 threads = 40 fp32 a thread, four tiles 160
        # of the 192; 8 stages of (64 + 80) x 128 B and a 64 x 80 bf16 output tile: 147456 + 10240 = 157696 B
        (512, 1280, "fp8", "precise", (64, 16, 128, 8, True)),
        # 4 row blocks; 64 wide: 32 across, 128 tiles, the most within 132.  bf16, no promotion: 8 stages of
        # (64 + 64) x 64 x 2 B and a 64 x 64 output tile, 131072 + 8192 B
        (256, 2048, "bf16", "none", (64, 0, 64, 8, False)),
        # 12 row blocks; 64 wide: 16 across, 192; 80: 13, 156; 96: 11, 132, one whole wave.  fp8 fast, promoted
        # anyway: 6 x 8 = 48 tiles of 128 x 128 are fewer than 132 SMs
        (768, 1024, "fp8", "fast", (64, 32, 128, 8, True)),
        # 32 row blocks: even 96 wide (86 across) makes 2752 tiles, far past one wave: none
        (2048, 8192, "fp8", "precise", None),
        # 1 row block, 64 wide: 2 tiles; 80: 2; 96: 2: the narrower
        (1, 128, "fp8", "fast", (64, 0, 128, 8, True)),
    ],
)
def test_the_64_row_tile_of_one_wave_is_a_quick_candidate(monkeypatch, M, N, dtype, accum, want):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    p = Problem("t", "g", M, N, 8192, dtype, fp8_accum=accum)
    quick = gs.search_space(p, on_gpu=True, full=False)
    if want is None:
        assert gs.one_wave_config(p) is None
        assert not any(c.BLOCK_M == 64 and c.SCHEDULE == "ws" and not c.splits() > 1 for c in quick)
        return
    bn, bn2, bk, stages, overlap = want
    config = cfg(64, bn, bk, 4, stages, SCHEDULE="ws", BLOCK_N2=bn2, PROMOTE_OVERLAP=overlap)
    assert gs.one_wave_config(p) == config
    assert config in quick  # a run without stored configs times it
    assert config in gs.search_space(p, on_gpu=True, full=True)  # and the tune's coarse pass, from the quick list
    assert gs.one_wave_config(p, schedules=("pingpong", "halves")) is None


@pytest.mark.parametrize("dtype,accum", [("fp8", "precise"), ("fp8", "fast"), ("bf16", "none")])
def test_the_configs_fitted_to_m_are_the_one_wave_tile_and_the_tile_of_least_traffic(monkeypatch, dtype, accum):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    fitted = registry.get("gluon_ws").tunable.fitted
    # M 333, N 1280: 6 row blocks of 64; 64 wide, 20 across: 120 tiles, one wave (80: 96; 96: 84): 64 wide, 8
    # stages; fp8 promoted (fast too: 3 x 10 = 30 tiles of 128 x 128, fewer than the SMs) in the overlapped partials.
    # Both offered, the one-wave tile first: the 128 x 64 tile split 2 ways (the split test below) as well
    p = Problem("t", "g", 333, 1280, 8192, dtype, fp8_accum=accum)
    fp8 = dtype == "fp8"
    one_wave = cfg(64, 64, 128 if fp8 else 64, 4, 8, SCHEDULE="ws", PROMOTE_OVERLAP=fp8)
    assert fitted(p) == [one_wave, gs.least_traffic_config(p)]
    assert gs.least_traffic_config(p).splits() == 2
    # M 50: one row block of 64, 20 tiles of 64 x 64: one wave, about a seventh of it full; still offered, beside the
    # 128-row tile of least traffic (128 x 64: 20 tiles too), split where they leave SMs idle
    small = p.with_(M=50)
    assert fitted(small)[0] == one_wave and fitted(small)[1].splits() > 1
    # N 8192: 6 x 86 = 516 tiles at 96 wide, no wave: the 128-row tile of least traffic alone, 128 + 64 wide
    (wide,) = fitted(p.with_(N=8192))
    assert (wide.BLOCK_M, wide.BLOCK_N, wide.BLOCK_N2) == (128, 128, 64)


def test_block_scales_take_no_one_wave_tile(monkeypatch):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    p = Problem("t", "g", 512, 1280, 8192, "fp8", scaling="block", fp8_accum="precise")
    assert gs.one_wave_config(p) is None


def test_the_second_accumulator_is_narrower_than_the_first():
    p = Problem("t", "g", 2048, 8192, 8192, "bf16")
    widths = {(c.BLOCK_N, c.BLOCK_N2) for c in gs.search_space(p, on_gpu=True, full=True)}
    # 192 wide as 128 + 64; 64 + 64 would be a 128 wide tile in two accumulators
    assert (128, 64) in widths and (64, 64) not in widths and (64, 32) in widths


# The width of the least operand traffic an SM has, by hand (132 SMs, M 333: 3 row blocks): its waves times the tile's
# rows and columns loaded a K step (128 + its width), the widest among equals
@pytest.mark.parametrize(
    "N,want,M",
    [
        # 192: 43 across, 129 tiles, one wave, 320; 96: 258 tiles, two, 448; 128: 192 tiles, two, 512; 144: 171,
        # two, 544; 160: 156, two, 576; 64: 384, three, 576; 80: 309, three, 624
        (8192, (128, 64), 333),
        # 192: 84 across, 252 tiles, two waves, 640; 128: 378, three, 768; 144: 336, three, 816; 160: 303, three,
        # 864; 96: 501, four, 896; 80: 603, five, 1040; 64: 753, six, 1152: 192, where its fill (252 / 264) is no
        # better than 128's (378 / 396), so filling_width offers none
        (16032, (128, 64), 333),
        # 128: 80 across, 240 tiles, two waves, 512; 144: 216, two, 544; 160: 192, two, 576; 80: 384, three, 624;
        # 192: 162, two, 640; 96: 321, three, 672; 64: 480, four, 768: not the 80 wide tile that fills three waves
        # best (its fewest columns an SM computes, 240 against 256), which loads more.  256 (40 across, 120 tiles,
        # one wave, 384) would load less, but the promoted halves do not hold it (the next test)
        (10240, (128, 0), 333),
        # 64: 20 across, 60 tiles, one wave, 192; 80, 96 and 128: 48, 42 and 30 tiles, one wave each, 208, 224, 256
        (1280, (64, 0), 333),
        # 192 would load least (112 across, 336 tiles, three waves, 960; 128: 504, four, 1024), but its last wave
        # fills 336 / 396 = 0.85 where 128 wide fills 504 / 528 = 0.95, and at the M 512 bucket no better (448 / 528
        # against 672 / 792, both 0.85): a launch runs it 128 wide (launched_width), so it is no candidate.  Nor are
        # 144 (450 tiles, 0.85), 160 (405, 0.77), 80 (807 in 7 waves, 0.87, against 64's 1008 in 8, 0.95) or 96
        # (672, 0.85): of 128 and 64 (1008 tiles, eight waves, 1536), 128
        (21504, (128, 0), 333),
        # M 3000, 24 row blocks, many waves: 64: 21504 tiles, 163 waves, 31296; 80: 17208, 131, 27248; 96: 14352,
        # 109, 24416; 128: 10752, 82, 20992; 144: 9576, 73, 19856; 160: 8616, 66, 19008; 192: 7176, 55, 17600: the
        # widest, the most MACs a byte loaded
        (57344, (128, 64), 3000),
    ],
)
def test_the_fitted_tile_is_the_width_of_least_operand_traffic_per_sm(monkeypatch, N, want, M):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    p = Problem("t", "g", M, N, 8192, "fp8", fp8_accum="precise")
    tunable = registry.get("gluon_ws").tunable
    fitted = gs.least_traffic_config(p)
    assert (fitted.SCHEDULE, fitted.BLOCK_M, fitted.BLOCK_N, fitted.BLOCK_N2) == ("halves", 128, *want)
    assert tunable.launched(p, fitted) == fitted  # the launch runs the width chosen
    assert gs.least_traffic_config(p.with_(scaling="block")) is None  # block scales: no second accumulator
    assert tunable.fitted(p)[-1] == fitted  # a run's fitted configs hold it, after the one-wave tile if any


@pytest.mark.parametrize("dtype,accum", [("bf16", "none"), ("fp8", "fast")])
def test_the_fitted_tile_is_256_wide_where_its_one_wave_loads_least(monkeypatch, dtype, accum):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    fp8 = dtype == "fp8"
    bk = 128 if fp8 else 64
    # M 333 (3 row blocks of 128), N 10240: 256 wide, 40 across, 120 tiles, one wave: 1 x (128 + 256) = 384 rows an SM
    # loads a K step, against 128 wide's 512 (the test above).  The 16-bit and fast contracts' eight-warp cooperative
    # tile holds it (not their halves, which ran no faster there): 128 x 256 fp32 over 256 threads, 128 registers each;
    # a stage (128 + 256) x 64 x 2 B (bf16) or x 128 x 1 B (fp8) = 49152 B, and the 128 x 256 bf16 output tile 65536 B:
    # 3 stages 212992 B within 227 KB, 4 262144 B not. 120 tiles on 132 SMs: split 2 ways, 240 units in two rounds of
    # half the K steps and a meeting (bf16: 2 x (64 + 22 + 1) = 174 K steps, fp8: 2 x (32 + 23) = 110) against 128 (fp8
    # 64) whole: whole.  (fp8 fast does not promote: 3 x 80 = 240 tiles of 128 x 128, more than the SMs.)
    p = Problem("t", "g", 333, 10240, 8192, dtype, fp8_accum=accum)
    want = cfg(128, 256, bk, 8, 3, SCHEDULE="ws")
    every = gs._LEAST_TRAFFIC_WIDTHS
    assert gs.least_traffic_widths(p, 132, every)[0] == (256, 0)
    assert gs.least_traffic_config(p, widths=every) == want
    # offered after the filling widths' own, 128 wide (the halves without promotion, a warpgroup on each 64 rows; 6
    # stages of (128 + 128) x 128 B and its 32768 B output tile: 229376 B; whole: its 108 tiles past a wave split 2 ways
    # take 128 + 2 x (64 + 23) = 302 K steps against 256 in bf16, 64 + 2 x (32 + 23) = 174 against 128 in fp8), which
    # 256 may not beat where there are many waves; no 64-row tile: 6 x 160 = 960 tiles
    narrower = cfg(128, 128, bk, 4, 6, SCHEDULE="halves")
    assert gs.least_traffic_config(p) == narrower
    assert registry.get("gluon_ws").tunable.fitted(p) == [narrower, want]
    # the promoted halves hold no 256 wide tile (two 64-row consumers, each 64 x 256 fp32 and its partial: 256
    # registers): the next width, 128, the filling widths' own, offered once
    promoted = p.with_(dtype="fp8", fp8_accum="precise")
    (halves,) = registry.get("gluon_ws").tunable.fitted(promoted)
    assert (halves.SCHEDULE, halves.BLOCK_N, halves.BLOCK_N2) == ("halves", 128, 0)
    # N 128256: 256 wide, 501 across, 1503 tiles, 12 waves, 4608 (192: 2004 tiles, 16 waves, 5120; 160: 2406, 19,
    # 5472; 128: 3006, 23, 5888).  bf16, 128 K steps: the split model splits the 51 tiles past 11 whole waves 2 ways
    # (11 x 128 + (64 + 22 + 1) = 1495 K steps against 12 x 128 = 1536 whole), but the last unit's meeting holds its
    # 128 registers and as many loaded, 256, past the 192 the consumers keep for accumulators: whole
    lm = p.with_(N=128256)
    assert gs.least_traffic_widths(lm, 132, every)[0] == (256, 0)
    assert gs.least_traffic_config(lm, widths=every) == want
    if not fp8:
        assert gs.filling_split(lm, want, 132) == 2 and not gc.fits(want.split(2, tail=True), 2, False)


@pytest.mark.parametrize("sms", [132, 114, 78])
def test_a_launch_runs_the_fitted_config_as_fitted(monkeypatch, sms):
    """Whatever the GPU's SM count, M and N, a launch runs each fitted config unchanged (no width narrowed, no split
    dropped), so a row's "fitted" source names what ran and its ring is the one chosen for its width."""
    monkeypatch.setattr(g.tuning, "sm_count", lambda: sms)
    tunable = registry.get("gluon_ws").tunable
    for M in (17, 129, 200, 333, 777, 1500, 3000):
        for N in (1280, 2304, 7168, 10240, 16032, 21504, 57344, 128256):
            for dtype, accum in (("fp8", "precise"), ("fp8", "fast"), ("bf16", "none")):
                p = Problem("t", "g", M, N, 8192, dtype, fp8_accum=accum)
                for fitted in tunable.fitted(p):
                    assert tunable.launched(p, fitted) == fitted, (M, N, dtype, accum)


# The fitted tile split where its tiles leave SMs idle, by hand (132 SMs, M 333: 3 row blocks).  N 1280: 64 wide has
# the least operand traffic (the test above), 3 x 20 = 60 tiles.  The split model counts K steps: a split unit's share
# of them, plus a meeting of MEETING_STEPS (22), and in split order one more for each slice past the first.  fp8 (K 8192
# in steps of 128: 64): whole 64; 2 ways 120 units in one wave, 32 + 23 = 55; 3 ways 180 units in two waves,
# 2 x (22 + 24) = 92; 4 ways 2 x (16 + 25) = 82; more ways more waves: 2.  bf16 (steps of 64: 128): whole 128; 2 ways
# 64 + 23 = 87; 3 ways 2 x (43 + 24) = 134; 4 ways 2 x (32 + 25) = 114: 2.  The fast contract promotes there (fewer
# 128 x 128 tiles than SMs): the promoted contract's halves.
@pytest.mark.parametrize(
    "dtype,accum,want",
    [
        ("fp8", "precise", cfg(128, 64, 128, 4, 6, SCHEDULE="halves", PROMOTE_WAVES=1, SPLIT_K=2, SPLIT_TAIL=True)),
        ("fp8", "fast", cfg(128, 64, 128, 4, 6, SCHEDULE="halves", PROMOTE_WAVES=1, SPLIT_K=2, SPLIT_TAIL=True)),
        # bf16, the halves without promotion: 8 stages of (128 + 64) x 64 x 2 B = 24576 B, 196608 B, and the 16384 B
        # output tile: within 227 KB; the split's meeting, 2 x 64 x 64 / 128 = 64 registers a consumer thread
        ("bf16", "none", cfg(128, 64, 64, 4, 8, SCHEDULE="halves", SPLIT_K=2, SPLIT_TAIL=True)),
    ],
)
def test_the_fitted_tile_is_split_where_its_tiles_leave_sms_idle(monkeypatch, dtype, accum, want):
    monkeypatch.setattr(g.tuning, "sm_count", lambda: 132)
    p = Problem("t", "g", 333, 1280, 8192, dtype, fp8_accum=accum)
    assert gs.least_traffic_config(p) == want
    assert registry.get("gluon_ws").tunable.launched(p, want) == want  # and a launch runs it so
    fp8 = p.with_(dtype="fp8", fp8_accum="precise")
    # N 2304, K 16384 (128 steps): 64 wide, 3 x 36 = 108 tiles, one wave; 2 ways 216 units, two waves,
    # 2 x (64 + 23) = 174; 3 ways 3 x (43 + 24) = 201; 4 ways 4 x (32 + 25) = 228; more ways, more waves: whole
    assert gs.least_traffic_config(fp8.with_(N=2304, K=16384)).splits() == 1
    # K 512 (4 steps): no split takes MIN_SPLIT_STEPS (4) steps or more
    assert gs.least_traffic_config(fp8.with_(K=512)).splits() == 1
    # N 8192: 128 + 64 wide (the test above), whose second accumulator does not meet: whole
    fitted = gs.least_traffic_config(fp8.with_(N=8192))
    assert (fitted.BLOCK_N2, fitted.splits()) == (64, 1)
