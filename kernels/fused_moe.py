"""Fused MoE Triton GEMM (in the style of vLLM's fused_moe): every (token, expert) pair of a layer in
one launch.  out (M * topk, N): row t * topk + k = a[t] @ w[topk_ids[t, k]]^T, optionally times the
router weight topk_weights[t, k] (the w2 GEMM of a MoE layer applies it before the top-k sum).

The rows come sorted by expert and padded per expert to BLOCK_M (kernels/moe_align.py): program
(pid_m, pid_n) takes block pid_m of the sorted slot ids, all of one expert, gathers those tokens' rows
of `a`, multiplies them with that expert's (N, K) weight tile and scatters the result to the slots'
rows.  Padding slots (the sentinel M * topk) are masked on load and store; blocks past the padded
count return at once.  The tile order over (blocks, N tiles) is a compile-time parameter
(kernels/schedules.py): `triton_moe_row`, `triton_moe_col`, `triton_moe_grouped`.

fp16 and bf16 write their own dtype; fp8 e4m3 takes a per-tensor activation scale and one weight scale
per expert (read from device memory) and writes bf16.  The alignment runs once in make(), outside the
timed launch (one alignment serves all the GEMMs of a layer); its own cost is the `moe_align` row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gemmbench import tuning
from gemmbench.kernels.moe_align import block_m_for, moe_align
from gemmbench.kernels.schedules import SCHEDULES, tile_of
from gemmbench.kernels.tile_loop import fp8_promote_every
from gemmbench.registry import Launch, Variant, register


@triton.jit
def fused_moe_kernel(
    a_ptr,  # (M, K) activations
    b_ptr,  # (E, N, K) expert weights
    c_ptr,  # (M * topk, N)
    a_scale_ptr, b_scale_ptr,  # fp8: (1,) and (E,) fp32; read only when HAS_SCALE
    weight_ptr,  # (M * topk,) fp32 router weights; read only when MUL_WEIGHT
    sorted_ids_ptr, block_expert_ptr, num_padded_ptr,  # from moe_align
    N, K, num_slots, topk, grid_m,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SCHEDULE: tl.constexpr, HAS_SCALE: tl.constexpr, MUL_WEIGHT: tl.constexpr, EVEN_K: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
):
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_of(tl.program_id(0), grid_m, grid_n, SCHEDULE, GROUP_M)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        return  # a block past the padded count: no rows
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = slots < num_slots
    tokens = tl.where(valid, slots // topk, 0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    rows_b = tl.where(n_ok, offs_n, 0)
    offs_k = tl.arange(0, BLOCK_K)
    # The K loop of tile_loop.py, but A's rows are gathered through the sorted slot ids.
    a_ptrs = a_ptr + tokens[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + rows_b[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_left = K - kb * BLOCK_K
            a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=n_ok[None, :] & (offs_k[:, None] < k_left), other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=PRECISE_ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if HAS_SCALE:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr + expert))
    if MUL_WEIGHT:
        acc = acc * tl.load(weight_ptr + slots, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + slots[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & n_ok[None, :])


class FusedMoe:
    """One problem's alignment and output, and the closure that launches the kernel once."""

    def __init__(self, inputs, E: int, topk: int, config: dict, schedule: str, mul_weight: bool):
        a, b = inputs.a, inputs.b
        M, K = a.shape
        self.N = b.shape[1]
        self.a, self.b, self.inputs, self.topk = a, b, inputs, topk
        self.config, self.schedule, self.mul_weight = config, schedule, mul_weight
        self.align = moe_align(inputs.topk_ids, E, config["BLOCK_M"])
        self.weights = inputs.topk_weights.reshape(-1).float().contiguous()
        self.out = torch.empty((M * topk, self.N), dtype=inputs.out_dtype, device=a.device)
        self.grid_m = self.align.block_expert.numel()
        self.grid = (self.grid_m * triton.cdiv(self.N, config["BLOCK_N"]),)

    def __call__(self) -> torch.Tensor:
        a, b, out, cfg, inp = self.a, self.b, self.out, self.config, self.inputs
        has_scale = inp.a_scale is not None
        fused_moe_kernel[self.grid](
            a, b, out,
            inp.a_scale if has_scale else a, inp.b_scale if has_scale else b, self.weights,
            self.align.sorted_ids, self.align.block_expert, self.align.num_padded,
            self.N, a.shape[1], out.shape[0], self.topk, self.grid_m,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), out.stride(0), out.stride(1),
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg.get("GROUP_M", 8),
            SCHEDULE=self.schedule, HAS_SCALE=has_scale, MUL_WEIGHT=self.mul_weight,
            EVEN_K=(a.shape[1] % cfg["BLOCK_K"] == 0), PRECISE_ACC=fp8_promote_every(a, cfg),
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
        return out


def _cfg(bm, bn, bk, warps, stages, group_m=8):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, num_warps=warps, num_stages=stages)


def search_space(problem, on_gpu: bool, full: bool = True) -> list[dict]:
    """Candidates: BLOCK_M around the rows per expert (moe_align.block_m_for), wide K tiles for the
    weight-streaming small-token case."""
    if not on_gpu:
        return [_cfg(16, 32, 32, 4, 1, group_m=2)]  # Triton's CPU interpreter: one small tile
    bm0 = block_m_for(problem.M, problem.topk, problem.E)
    fp8 = problem.dtype == "fp8"
    if problem.M * problem.topk <= 64 * problem.E:  # decode: stream the experts' weights
        quick = [_cfg(bm0, 64, 256 if fp8 else 128, 4, 4), _cfg(bm0, 128, 128, 4, 4)]
        more = [_cfg(bm, bn, bk, 4, st) for bm in sorted({16, bm0}) for bn in (32, 64, 128)
                for bk in ((128, 256) if fp8 else (64, 128)) for st in (3, 4, 5)]
    else:
        quick = [_cfg(64, 128, 64, 4, 4), _cfg(128, 128, 64, 8, 3)]
        more = [_cfg(bm, bn, bk, 4 if bm * bn <= 64 * 128 else 8, st) for bm in (64, 128) for bn in (64, 128, 256)
                for bk in ((64, 128) if fp8 else (64,)) for st in (3, 4)]
    return quick + [c for c in more if c not in quick] if full else quick


def _build(schedule: str, mul_weight: bool = False):
    def build(problem, inputs, config: dict) -> Launch:
        gemm = FusedMoe(inputs, problem.E, problem.topk, config, schedule, mul_weight)
        return Launch(fn=gemm, config=dict(config, schedule=schedule), out=gemm.out)

    return build


_ORDER = {
    "row": "row-major tile order (consecutive programs walk N within one block of rows)",
    "col": "column-major tile order (consecutive programs walk the blocks of rows under one N tile: "
           "the seed's ordering, B tile shared)",
    "grouped": "grouped tile order (GROUP_M blocks of rows swept together)",
}

for _schedule, _text in _ORDER.items():
    _tunable = tuning.Tunable(f"triton_moe_{_schedule}", search_space, _build(_schedule))
    register(Variant(
        name=f"triton_moe_{_schedule}", family="triton_moe", dtypes=("fp16", "bf16", "fp8"),
        description=f"Fused MoE Triton GEMM, {_text}; rows gathered through slots sorted by expert "
                    "(alignment not timed: see moe_align); fp8: per-expert weight scales, bf16 out",
        make=_tunable.make, supports=tuning.needs_triton_device, moe=True, tunable=_tunable,
    ))

assert set(_ORDER) == set(SCHEDULES)
