"""MoE on the CPU (Triton's interpreter for the fused kernel; conftest.py sets TRITON_INTERPRET): routing
distributions, the block alignment against a per-expert loop, and every fused schedule plus the
grouped-matmul baseline against the loop reference on the edge cases (an expert with no tokens, all
tokens on one expert, a single token, tokens not a multiple of BLOCK_M, E not a power of two), fp16
and fp8.  bf16 and real sizes are in test_gpu.py."""

from __future__ import annotations

import pytest
import torch

from gemmbench import registry
from gemmbench.kernels.fused_moe import FusedMoe, MoeConfig, _build, splitk_space
from gemmbench.kernels.moe_align import check_alignment, moe_align
from gemmbench.measure.check import compare, poison, reference
from gemmbench.measure.inputs import make_inputs, route
from gemmbench.shapes import Problem

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FUSED = [
    "triton_moe_row",
    "triton_moe_col",
    "triton_moe_grouped",
    "triton_moe_splitk",
    "triton_moe_persistent",
    "triton_moe_permuted",
]

# (M tokens, N, K, E, topk, routing)
CASES = [
    (1, 48, 64, 8, 2, "uniform"),  # a single token: 6 of 8 experts get none
    (33, 80, 48, 3, 2, "uniform"),  # E = 3; 66 slots, not a multiple of BLOCK_M; N and K tails
    (20, 64, 96, 4, 1, "one-expert"),  # top-1: every token on expert 0, experts 1..3 empty
    (21, 40, 64, 5, 2, "one-expert"),  # top-2: expert 0 has all 21 tokens
    (40, 32, 64, 6, 2, "skewed"),  # Zipf-like load, E = 6
]


def moe(M, N, K, E, topk, routing="uniform", dtype="fp16"):
    return Problem("test", "moe", M, N, K, dtype, E=E, topk=topk, routing=routing)


def test_routings_shape_the_load():
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    for routing in ("uniform", "skewed", "one-expert"):
        ids, w = route(4000, 8, 2, gen(), routing)
        assert ids.shape == (4000, 2) and all(len(set(r)) == 2 for r in ids.tolist()[:200])
        assert torch.allclose(w.sum(1), w.sum(1).clamp(max=1.0))
    load = lambda r: torch.bincount(route(4000, 8, 2, gen(), r)[0].flatten().long(), minlength=8)  # noqa: E731
    uni, skew, one = load("uniform"), load("skewed"), load("one-expert")
    assert uni.max() < 1.2 * uni.float().mean()  # about even
    assert skew[0] > 2.5 * skew.float().mean() and skew[-1] < 0.5 * skew.float().mean()  # Zipf-like
    assert skew.tolist() == sorted(skew.tolist(), reverse=True)
    assert one[0] == 4000  # every token has expert 0 in its top-2


def test_unknown_routing_is_an_error():
    with pytest.raises(ValueError, match="unknown routing 'zipf'"):
        route(4, 8, 2, torch.Generator(), "zipf")


@pytest.mark.parametrize("block_m", [1, 4, 16])
@pytest.mark.parametrize("M,N,K,E,topk,routing", CASES)
def test_alignment_matches_the_per_expert_loop(M, N, K, E, topk, routing, block_m):
    inputs = make_inputs(moe(M, N, K, E, topk, routing), 5, DEV)
    a = moe_align(inputs.topk_ids, E, block_m)
    result = check_alignment(inputs.topk_ids, E, a)
    assert result.ok, result.detail
    assert a.sorted_ids.numel() == a.block_expert.numel() * block_m


def test_alignment_check_catches_a_wrong_alignment():
    inputs = make_inputs(moe(9, 32, 32, 4, 2), 5, DEV)
    a = moe_align(inputs.topk_ids, 4, 4)
    a.sorted_ids[[0, 1]] = a.sorted_ids[[1, 0]]  # two slots out of order
    assert not check_alignment(inputs.topk_ids, 4, a).ok
    a = moe_align(inputs.topk_ids, 4, 4)
    a.num_padded += 4
    assert "padded count" in check_alignment(inputs.topk_ids, 4, a).detail


@pytest.mark.parametrize("M,N,K,E,topk,routing", CASES)
@pytest.mark.parametrize(
    "name,dtype", [(n, d) for n in FUSED for d in ("fp16", "fp8")] + [("torch_grouped_mm", "fp16")]
)
def test_moe_variants_match_the_loop_reference(name, dtype, M, N, K, E, topk, routing):
    v = registry.get(name)
    p = moe(M, N, K, E, topk, routing, dtype)
    inputs = make_inputs(p, 7, DEV)
    launch = v.make(p, inputs)
    poison(launch.out)
    result = compare(p, launch.fn(), reference(p, inputs))
    assert result.ok, result.detail


