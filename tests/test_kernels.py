"""Built-in kernels on the CPU (Triton through its interpreter, cuBLAS baselines through torch's CPU
matmul): edge shapes against the fp32 reference by the worker's own check path, explicit configs of
the data-parallel kernel, tile schedules run as jitted code, and the MoE reference loop.

conftest.py sets TRITON_INTERPRET=1 (when there is no GPU) before this module is imported, so the
kernels decorated here and in gemmbench.kernels run in the interpreter.  bf16 Triton is left to tests/test_gpu.py (the
interpreter computes bf16 tl.dot wrongly and raises nothing).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

# At module level: a jitted function finds the functions it calls among its module's globals.
from gemmbench.kernels.schedules import tile_of
from gemmbench.shapes import Problem

DEV = "cuda" if torch.cuda.is_available() else "cpu"

DP_VARIANTS = ["triton_dp_row", "triton_dp_col", "triton_dp_grouped"]
# (M, N, K) against the CPU config (BLOCK_M=16, BLOCK_N=32, BLOCK_K=32): M=1; M and N not multiples
# of the tile with K=48 (not a multiple of BLOCK_K); K=16 < BLOCK_K; a small M with N a multiple of 16
# only; a deep K=160 (5 full K steps) with N=40; full 128-wide tiles with an even K.
EDGE_SHAPES = [(1, 64, 64), (33, 80, 48), (33, 80, 16), (5, 48, 48), (17, 40, 160), (128, 128, 128)]


def _device():
    from gemmbench.measure.device import detect

    return detect()


def _check(name: str, problem: Problem, seed: int = 1, inputs=None):
    """The one check (check.check_cell) on fresh inputs: make, NaN-poison the output, one launch, compare."""
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs

    v = registry.get(name)
    if inputs is None:
        inputs = make_inputs(problem, seed, DEV)  # in the problem's scaling
    checked = check_cell(problem, v, inputs)
    return checked.result, checked.launch, inputs


# ---------------------------------------------------------------- Triton data-parallel GEMM


def test_cpu_config_is_the_one_the_edge_shapes_are_built_around():
    """The edge shapes assume BLOCK_M=16, BLOCK_N=32, BLOCK_K=32 on the CPU: keep them honest."""
    from gemmbench.kernels import dense_dp, splitk

    if DEV != "cpu":
        pytest.skip("the CPU config only")
    for space in (dense_dp.search_space, splitk.search_space):
        (cfg,) = space(Problem("test", "g", 33, 80, 48, "fp16"), False, True)
        assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K) == (16, 32, 32)


@pytest.mark.parametrize("M,N,K", EDGE_SHAPES)
@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
@pytest.mark.parametrize("name", DP_VARIANTS)
def test_triton_dp_matches_reference(name, dtype, M, N, K):
    from gemmbench import registry

    p = Problem("test", "g", M, N, K, dtype)
    reason = registry.get(name).unsupported_reason(p, _device())
    if DEV == "cuda" and reason:
        pytest.skip(reason)
    assert reason is None, reason  # the CPU interpreter runs fp16 and fp8
    result, launch, _ = _check(name, p)
    assert result.ok, f"{name} {dtype} {M}x{N}x{K}: {result.detail}"
    assert launch.out is not None and launch.out.shape == (M, N)
    assert launch.out.dtype == (torch.bfloat16 if dtype == "fp8" else torch.float16)
    assert launch.config["schedule"] == name.removeprefix("triton_dp_")


def test_triton_bf16_is_refused_by_the_interpreter():
    from gemmbench import registry

    if DEV != "cpu":
        pytest.skip("interpreter only")
    reason = registry.get("triton_dp_row").unsupported_reason(Problem("t", "g", 16, 32, 32, "bf16"), _device())
    assert reason is not None and "bf16" in reason


def test_check_path_catches_a_kernel_that_skips_a_tile():
    """The poison + compare path the edge-shape tests rely on does fail a kernel that leaves a tile out."""
    from gemmbench import registry
    from gemmbench.measure.check import compare, poison, reference
    from gemmbench.measure.inputs import make_inputs

    p = Problem("test", "g", 33, 80, 48, "fp16")
    v = registry.get("triton_dp_row")
    inputs = make_inputs(p, 1, DEV)
    launch = v.make(p, inputs)
    poison(launch.out)
    launch.fn()
    launch.out[16:32, 32:64] = float("nan")  # as if the tile (1, 1) had never been written
    result = compare(p, launch.out, reference(p, inputs))
    assert not result.ok
    assert "512 non-finite" in result.detail and "rows 16..31, cols 32..63" in result.detail


CONFIGS = [
    # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M: grids (M=37, N=70, K=50) in the comments
    (16, 16, 16, 1),  # 3 x 5 tiles, 4 K steps, last one 2 deep
    (16, 32, 32, 2),  # 3 x 3 tiles: grouped's last group has 1 row of tiles, not 2
    (16, 16, 32, 3),  # 3 x 5 tiles: one group of exactly GROUP_M rows
    (32, 16, 16, 3),  # 2 x 5 tiles: GROUP_M larger than the grid
    (16, 64, 64, 2),  # K=50 < BLOCK_K=64: a single masked K step
    (64, 128, 16, 1),  # one tile bigger than the whole output
]


@pytest.mark.parametrize("schedule", ["row", "col", "grouped"])
@pytest.mark.parametrize("bm,bn,bk,group_m", CONFIGS)
def test_dp_gemm_explicit_configs(bm, bn, bk, group_m, schedule):
    from gemmbench.kernels.dense_dp import DenseConfig, dp_gemm
    from gemmbench.measure.check import compare, poison, reference
    from gemmbench.measure.inputs import make_inputs

    p = Problem("test", "g", 37, 70, 50, "fp16")
    inputs = make_inputs(p, 3, DEV)
    out = torch.empty((37, 70), dtype=torch.float16, device=DEV)
    poison(out)
    cfg = DenseConfig.tile(bm, bn, bk, 4, 1, GROUP_M=group_m)
    ret = dp_gemm(inputs.a, inputs.b, out, None, None, cfg, schedule)
    assert ret is out
    result = compare(p, out, reference(p, inputs))
    assert result.ok, f"{cfg} {schedule}: {result.detail}"


def test_dp_gemm_rejects_mismatched_shapes():
    from gemmbench.kernels.dense_dp import DenseConfig, dp_gemm

    a = torch.ones((4, 32), dtype=torch.float16)
    b = torch.ones((16, 48), dtype=torch.float16)
    out = torch.empty((4, 16), dtype=torch.float16)
    cfg = DenseConfig.tile(16, 16, 16, 4, 1, GROUP_M=1)
    with pytest.raises(AssertionError):
        dp_gemm(a, b, out, None, None, cfg, "row")


# ---------------------------------------------------------------- tile schedules


@triton.jit
def count_tiles(counts_ptr, outside_ptr, grid_m, grid_n, SCHEDULE: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    if SCHEDULE == "broken":  # the seed's MoE "column-major" mapping: not a bijection (docs/GPU-FACTS.md §5)
        pid_m = pid % grid_n
        pid_n = pid // grid_m
    else:
        pid_m, pid_n = tile_of(pid, grid_m, grid_n, SCHEDULE, GROUP_M)
    inside = (pid_m >= 0) & (pid_m < grid_m) & (pid_n >= 0) & (pid_n < grid_n)
    safe = tl.where(inside, pid_m * grid_n + pid_n, 0)
    tl.atomic_add(counts_ptr + safe, tl.where(inside, 1, 0))
    tl.atomic_add(outside_ptr, tl.where(inside, 0, 1))


@triton.jit
def tile_order(out_ptr, grid_m, grid_n, SCHEDULE: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = tile_of(pid, grid_m, grid_n, SCHEDULE, GROUP_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


def tile_counts(schedule: str, grid_m: int, grid_n: int, group_m: int) -> tuple[torch.Tensor, int]:
    """Run one program per tile; how often each (pid_m, pid_n) was produced, and how many fell outside."""
    counts = torch.zeros((grid_m, grid_n), dtype=torch.int32, device=DEV)
    outside = torch.zeros((1,), dtype=torch.int32, device=DEV)
    count_tiles[(grid_m * grid_n,)](counts, outside, grid_m, grid_n, SCHEDULE=schedule, GROUP_M=group_m)
    return counts.cpu(), int(outside.item())


GRIDS = [  # (grid_m, grid_n, GROUP_M)
    (1, 1, 1),
    (1, 7, 4),
    (7, 1, 4),
    (4, 4, 2),
    (5, 3, 2),
    (7, 5, 3),
    (8, 3, 8),
    (3, 6, 8),
    (6, 4, 4),
    (9, 2, 1),
]


@pytest.mark.parametrize("schedule", ["row", "col", "grouped"])
@pytest.mark.parametrize("grid_m,grid_n,group_m", GRIDS)
def test_every_schedule_covers_each_tile_exactly_once(schedule, grid_m, grid_n, group_m):
    counts, outside = tile_counts(schedule, grid_m, grid_n, group_m)
    assert outside == 0
    assert torch.equal(counts, torch.ones((grid_m, grid_n), dtype=torch.int32)), counts


def test_schedules_list_is_what_is_tested():
    from gemmbench.kernels.schedules import SCHEDULES

    assert SCHEDULES == ("row", "col", "grouped")


def test_schedule_orders_differ_where_they_should():
    """row walks N first, col walks M first, grouped sweeps GROUP_M rows column by column."""

    def order(schedule, gm, gn, group_m):
        out = torch.full((gm * gn, 2), -1, dtype=torch.int32, device=DEV)
        tile_order[(gm * gn,)](out, gm, gn, SCHEDULE=schedule, GROUP_M=group_m)
        return [tuple(r) for r in out.cpu().tolist()]

    assert order("row", 2, 3, 1) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert order("col", 2, 3, 1) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    # 3 x 2 tiles, GROUP_M=2: rows 0-1 column by column, then the short last group (row 2)
    assert order("grouped", 3, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


def test_tile_count_check_catches_a_broken_mapping():
    """The seed's mapping (pid_m = pid % grid_n, pid_n = pid // grid_m) double-counts some tiles and skips others
    (docs/GPU-FACTS.md §5; the schedules it was meant for: docs/SEEDS.md, MoE §4)."""
    counts, outside = tile_counts("broken", 3, 2, 1)
    # pids 0..5 -> (0,0) (1,0) (0,0) (1,1) (0,1) (1,1): rows 0-1 get doubles, row 2 is never computed
    assert counts.tolist() == [[2, 1], [1, 2], [0, 0]]
    assert outside == 0
    assert not torch.equal(counts, torch.ones_like(counts))
    counts, outside = tile_counts("broken", 2, 3, 1)  # grid_m < grid_n: some pids land outside the grid
    assert counts.tolist() == [[1, 1, 0], [1, 0, 1]]
    assert outside == 2
    # square grids hide the bug: the mapping degenerates to "col"
    counts, outside = tile_counts("broken", 3, 3, 1)
    assert torch.equal(counts, torch.ones_like(counts)) and outside == 0


# ---------------------------------------------------------------- cuBLAS baselines (torch on the CPU)


@pytest.mark.parametrize("M,N,K", [(1, 64, 64), (33, 80, 50), (7, 16, 160), (128, 128, 128)])
@pytest.mark.parametrize("name,dtype", [("cublas_fp16", "fp16"), ("cublas_bf16", "bf16")])
def test_cublas_16bit_matches_reference(name, dtype, M, N, K):
    from gemmbench import registry

    p = Problem("test", "g", M, N, K, dtype)
    assert registry.get(name).unsupported_reason(p, _device()) is None
    result, launch, _ = _check(name, p)
    assert result.ok, f"{name} {M}x{N}x{K}: {result.detail}"
    assert launch.out.dtype == (torch.float16 if dtype == "fp16" else torch.bfloat16)


@pytest.mark.parametrize("M,N,K", [(1, 64, 32), (33, 80, 48), (7, 16, 160), (128, 128, 128)])
@pytest.mark.parametrize("name,scaling", [("cublas_fp8", "tensor"), ("cublas_fp8_rowwise", "row")])
def test_cublas_fp8_matches_reference_or_says_why_not(name, scaling, M, N, K):
    from gemmbench import registry

    v = registry.get(name)
    assert v.scalings == (scaling,)
    p = Problem("test", "g", M, N, K, "fp8", scaling=scaling)
    reason = v.unsupported_reason(p, _device())
    if reason is not None:
        assert isinstance(reason, str) and reason.strip(), repr(reason)
        assert "\n" not in reason
        return
    result, launch, inputs = _check(name, p)
    assert inputs.scaling == scaling
    assert result.ok, f"{name} {M}x{N}x{K}: {result.detail}"
    assert launch.fn().dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["cublas_fp8", "cublas_fp8_rowwise"])
def test_cublas_fp8_refuses_dims_not_divisible_by_16(name):
    from gemmbench import registry

    v = registry.get(name)
    reason = v.unsupported_reason(Problem("t", "g", 16, 70, 64, "fp8", scaling=v.scalings[0]), _device())
    assert reason is not None and "16" in reason and "N=70" in reason


def test_cublas_variants_refuse_moe():
    from gemmbench import registry

    reason = registry.get("cublas_fp16").unsupported_reason(
        Problem("t", "g", 4, 32, 32, "fp16", E=4, topk=2), _device()
    )
    assert reason is not None and "MoE" in reason


# ---------------------------------------------------------------- torch_moe_loop


def _moe(M, N, K, E, topk, dtype):
    return Problem("test", "experts", M, N, K, dtype, E=E, topk=topk)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_moe_loop_with_experts_that_get_no_tokens(dtype):
    p = _moe(1, 48, 40, 4, 2, dtype)  # one token, two slots: at least two of the four experts idle
    from gemmbench.measure.inputs import make_inputs

    inputs = make_inputs(p, 5, DEV)
    assert inputs.experts_hit() == 2
    result, launch, _ = _check("torch_moe_loop", p, inputs=inputs)
    assert result.ok, result.detail
    assert launch.out.shape == (2, 48) and launch.graph_safe is False


@pytest.mark.parametrize("topk,expert", [(1, 2), (1, 0), (1, 3)])
def test_moe_loop_all_tokens_to_one_expert(topk, expert):
    from gemmbench.measure.inputs import make_inputs

    p = _moe(7, 48, 40, 4, topk, "fp16")
    inputs = make_inputs(p, 6, DEV)
    inputs.topk_ids = torch.full((7, topk), expert, dtype=torch.int32, device=DEV)
    assert inputs.experts_hit() == 1
    result, _, _ = _check("torch_moe_loop", p, inputs=inputs)
    assert result.ok, result.detail


def test_moe_loop_two_slots_on_the_same_two_experts_for_every_token():
    from gemmbench.measure.inputs import make_inputs

    p = _moe(7, 48, 40, 4, 2, "fp16")
    inputs = make_inputs(p, 7, DEV)
    inputs.topk_ids = torch.tensor([[3, 1]] * 7, dtype=torch.int32, device=DEV)  # experts 0 and 2 idle
    result, launch, _ = _check("torch_moe_loop", p, inputs=inputs)
    assert result.ok, result.detail
    # slot order is kept: row 2t is token t through expert 3, row 2t+1 through expert 1
    a, w = inputs.a.float(), inputs.b.float()
    torch.testing.assert_close(launch.out[0].float(), a[0] @ w[3].t(), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(launch.out[1].float(), a[0] @ w[1].t(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("M,E,topk", [(7, 3, 2), (7, 3, 3), (7, 5, 1), (13, 6, 2), (1, 3, 1)])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_moe_loop_odd_expert_and_token_counts(M, E, topk, dtype):
    p = _moe(M, 40, 24, E, topk, dtype)
    result, launch, inputs = _check("torch_moe_loop", p)
    assert result.ok, f"M={M} E={E} topk={topk} {dtype}: {result.detail}"
    assert launch.out.shape == (M * topk, 40)
    assert inputs.experts_hit() <= E


def test_moe_loop_refuses_dense_and_fp8():
    from gemmbench import registry

    v = registry.get("torch_moe_loop")
    dense = v.unsupported_reason(Problem("t", "g", 4, 32, 32, "fp16"), _device())
    fp8 = v.unsupported_reason(_moe(4, 32, 32, 4, 2, "fp8"), _device())
    assert dense is not None and "dense" in dense
    assert fp8 is not None and "fp8" in fp8
