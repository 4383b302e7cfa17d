"""Fused MoE Triton GEMM (in the style of vLLM's fused_moe): every (token, expert) pair of a layer in
one launch.  out (M * topk, N): row t * topk + k = a[t] @ w[topk_ids[t, k]]^T, optionally times the
router weight topk_weights[t, k] (the w2 GEMM of a MoE layer applies it before the top-k sum).

The rows come sorted by expert and padded per expert to BLOCK_M (gemmbench/kernels/moe_align.py): program
(pid_m, pid_n) takes block pid_m of the sorted slot ids, all of one expert, gathers those tokens' rows
of `a`, multiplies them with that expert's (N, K) weight tile and scatters the result to the slots'
rows.  Padding slots (the sentinel M * topk) are masked on load and store; blocks past the padded
count return at once.  The tile order over (blocks, N tiles) is a compile-time parameter
(gemmbench/kernels/schedules.py): `triton_moe_row`, `triton_moe_col`, `triton_moe_grouped`.

fp16 and bf16 write their own dtype; fp8 e4m3 takes a per-tensor activation scale and one weight scale
per expert (read from device memory) and writes bf16.  The alignment runs once in make(), outside the
timed launch (one alignment serves all the GEMMs of a layer); its own cost is the `moe_align` row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import torch
import triton
import triton.language as tl

from gemmbench.configs import tuning
from gemmbench.dtypes import REFERENCE_FP8_ACCUM
from gemmbench.kernels.moe_align import block_m_for, moe_align
from gemmbench.kernels.schedules import SCHEDULES, tile_of
from gemmbench.kernels.splitk import reduce_splits, split_candidates, split_range
from gemmbench.kernels.tile_loop import (
    TRITON_FP8_ACCUMS,
    TRITON_SCALINGS,
    BlockScales,
    add_scaled,
    block_scaled,
    fit_block_k,
    fp8_promote_every,
    weight_scale_ptrs,
)
from gemmbench.registry import Launch, Variant, register


@triton.jit(do_not_specialize=["SPLIT_K"])
def fused_moe_kernel(
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
    buf_ptr,  # (M * topk, N) fp32 partial sums, zero between calls; touched only when SPLIT
    count_ptr,  # (grid_m * grid_n,) int32 splits finished per tile, zero between calls; only when SPLIT
    N,
    K,
    num_slots,
    topk,
    grid_m,
    SPLIT_K,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SCHEDULE: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    EVEN_K: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
    SPLIT: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,  # 128: fp8 block scales, applied per K step (tile_loop.py); 0: none in the loop
):
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_of(tl.program_id(0), grid_m, grid_n, SCHEDULE, GROUP_M)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        return  # a block past the padded count: no rows (every split of it returns here: no counter)
    kb_start, kb_end = split_range(K, BLOCK_K, SPLIT_K, tl.program_id(1))
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    slots = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = slots < num_slots
    tokens = tl.where(valid, slots // topk, 0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    rows_b = tl.where(n_ok, offs_n, 0)
    offs_k = tl.arange(0, BLOCK_K)
    # this split's first K block folded into the base pointers, and each K step addressed from them (base +
    # i * BLOCK_K * stride) rather than by bumping pointer tensors: a shorter K loop that keeps the tensor pipe fed
    # (docs/BENCHMARKS.md, "Fused MoE against vLLM's kernel")
    a_ptr += kb_start * BLOCK_K * stride_ak
    b_ptr += kb_start * BLOCK_K * stride_bk
    # The K loop of tile_loop.py, but A's rows are gathered through the sorted slot ids.
    a_ptrs = a_ptr + tokens[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + rows_b[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SCALE_BLOCK:  # the gathered tokens' group scales, this expert's block rows (tile_loop.py)
        a_s_ptrs = a_bscale_ptr + tokens * stride_asm
        b_s_ptrs = weight_scale_ptrs(
            b_bscale_ptr + expert * stride_bse, rows_b, pid_n, stride_bsn, BLOCK_N, SCALE_BLOCK
        )
    else:  # not read
        a_s_ptrs = a_bscale_ptr
        b_s_ptrs = b_bscale_ptr
    # Full K blocks load unmasked along K; only the tail block (K not a multiple of BLOCK_K) is masked.  Masking every
    # block cost an order of magnitude on fp8 (GPT-OSS-120B's K 2880 with BLOCK_K 128; docs/BENCHMARKS.md keeps the
    # figures): a K mask the compiler cannot prove whole splits the vector loads.
    full_end = kb_end if EVEN_K else tl.minimum(kb_end, K // BLOCK_K)
    for i in range(0, full_end - kb_start):
        kb = kb_start + i
        step = tl.cast(i, tl.int64) * BLOCK_K  # 64-bit: IADD3 pairs per address, where 32-bit gives IMAD.WIDE
        acc = _k_step(acc, a_ptrs + step * stride_ak, b_ptrs + step * stride_bk, valid, n_ok, K, kb, a_s_ptrs,
                      b_s_ptrs, stride_ask, stride_bsk, BLOCK_N, BLOCK_K, False, PRECISE_ACC, SCALE_BLOCK)  # fmt: skip
    a_ptrs += (full_end - kb_start) * BLOCK_K * stride_ak
    b_ptrs += (full_end - kb_start) * BLOCK_K * stride_bk
    if not EVEN_K:
        for kb in range(tl.maximum(kb_start, full_end), kb_end):  # the tail block, if this split holds it
            acc = _k_step(acc, a_ptrs, b_ptrs, valid, n_ok, K, kb, a_s_ptrs, b_s_ptrs, stride_ask, stride_bsk,
                          BLOCK_N, BLOCK_K, True, PRECISE_ACC, SCALE_BLOCK)  # fmt: skip
    mask = valid[:, None] & n_ok[None, :]
    c_ptrs = c_ptr + slots[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if not SPLIT:
        _finish(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, expert, weight_ptr, slots, valid, HAS_SCALE, MUL_WEIGHT)
    else:
        # the slot ids are unique, so the (slot, n) rows of the buffer are this tile's alone
        mn = slots[:, None] * N + offs_n[None, :]
        last, total = reduce_splits(acc, buf_ptr, count_ptr, pid_m * grid_n + pid_n, mn, mask, 0, 0, SPLIT_K, "atomic")
        if last:
            _finish(
                total, c_ptrs, mask, a_scale_ptr, b_scale_ptr, expert, weight_ptr, slots, valid, HAS_SCALE, MUL_WEIGHT
            )


@triton.jit
def _k_step(
    acc,
    a_ptrs,
    b_ptrs,
    valid,
    n_ok,
    K,
    kb,
    a_s_ptrs,
    b_s_ptrs,
    stride_ask,
    stride_bsk,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    MASK_K: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,
):
    """One K block of the fused kernel: the gathered rows of A and the expert's B tile, K-masked only for the tail
    block (MASK_K), multiplied into the fp32 accumulator (block scales: the block's dot scaled, then added)."""
    if MASK_K:
        k_left = K - kb * BLOCK_K - tl.arange(0, BLOCK_K)  # > 0 inside K
        a = tl.load(a_ptrs, mask=valid[:, None] & (k_left[None, :] > 0), other=0.0)
        b = tl.load(b_ptrs, mask=n_ok[None, :] & (k_left[:, None] > 0), other=0.0)
    else:
        a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
        b = tl.load(b_ptrs)  # no mask: B's rows past N were clamped to row 0 (rows_b), and C's store is masked
    if SCALE_BLOCK:
        return add_scaled(acc, tl.dot(a, b, max_num_imprecise_acc=PRECISE_ACC), a_s_ptrs, b_s_ptrs,
                          (kb * BLOCK_K) // SCALE_BLOCK, stride_ask, stride_bsk, BLOCK_N, SCALE_BLOCK)  # fmt: skip
    return tl.dot(a, b, acc, max_num_imprecise_acc=PRECISE_ACC)


@triton.jit
def _finish(
    acc,
    c_ptrs,
    mask,
    a_scale_ptr,
    b_scale_ptr,
    expert,
    weight_ptr,
    slots,
    valid,
    HAS_SCALE: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
):
    """Scale (fp8: activation scale times the expert's weight scale), multiply by the router weight,
    store in the output dtype: once per tile, on the whole K sum."""
    if HAS_SCALE:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr + expert))
    if MUL_WEIGHT:
        acc = acc * tl.load(weight_ptr + slots, mask=valid, other=0.0)[:, None]
    tl.store(c_ptrs, acc.to(c_ptrs.dtype.element_ty), mask=mask)