@pytest.mark.parametrize("schedule", ["row", "col", "grouped"])
def test_a_schedule_that_skipped_tiles_would_be_caught(schedule):
    """Every tile is written: the NaN poison stays wherever a (block, N tile) was skipped."""
    p = moe(33, 96, 64, 3, 2)
    inputs = make_inputs(p, 1, DEV)
    launch = _build(schedule)(p, inputs, MoeConfig.tile(16, 32, 32, 4, 1, GROUP_M=2))
    poison(launch.out)
    out = launch.fn()
    assert torch.isfinite(out).all()
    out[5, 40] = float("nan")  # what one skipped tile would leave
    assert not compare(p, out, reference(p, inputs)).ok


@pytest.mark.parametrize("split_k", [1, 2])
def test_router_weight_multiply(split_k):
    p = moe(17, 48, 64, 4, 2)
    inputs = make_inputs(p, 3, DEV)
    launch = _build("grouped", mul_weight=True)(p, inputs, MoeConfig.tile(16, 32, 32, 4, 1, SPLIT_K=split_k))
    poison(launch.out)
    want = reference(p, inputs) * inputs.topk_weights.reshape(-1, 1).float()
    result = compare(p, launch.fn(), want)
    assert result.ok, result.detail


# (tokens, N, K, E, topk, routing, BLOCK_K, SPLIT_K) of the SplitK form
SPLITK_CASES = [
    (1, 48, 160, 8, 2, "uniform", 32, 4),  # 5 K blocks over 4 splits: 2, 2, 1 and an empty fourth
    (33, 80, 48, 3, 2, "uniform", 32, 2),  # K tail inside the second split; N tail
    (21, 40, 96, 5, 2, "one-expert", 32, 8),  # SPLIT_K above the 3 K blocks: capped at 3
    (20, 64, 16, 4, 1, "one-expert", 32, 4),  # one K block: the data-parallel path
]


