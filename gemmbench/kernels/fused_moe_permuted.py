"""Permuted MoE Triton GEMM: the routed rows of A gathered once into expert order, then both operands through TMA.

The fused kernels (fused_moe.py) gather each tile's rows of A with pointer loads, K step by K step, and on prefill
their warps wait on those loads (docs/BENCHMARKS.md, "Fused MoE against vLLM's kernel and its roofline").  Here one copy kernel writes A's rows in the alignment's padded order (row i of
the copy is token sorted_ids[i] // topk; padding rows are zero), and a persistent GEMM reads the copy and the
weights, viewed as (E * N, K), through tensor descriptors: every tile of rows is contiguous and of one expert.  The
epilogue scatters each row to its slot, as the fused kernels do.  Both launches are in the timed call: the copy is
part of the cost (the engines' permute-then-grouped-GEMM pipelines pay it too).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import triton
import triton.language as tl

from gemmbench.kernels.fused_moe import MoeConfig, _finish, register_moe, search_space
from gemmbench.kernels.fused_moe_persistent import PersistentFusedMoe
from gemmbench.kernels.persistent import unsupported
from gemmbench.kernels.schedules import tile_of
from gemmbench.kernels.tile_loop import add_scaled, weight_scale_ptrs
from gemmbench.registry import Launch

GATHER_ROWS = 16  # rows of A one program of the copy writes
GATHER_K = 256  # the copy's K columns a step


@triton.jit
def gather_rows_kernel(
    a_ptr, out_ptr, sorted_ids_ptr, num_padded_ptr, num_slots, topk, K, stride_am, stride_om,
    ROWS: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """out[i] = a[sorted_ids[i] // topk] for the padded rows i < num_padded; zeros for the padding slots."""
    start = tl.program_id(0) * ROWS
    if start >= tl.load(num_padded_ptr):
        return
    rows = start + tl.arange(0, ROWS)
    slots = tl.load(sorted_ids_ptr + rows)
    valid = slots < num_slots
    tokens = tl.where(valid, slots // topk, 0).to(tl.int64)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = (ks < K)[None, :]
        x = tl.load(a_ptr + tokens[:, None] * stride_am + ks[None, :], mask=valid[:, None] & k_ok, other=0.0)
        tl.store(out_ptr + rows.to(tl.int64)[:, None] * stride_om + ks[None, :], x, mask=k_ok)


@triton.jit
def permuted_moe_kernel(
    a_desc,  # the gathered A (max_padded, K), [BLOCK_M, BLOCK_K] blocks
    b_desc,  # the weights as (E * N, K), [BLOCK_N, BLOCK_K] blocks: rows past an expert's N are the next expert's
    a_ptr,  # from here on FusedMoe.operands(), by name; a_ptr, b_ptr and the A and B strides are not read here
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    a_bscale_ptr,
    b_bscale_ptr,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsn,
    stride_bsk,
    weight_ptr,
    sorted_ids_ptr,
    block_expert_ptr,
    num_padded_ptr,
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
    EVEN_K: tl.constexpr,  # not needed: the copy engine fills what lies past K with zeros
    PRECISE_ACC: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,  # 128: fp8 block scales, applied per K step (tile_loop.py); 0: none in the loop
):
    grid_m = tl.cdiv(tl.load(num_padded_ptr), BLOCK_M)  # the blocks that hold rows
    grid_n = tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    tile_out = tl.program_id(0) - NUM_PROGRAMS  # the epilogue's own counter (persistent.py)
    for tile in tl.range(tl.program_id(0), grid_m * grid_n, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = tile_of(tile, grid_m, grid_n, "grouped", GROUP_M)
        expert = tl.load(block_expert_ptr + pid_m)
        row_b = expert * N + pid_n * BLOCK_N
        if SCALE_BLOCK:  # the gathered tokens' group scales, this expert's block rows (tile_loop.py)
            slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
            tokens = tl.where(slots < num_slots, slots // topk, 0)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            rows_b = tl.where(offs_n < N, offs_n, 0)
            a_s_ptrs = a_bscale_ptr + tokens * stride_asm
            b_s_ptrs = weight_scale_ptrs(
                b_bscale_ptr + expert.to(tl.int64) * stride_bse, rows_b, pid_n, stride_bsn, BLOCK_N, SCALE_BLOCK
            )
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(0, k_blocks):
            a = a_desc.load([pid_m * BLOCK_M, kb * BLOCK_K])
            b = b_desc.load([row_b, kb * BLOCK_K])
            if SCALE_BLOCK:
                acc = add_scaled(acc, tl.dot(a, b.T, max_num_imprecise_acc=PRECISE_ACC), a_s_ptrs, b_s_ptrs,
                                 (kb * BLOCK_K) // SCALE_BLOCK, stride_ask, stride_bsk, BLOCK_N, SCALE_BLOCK)  # fmt: skip
            else:
                acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=PRECISE_ACC)
        tile_out += NUM_PROGRAMS
        pid_m, pid_n = tile_of(tile_out, grid_m, grid_n, "grouped", GROUP_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        valid = slots < num_slots
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = valid[:, None] & (offs_n < N)[None, :]
        c_ptrs = c_ptr + slots[:, None] * stride_cm + offs_n[None, :] * stride_cn
        _finish(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, expert, weight_ptr, slots, valid, HAS_SCALE, MUL_WEIGHT)


class PermutedMoe(PersistentFusedMoe):
    """The persistent form's alignment, output and program count, the gathered copy of A, and the descriptors over
    it and the weights."""

    def __init__(self, inputs, E: int, topk: int, config: MoeConfig, fp8_accum: str):
        from triton.tools.tensor_descriptor import TensorDescriptor

        super().__init__(inputs, E, topk, config, False, fp8_accum)
        a, b = inputs.a, inputs.b
        rows = self.align.sorted_ids.numel()
        self.a_perm = torch.zeros((rows, a.shape[1]), dtype=a.dtype, device=a.device)
        self.a_desc = TensorDescriptor.from_tensor(self.a_perm, [config.BLOCK_M, config.BLOCK_K])
        self.b_desc = TensorDescriptor.from_tensor(b.reshape(-1, b.shape[2]), [config.BLOCK_N, config.BLOCK_K])
        self.gather_grid = (triton.cdiv(rows, GATHER_ROWS),)

    def __call__(self) -> torch.Tensor:
        a = self.a
        gather_rows_kernel[self.gather_grid](
            a, self.a_perm, self.align.sorted_ids, self.align.num_padded, self.out.shape[0], self.topk, a.shape[1],
            a.stride(0), self.a_perm.stride(0), ROWS=GATHER_ROWS, BLOCK_K=GATHER_K, num_warps=4,
        )  # fmt: skip
        permuted_moe_kernel[(self.programs,)](self.a_desc, self.b_desc, **self.operands(), NUM_PROGRAMS=self.programs)
        return self.out


def _build(problem, inputs, config: MoeConfig) -> Launch:
    gemm = PermutedMoe(inputs, problem.local_experts, problem.topk, config, problem.fp8_accum)
    return Launch(fn=gemm, params=replace(config, schedule="grouped"), out=gemm.out)


register_moe(
    "triton_moe_permuted",
    "MoE Triton GEMM, permuted: A's routed rows copied once into expert order, then a persistent GEMM reads the copy "
    "and the weights through tensor descriptors (TMA) and scatters rows to their slots (both launches timed)",
    search_space,
    _build,
    supports=unsupported,
)