@dataclass(frozen=True, kw_only=True)
class MoeConfig(tuning.KernelConfig):
    """A config of the fused MoE kernel, both forms; its fields are its JSON keys, in the order they are written."""

    BLOCK_M: int  # also the block of rows the alignment pads each expert to (moe_align)
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8  # blocks of rows the grouped schedule sweeps together
    num_warps: int
    num_stages: int
    # the SplitK form (triton_moe_splitk): programs per (block, N tile) along K, built: the split launched
    # (<= K blocks); None: the data-parallel variants, which have no such key
    SPLIT_K: Optional[int] = None
    # the tile order: the SplitK form searches it ("col"); the other variants set their own when they build
    schedule: Optional[str] = field(default=None, metadata={"choices": SCHEDULES})
    FP8_PROMOTE: Optional[int] = None  # fp8: K summed before fp32 promotion; None: tile_loop.FP8_PROMOTE


class FusedMoe:
    """One problem's alignment, output and (SplitK) buffers, and the closure that launches the kernel once."""

    def __init__(
        self, inputs, E: int, topk: int, config: MoeConfig, schedule: str, mul_weight: bool,
        fp8_accum: str = REFERENCE_FP8_ACCUM,
    ):  # fmt: skip
        a, b = inputs.a, inputs.b
        self.fp8_accum = fp8_accum
        M, K = a.shape
        self.N = b.shape[1]
        self.a, self.b, self.inputs, self.topk = a, b, inputs, topk
        self.config, self.schedule, self.mul_weight = config, schedule, mul_weight
        self.blocks = BlockScales(inputs)
        self.blocks.check(config.BLOCK_K)
        self.align = moe_align(inputs.topk_ids, E, config.BLOCK_M)
        self.weights = inputs.topk_weights.reshape(-1).float().contiguous()
        self.out = torch.empty((M * topk, self.N), dtype=inputs.out_dtype, device=a.device)
        # the blocks with rows come first, at most one per routed pair: with fewer pairs than blocks (decode) the grid
        # ends there instead of launching programs that find no rows (vLLM sizes its small-batch grid so)
        self.grid_m = min(self.align.block_expert.numel(), M * topk)
        tiles = self.grid_m * triton.cdiv(self.N, config.BLOCK_N)
        self.split_k = max(1, min(config.SPLIT_K or 1, triton.cdiv(K, config.BLOCK_K)))
        self.grid = (tiles, self.split_k)
        if self.split_k > 1:  # zeroed once here; the last split of each tile leaves them zero again
            self.buf = torch.zeros((M * topk, self.N), dtype=torch.float32, device=a.device)
            self.count = torch.zeros(tiles, dtype=torch.int32, device=a.device)
        else:
            self.buf = self.count = torch.empty(1, dtype=torch.int32, device=a.device)  # never touched

    def operands(self) -> dict:
        """The launch's arguments that the fused kernels share (fused_moe_persistent.py's too), by name."""
        a, b, out, cfg, inp, blocks = self.a, self.b, self.out, self.config, self.inputs, self.blocks
        has_scale = inp.a_scale is not None and not blocks.on  # block scales: applied in the K loop, not after
        stride_asm, stride_ask, stride_bsn, stride_bsk = blocks.strides
        return dict(
            a_ptr=a,
            b_ptr=b,
            c_ptr=out,
            a_scale_ptr=inp.a_scale if has_scale else a,
            b_scale_ptr=inp.b_scale if has_scale else b,
            a_bscale_ptr=blocks.a,
            b_bscale_ptr=blocks.b,
            stride_asm=stride_asm,
            stride_ask=stride_ask,
            stride_bse=inp.b_scale.stride(0) if blocks.on else 0,
            stride_bsn=stride_bsn,
            stride_bsk=stride_bsk,
            weight_ptr=self.weights,
            sorted_ids_ptr=self.align.sorted_ids,
            block_expert_ptr=self.align.block_expert,
            num_padded_ptr=self.align.num_padded,
            N=self.N,
            K=a.shape[1],
            num_slots=out.shape[0],
            topk=self.topk,
            stride_am=a.stride(0),
            stride_ak=a.stride(1),
            stride_be=b.stride(0),
            stride_bn=b.stride(1),
            stride_bk=b.stride(2),
            stride_cm=out.stride(0),
            stride_cn=out.stride(1),
            BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            GROUP_M=cfg.GROUP_M,
            HAS_SCALE=has_scale,
            MUL_WEIGHT=self.mul_weight,
            EVEN_K=(a.shape[1] % cfg.BLOCK_K == 0),
            PRECISE_ACC=fp8_promote_every(a, cfg, self.fp8_accum),
            SCALE_BLOCK=blocks.block,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )

    def __call__(self) -> torch.Tensor:
        fused_moe_kernel[self.grid](
            **self.operands(),
            buf_ptr=self.buf,
            count_ptr=self.count,
            grid_m=self.grid_m,
            SPLIT_K=self.split_k,
            SCHEDULE=self.schedule,
            SPLIT=self.split_k > 1,
        )
        return self.out