@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
@pytest.mark.parametrize("M,N,K,E,topk,routing,bk,split_k", SPLITK_CASES)
def test_moe_splitk_against_the_loop_and_buffers_left_clean(M, N, K, E, topk, routing, bk, split_k, dtype):
    """Every call right (three in a row: the last split of a tile clears the fp32 buffer and the counter for
    the next call), the split actually launched recorded, and the buffers zero afterwards."""
    p = moe(M, N, K, E, topk, routing, dtype)
    inputs = make_inputs(p, 11, DEV)
    launch = _build()(p, inputs, MoeConfig.tile(16, 32, bk, 4, 1, GROUP_M=2, SPLIT_K=split_k))
    assert launch.config["SPLIT_K"] == min(split_k, -(-K // bk)) and launch.config["schedule"] == "col"
    ref = reference(p, inputs)
    for call in range(3):
        poison(launch.out)
        result = compare(p, launch.fn(), ref)
        assert result.ok, f"call {call}: {result.detail}"
    if launch.config["SPLIT_K"] > 1:
        assert torch.count_nonzero(launch.fn.buf) == 0 and torch.count_nonzero(launch.fn.count) == 0


def test_moe_splitk_space_splits_the_few_tile_case():
    """Few tokens on a narrow, deep expert GEMM: real splits are among the candidates; many tokens on a wide
    one: data-parallel ones (SPLIT_K = 1) are."""
    from unittest import mock

    with mock.patch("gemmbench.configs.tuning.sm_count", return_value=132):
        decode = splitk_space(moe(1, 1792, 4096, 8, 2, dtype="bf16"), on_gpu=True)
        prefill = splitk_space(moe(4096, 14336, 4096, 8, 2, dtype="bf16"), on_gpu=True)
        quick = splitk_space(moe(1, 1792, 4096, 8, 2, dtype="bf16"), on_gpu=True, full=False)
    assert max(c.SPLIT_K for c in decode) >= 4 and all(c.schedule == "col" for c in decode)
    assert {c.SPLIT_K for c in prefill} == {1}
    assert len(quick) == 1 and quick[0].SPLIT_K > 1


def test_moe_space_between_decode_and_prefill_has_vllms_mixtral_tiles():
    """Mixtral 8x7B at TP 2 (E 8, top 2, w13 N 7168, K 4096): 256 tokens put 256 * 2 / 8 = 64 rows on an expert, the
    decode side of the split; vLLM's H100 entry there (64 x 128 x 128, GROUP_M 64, 4 warps, 4 stages) must be a
    candidate, and at 512 tokens (128 rows, the prefill side) its 64 x 256 x 64, GROUP_M 32; at 16 tokens (4 rows)
    no 64-row tile is (a decode GEMM streams weights)."""
    from gemmbench.kernels.fused_moe import search_space

    def space(m):
        return {(c.BLOCK_M, c.BLOCK_N, c.BLOCK_K, c.GROUP_M, c.num_warps, c.num_stages)
                for c in search_space(moe(m, 7168, 4096, 8, 2, dtype="bf16"), on_gpu=True)}  # fmt: skip

    assert (64, 128, 128, 64, 4, 4) in space(256)
    assert (64, 256, 64, 32, 4, 4) in space(512)
    assert not any(bm == 64 for bm, *_ in space(16))
    # 64 tokens: 16 rows an expert on average, more than half a 16-row tile: 32-row tiles too (vLLM's 32 x 128 x 128
    # there, GROUP_M 1, which does not matter with one row of tiles an expert); 32 tokens (8 rows): 16 only
    assert {bm for bm, *_ in space(64)} == {16, 32} and (32, 128, 128, 8, 4, 4) in space(64)
    assert {bm for bm, *_ in space(32)} == {16}
    for m in (32, 64, 128, 200, 256):  # no candidate twice (the search would time it twice)
        configs = search_space(moe(m, 7168, 4096, 8, 2, dtype="bf16"), on_gpu=True)
        assert len(set(configs)) == len(configs), m


def test_moe_sweep_with_routings_on_the_cpu(tmp_path):
    """`gemmbench run` on the smoke set's first MoE GEMM: every MoE variant (nine rows a cell) checked and timed under
    two routings; moe_align is its own row, with no FLOPs or roofline (it is not a GEMM)."""
    from test_cli import invoke

    from gemmbench.results.store import load

    # one MoE GEMM: each routing's cells are a full interpreter run of every kernel, and a second GEMM adds no case
    shapes = tmp_path / "moe.yaml"
    shapes.write_text("name: moe\ngemms: [{id: smoke_moe, N: 64, K: 32, parallel: column, E: 4, topk: 2}]\n")
    out = tmp_path / "moe.parquet"
    res = invoke(
        "run",
        "--shapes",
        shapes,
        "--m",
        "5",  # 5 tokens x top-2 over 4 experts (M = 1 is among the kernel tests' cases)
        "--dtype",
        "fp16",
        "--routing",
        "uniform,one-expert",
        "--variants",
        "moe_align,triton_moe_*,torch_moe_loop,torch_grouped_mm",
        "--budget",
        "0.01",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.stderr
    df = load([out])
    assert len(df) == 2 * 9 and (df.status == "ok").all(), df[df.status != "ok"].reason.tolist()
    assert sorted(df.routing.unique()) == ["one-expert", "uniform"]
    align = df[df.variant == "moe_align"]
    assert align.flops.isna().all() and align.tflops.isna().all() and (align.time_us_median > 0).all()
    gemms = df[df.variant != "moe_align"]
    assert gemms.flops.notna().all() and (gemms.tflops > 0).all()


@pytest.mark.parametrize("M,grid_m", [(1, 2), (3, 6), (9, 9)])
def test_a_decode_grid_ends_at_one_block_per_routed_pair(M, grid_m):
    """By hand, E 8, top 2, 16-row blocks: the alignment lays out ceil((2M + 8 x 15) / 16) blocks (8 at M 1 and 3, 9
    at M 9), of which at most 2M hold rows; the grid takes min(blocks, 2M): 2, 6 and 9 -- and every tile still
    matches the reference."""
    p = moe(M, 64, 64, 8, 2)
    inputs = make_inputs(p, 3, DEV)
    gemm = FusedMoe(inputs, 8, 2, MoeConfig.tile(16, 32, 32, 4, 1, GROUP_M=2), "grouped", False)
    assert gemm.grid_m == grid_m
    poison(gemm.out)
    assert compare(p, gemm(), reference(p, inputs)).ok


def test_the_permuted_form_names_rows_a_descriptor_cannot_read():
    """Tensor descriptors need rows on 16-byte boundaries: fp8 K 72 is 72 bytes a row (refused), fp16 K 72 is 144."""
    from gemmbench.measure.device import detect

    v = registry.get("triton_moe_permuted")
    assert "16-byte" in v.unsupported_reason(moe(4, 64, 72, 4, 2, dtype="fp8"), detect())
    assert v.unsupported_reason(moe(4, 64, 72, 4, 2, dtype="fp16"), detect()) is None
