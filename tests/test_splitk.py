"""The SplitK kernel on the CPU (Triton's interpreter; conftest.py sets TRITON_INTERPRET): both
reductions against the fp32 reference in fp16 and fp8 (per-tensor and row-wise scales) with explicit
configs: M = 1, M/N tails, K not a multiple of BLOCK_K * SPLIT_K, splits that get no K block, SPLIT_K
above the number of K blocks, and the buffers left clean for the next call.  bf16 and the bitwise
determinism on real hardware are in test_gpu.py."""

from __future__ import annotations

import pytest
import torch

from gemmbench import registry
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.kernels.splitk import SplitKConfig, split_candidates
from gemmbench.measure.check import compare, poison, reference
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

DEV = "cuda" if torch.cuda.is_available() else "cpu"
VARIANTS = ["triton_splitk_atomic", "triton_splitk_reduce"]

# (M, N, K, BLOCK_K, SPLIT_K) with BLOCK_M=16, BLOCK_N=32:
CASES = [
    (1, 64, 64, 32, 2),  # M = 1, two K blocks split two ways
    (33, 80, 48, 32, 2),  # M and N tails; K = 48: a full block and a masked half block
    (17, 40, 160, 32, 4),  # 5 K blocks over 4 splits: 2, 2, 1 and an empty fourth split
    (5, 48, 16, 32, 4),  # K < BLOCK_K: one K block, SPLIT_K capped to 1 (the data-parallel path)
    (3, 32, 96, 16, 8),  # 6 K blocks, SPLIT_K = 8 > 6: capped at 6 splits of one block each
    (7, 48, 112, 32, 3),  # K = 112 = 3.5 blocks: not a multiple of BLOCK_K * SPLIT_K
    (16, 32, 64, 32, 1),  # SPLIT_K = 1: stored directly, no buffer
]


def _run(name, M, N, K, bk, split_k, dtype, calls=1, seed=3):
    v = registry.get(name)
    p = Problem("test", "g", M, N, K, dtype)
    inputs = make_inputs(p, seed, DEV, scaling=v.fp8_scaling)
    launch = v.tunable.build(p, inputs, SplitKConfig.tile(16, 32, bk, 4, 1, SPLIT_K=split_k))
    ref = reference(p, inputs)
    outs = []
    for _ in range(calls):
        poison(launch.out)
        outs.append(launch.fn().clone())
    return p, outs, ref, launch


@pytest.mark.parametrize("M,N,K,bk,split_k", CASES)
@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
@pytest.mark.parametrize("name", VARIANTS)
def test_splitk_matches_reference(name, dtype, M, N, K, bk, split_k):
    p, (out,), ref, launch = _run(name, M, N, K, bk, split_k, dtype)
    result = compare(p, out, ref)
    assert result.ok, result.detail
    assert launch.config["SPLIT_K"] == min(split_k, -(-K // bk))  # the split actually launched


@pytest.mark.parametrize("name", [v + "_rowwise" for v in VARIANTS])
def test_rowwise_scales(name):
    p, (out,), ref, _ = _run(name, 33, 80, 96, 32, 3, "fp8")
    result = compare(p, out, ref)
    assert result.ok, result.detail


@pytest.mark.parametrize("name", VARIANTS)
def test_buffers_are_clean_after_every_call(name):
    """The last split of a tile clears the counter (and, atomic, the fp32 buffer): call 2 and 3 are as
    right as call 1.  (The ordered workspace needs no clearing: every split overwrites its slice.)"""
    p, outs, ref, launch = _run(name, 17, 40, 160, 32, 4, "fp16", calls=3)
    for out in outs:
        assert compare(p, out, ref).ok
    gemm = launch.fn
    assert torch.count_nonzero(gemm.count) == 0
    if name == "triton_splitk_atomic":
        assert torch.count_nonzero(gemm.buf) == 0


def test_reduce_variant_is_bitwise_repeatable():
    _, outs, _, _ = _run("triton_splitk_reduce", 33, 80, 160, 32, 4, "fp8", calls=3)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("name,spoil", [("triton_splitk_atomic", "buf"), ("triton_splitk_reduce", "count")])
def test_a_dirty_buffer_would_be_caught(name, spoil):
    """Why the clean-up matters, and that the check would see it: stale sums in the atomic buffer are
    added to the result; a stale counter makes a tile 'finish' before its last partial arrives."""
    p, _, ref, launch = _run(name, 16, 64, 128, 32, 4, "fp16")
    gemm = launch.fn
    if spoil == "count":
        gemm.buf.zero_()  # else the last slice still holds the previous (identical) call's partial
    getattr(gemm, spoil).fill_(1)
    poison(launch.out)
    assert not compare(p, gemm(), ref).ok


def test_split_choices_fill_the_sms():
    # TP=8 QKV at decode: 20 tiles of 64 over 132 SMs; K = 8192 in 64 blocks of 128
    s = split_candidates(20, 64, 132)
    assert s[0] == 1 and all(20 * x >= 66 for x in s[1:]) and max(s) * 20 <= 8 * 132
    assert split_candidates(1000, 64, 132) == [1]  # enough tiles: data-parallel only
    assert split_candidates(1, 1, 132) == [1]  # one K block: nothing to split
    assert 2 in split_candidates(1, 2, 132) or 1 < max(split_candidates(1, 2, 132)) <= 2


def test_search_space_is_valid():
    from gemmbench.kernels import splitk

    for M in (1, 16, 32, 64, 128, 4096):
        p = Problem("t", "g", M, 1280, 8192, "fp8")
        for full in (True, False):
            space = splitk.search_space(p, True, full)
            assert space and all(c.SPLIT_K >= 1 and c.BLOCK_M >= min(M, 16) for c in space)
            assert len(set(space)) == len(space)  # no duplicates


@pytest.mark.parametrize("M,N,K,bk,split_k", [CASES[0], CASES[1], CASES[2], CASES[5]])
@pytest.mark.parametrize("name", VARIANTS + ["triton_dp_row"])
def test_tma_descriptors(name, M, N, K, bk, split_k):
    """TMA=True: tensor descriptors instead of pointers; their zero fill past M, N, K replaces the masks."""
    v = registry.get(name)
    p = Problem("test", "g", M, N, K, "fp8")
    inputs = make_inputs(p, 4, DEV, scaling=v.fp8_scaling)
    if v.family == "triton_dp":
        config = DenseConfig.tile(16, 32, bk, 4, 1, TMA=True)
    else:
        config = SplitKConfig.tile(16, 32, bk, 4, 1, SPLIT_K=split_k, TMA=True)
    launch = v.tunable.build(p, inputs, config)
    assert launch.config["TMA"]
    poison(launch.out)
    result = compare(p, launch.fn(), reference(p, inputs))
    assert result.ok, result.detail


def test_tma_falls_back_to_pointers_when_rows_are_not_16_byte_aligned():
    p = Problem("test", "g", 3, 40, 100, "fp16")  # a row of A and B is 200 bytes: no tensor descriptor
    inputs = make_inputs(p, 4, DEV)
    config = SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=2, TMA=True)
    launch = registry.get("triton_splitk_atomic").tunable.build(p, inputs, config)
    assert launch.config["TMA"] is False
    poison(launch.out)
    assert compare(p, launch.fn(), reference(p, inputs)).ok