def search_space(problem, on_gpu: bool, full: bool = True) -> list[MoeConfig]:
    """Candidates: BLOCK_M around the rows per expert (moe_align.block_m_for), wide K tiles for the
    weight-streaming small-token case; block scales: BLOCK_K at most 128 (tile_loop.fit_block_k)."""
    return fit_block_k(_space(problem, on_gpu, full), block_scaled(problem))


def _space(problem, on_gpu: bool, full: bool) -> list[MoeConfig]:
    tile = MoeConfig.tile
    if not on_gpu:
        return [tile(16, 32, 32, 4, 1, GROUP_M=2)]  # Triton's CPU interpreter: one small tile
    bm0 = block_m_for(problem.M, problem.topk, problem.E)
    fp8 = problem.dtype == "fp8"
    rows = problem.M * problem.topk / problem.E  # per expert, on average
    # 32-row tiles too once 16-row ones are more than half full on average (8-16 rows an expert): routing is uneven,
    # and an expert over 16 rows would read its weights twice.  vLLM's H100 entry for Mixtral 8x7B at TP 2 and 64
    # tokens (16 rows an expert) is 32 x 128 x 128: it took 4.2% less time on w2 than this space's best without it, in
    # each of three processes (docs/BENCHMARKS.md).  From 17 rows bm0 is 32 already.
    larger = {32} if bm0 == 16 and rows > 8 else set()
    decode = [
        tile(bm, bn, bk, 4, st)
        for bm in sorted({16, bm0} | larger)
        for bn in (32, 64, 128)
        for bk in ((128, 256) if fp8 else (64, 128))
        for st in (3, 4, 5)
    ]
    prefill = [
        tile(bm, bn, bk, 4 if bm * bn <= 64 * 128 else 8, st)
        for bm in (64, 128)
        for bn in (64, 128, 256)
        for bk in ((64, 128) if fp8 else (64,))
        for st in (3, 4)
    ]
    # Hopper's large tiles with wide L2 groups: vLLM's H100 config for Mixtral 8x7B at 2048 tokens, 128 x 256 x 64,
    # GROUP_M 32, 8 warps, 4 stages, beat this space's best (GROUP_M 8; docs/BENCHMARKS.md, "Fused MoE against
    # vLLM's kernel"); its fp8
    # entries are the same tiles 128 deep, GROUP_M 16-64
    prefill += [tile(128, 256, 128 if fp8 else 64, 8, st, GROUP_M=g) for st in (3, 4) for g in (16, 32, 64)]
    # Between the two (32-128 rows an expert): 64-row tiles on 4 warps with K 128 and wide or no L2 groups.  vLLM's
    # H100 configs for Mixtral 8x7B at TP 2 use these at 128-512 tokens, and at 256 tokens (64 rows an expert) theirs
    # (64 x 128 x 128, GROUP_M 64; 64 x 256 x 64, GROUP_M 32 at 512) was 9% (w13) and 20% (w2) faster than the best of the decode space, which
    # had no 64-row tile there (H100, docs/BENCHMARKS.md)
    middle = [tile(64, 128, 128, 4, 4, GROUP_M=g) for g in (1, 64)] + [
        tile(64, 256, 64, 4, 4, GROUP_M=g) for g in (1, 32)
    ]
    if rows <= 64:  # decode: stream the experts' weights
        quick = [tile(bm0, 64, 256 if fp8 else 128, 4, 4), tile(bm0, 128, 128, 4, 4)]
        more = decode + (middle + prefill if rows >= 32 else [])
    else:
        quick = [tile(64, 128, 64, 4, 4), tile(128, 128, 64, 8, 3)]
        more = prefill + (middle if rows <= 128 else [])
    return quick + [c for c in more if c not in quick] if full else quick


