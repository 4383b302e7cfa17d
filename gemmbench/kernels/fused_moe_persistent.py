"""Persistent fused MoE Triton GEMM: fused_moe.py's K loop, one program per SM walking the tiles.

The data-parallel fused kernel launches one program per (block of rows, N tile), and each pays its pipeline's fill
and its epilogue alone; on prefill, where every expert's GEMM is short along K (Qwen3-30B-A3B's w13: 16 steps of 128
over K 2048), that is a large share of each tile.  Here a program keeps its SM and walks tiles in the grouped order
with the tile loop flattened into the K loop (`tl.range(..., flatten=True)`, as persistent.py): the next tile's
first loads are issued while this tile's epilogue runs.  The tile count comes from the alignment's padded row count
on the device, so no program visits a block without rows.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import triton
import triton.language as tl

from gemmbench.configs import tuning
from gemmbench.kernels.fused_moe import FusedMoe, MoeConfig, _finish, _k_step, register_moe, search_space
from gemmbench.kernels.schedules import tile_of
from gemmbench.kernels.tile_loop import weight_scale_ptrs
from gemmbench.registry import Launch


@triton.jit
def fused_moe_persistent_kernel(
    a_ptr,  # (M, K) activations
    b_ptr,  # (E, N, K) expert weights
    c_ptr,  # (M * topk, N)
    a_scale_ptr,
    b_scale_ptr,  # fp8: (1,) and (E,) fp32; read only when HAS_SCALE
    a_bscale_ptr,  # (M, ceil(K/128)) fp32, read only when SCALE_BLOCK
    b_bscale_ptr,  # (E, ceil(N/128), ceil(K/128)) fp32, read only when SCALE_BLOCK
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsn,
    stride_bsk,
    weight_ptr,  # (M * topk,) fp32 router weights; read only when MUL_WEIGHT
    sorted_ids_ptr,
    block_expert_ptr,
    num_padded_ptr,  # from moe_align
    N,
    K,
    num_slots,
    topk,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    NUM_PROGRAMS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    EVEN_K: tl.constexpr,  # K a multiple of BLOCK_K (the launch's shared arguments; MASK_K is its negation)
    MASK_K: tl.constexpr,  # not EVEN_K: every K block masked (the flattened loop has one body)
    PRECISE_ACC: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,  # 128: fp8 block scales, applied per K step (tile_loop.py); 0: none in the loop
):
    grid_m = tl.cdiv(tl.load(num_padded_ptr), BLOCK_M)  # the blocks that hold rows
    grid_n = tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)
    # The epilogue takes its tile from a counter of its own (persistent.py): the K loop need not keep the prologue's
    # slots and masks alive.
    tile_out = tl.program_id(0) - NUM_PROGRAMS
    for tile in tl.range(tl.program_id(0), grid_m * grid_n, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = tile_of(tile, grid_m, grid_n, "grouped", GROUP_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        valid = slots < num_slots
        tokens = tl.where(valid, slots // topk, 0)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        rows_b = tl.where(n_ok, offs_n, 0)
        a_ptrs = a_ptr + tokens[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + expert * stride_be + rows_b[None, :] * stride_bn + offs_k[:, None] * stride_bk
        if SCALE_BLOCK:  # the gathered tokens' group scales, this expert's block rows (tile_loop.py)
            a_s_ptrs = a_bscale_ptr + tokens * stride_asm
            b_s_ptrs = weight_scale_ptrs(
                b_bscale_ptr + expert * stride_bse, rows_b, pid_n, stride_bsn, BLOCK_N, SCALE_BLOCK
            )
        else:  # not read
            a_s_ptrs = a_bscale_ptr
            b_s_ptrs = b_bscale_ptr
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(0, k_blocks):
            step = tl.cast(kb, tl.int64) * BLOCK_K  # 64-bit, as fused_moe.py's loop
            acc = _k_step(acc, a_ptrs + step * stride_ak, b_ptrs + step * stride_bk, valid, n_ok, K, kb, a_s_ptrs,
                          b_s_ptrs, stride_ask, stride_bsk, BLOCK_N, BLOCK_K, MASK_K, PRECISE_ACC, SCALE_BLOCK)  # fmt: skip
        tile_out += NUM_PROGRAMS
        pid_m, pid_n = tile_of(tile_out, grid_m, grid_n, "grouped", GROUP_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        valid = slots < num_slots
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = valid[:, None] & (offs_n < N)[None, :]
        c_ptrs = c_ptr + slots[:, None] * stride_cm + offs_n[None, :] * stride_cn
        _finish(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, expert, weight_ptr, slots, valid, HAS_SCALE, MUL_WEIGHT)


class PersistentFusedMoe(FusedMoe):
    """FusedMoe's alignment and output, launched as one program per SM (at most one per tile)."""

    def __init__(self, inputs, E: int, topk: int, config: MoeConfig, mul_weight: bool, fp8_accum: str):
        super().__init__(inputs, E, topk, config, "grouped", mul_weight, fp8_accum)
        self.programs = tuning.persistent_programs(self.grid[0], inputs.a.is_cuda and not tuning.interpreter_on())

    def __call__(self) -> torch.Tensor:
        args = self.operands()
        fused_moe_persistent_kernel[(self.programs,)](**args, NUM_PROGRAMS=self.programs, MASK_K=not args["EVEN_K"])
        return self.out


def _build(problem, inputs, config: MoeConfig) -> Launch:
    gemm = PersistentFusedMoe(inputs, problem.local_experts, problem.topk, config, False, problem.fp8_accum)
    return Launch(fn=gemm, params=replace(config, schedule="grouped"), out=gemm.out)


register_moe(
    "triton_moe_persistent",
    "Fused MoE Triton GEMM, persistent: one program per SM walks the tiles in grouped order, the next tile's loads "
    "overlapping this tile's epilogue",
    search_space,
    _build,
)