def splitk_space(problem, on_gpu: bool, full: bool = True) -> list[MoeConfig]:
    """Candidates of the SplitK form: the K loop of each (block, N tile) split over SPLIT_K programs, for
    the few-tile case (few tokens over few experts, narrow N under tensor parallelism), with the SPLIT_K
    values splitk.py would try for a grid of about that many tiles; block scales: BLOCK_K at most 128."""
    return fit_block_k(_splitk_space(problem, on_gpu, full), block_scaled(problem))


def _splitk_space(problem, on_gpu: bool, full: bool) -> list[MoeConfig]:
    if not on_gpu:  # Triton's CPU interpreter: one small tile, split two ways (capped to the K blocks)
        return [MoeConfig.tile(16, 32, 32, 4, 1, GROUP_M=2, SPLIT_K=2, schedule="col")]
    sms = tuning.sm_count()
    fp8 = problem.dtype == "fp8"
    rows = max(1, problem.M * problem.topk // problem.ep)  # this rank's share of the pairs, uniform routing
    bm = block_m_for(problem.M, problem.topk, problem.E)
    experts = min(problem.local_experts, rows)  # at most this many experts get rows
    blocks = experts * triton.cdiv(triton.cdiv(rows, experts), bm)  # about this many blocks of rows
    decode = rows <= 64 * problem.local_experts
    if decode:
        bns = (32, 64, 128) if full else (64,)
        bks = ((128, 256) if fp8 else (64, 128)) if full else ((256,) if fp8 else (128,))
    else:
        bm = 64
        bns, bks = ((64, 128) if full else (128,)), ((128,) if fp8 else (64,))
    out = []
    for bn in bns:
        for bk in bks:
            splits = split_candidates(blocks * triton.cdiv(problem.N, bn), triton.cdiv(problem.K, bk), sms)
            for sk in splits if full else [max(splits)]:
                warps, stages = (4, 4) if decode else (8, 3)
                out.append(MoeConfig.tile(bm, bn, bk, warps, stages, SPLIT_K=sk, schedule="col"))
    return out


def _build(schedule=None, mul_weight: bool = False):
    """schedule None: the config's (the SplitK form searches it), else column-major."""

    def build(problem, inputs, config: MoeConfig) -> Launch:
        sched = schedule or config.schedule or "col"
        gemm = FusedMoe(inputs, problem.local_experts, problem.topk, config, sched, mul_weight, problem.fp8_accum)
        split_k = None if config.SPLIT_K is None else gemm.split_k  # a data-parallel config stays without one
        return Launch(fn=gemm, params=replace(config, schedule=sched, SPLIT_K=split_k), out=gemm.out)

    return build


_DESCRIPTION = (
    "rows gathered through slots sorted by expert (alignment not timed: see moe_align); fp8: per-expert "
    "weight scales, or block scales (1x128, each expert's 128x128; applied in the K loop), bf16 out"
)
_ORDER = {
    "row": "row-major tile order (consecutive programs walk N within one block of rows)",
    "col": "column-major tile order (consecutive programs walk the blocks of rows under one N tile: "
    "the seed's ordering, B tile shared)",
    "grouped": "grouped tile order (GROUP_M blocks of rows swept together)",
}

# The family's one variant in a default run: the order that was fastest on most cells (docs/BENCHMARKS.md); the
# others, and the SplitK form, run when --variants names them
DEFAULT_SCHEDULE = "col"


def register_moe(name: str, description: str, space, build, supports=tuning.needs_triton_device, default=False):
    """Register one MoE Triton form (this module's, fused_moe_persistent.py's, fused_moe_permuted.py's)."""
    tunable = tuning.Tunable(name, space, build, MoeConfig)
    register(
        Variant(
            name=name,
            family="triton_moe",
            dtypes=("fp16", "bf16", "fp8"),
            description=f"{description}; {_DESCRIPTION}",
            make=tunable.make,
            supports=supports,
            moe=True,
            tunable=tunable,
            scalings=TRITON_SCALINGS,
            fp8_accums=TRITON_FP8_ACCUMS,
            by_default=default,
        )
    )


for _schedule, _text in _ORDER.items():
    register_moe(f"triton_moe_{_schedule}", f"Fused MoE Triton GEMM, {_text}", search_space, _build(_schedule),
                 default=_schedule == DEFAULT_SCHEDULE)  # fmt: skip

assert set(_ORDER) == set(SCHEDULES)

register_moe(
    "triton_moe_splitk",
    "Fused MoE Triton GEMM, SplitK: each (block of rows, N tile)'s K loop split over SPLIT_K programs, partials "
    "atomically added in fp32, the last split scales, writes and clears (one launch); column-major tile order",
    splitk_space,
    _build(),
)
