"""SplitK Triton GEMM: K is split across SPLIT_K programs per output tile, so that a GEMM with few
output tiles over a deep K (the QKV projection under tensor parallelism: N = 1280, K = 8192 gives
10-20 tiles for 132 SMs) still has every SM streaming the weight (docs/GPU-FACTS.md §3).

out (M, N) = a (M, K) @ b (N, K)^T, the same operands, scale semantics and output dtypes as the
data-parallel kernel (dense_dp.py); fp8 also takes row-wise scales ((M, 1) and (N, 1)).

One kernel, one launch per call.  The partial sums of a tile meet in an fp32 buffer; a per-tile
counter tells the program that finishes last, and that program applies the scales, writes the
output and clears the buffer and the counter for the next call.  So there is no zeroing launch and
no separate cast or reduction launch: everything a model would pay is in the one timed launch.
  REDUCE="atomic":  partials are atomically added into an (M, N) fp32 buffer (order of additions
                    varies from run to run: results may differ in the last bits);
  REDUCE="ordered": each split stores its partial in its own slice of a (SPLIT_K, M, N) fp32
                    workspace, and the last program sums the slices in split order: bitwise the same
                    result on every run.
SPLIT_K = 1 is the data-parallel fallback: the tile is stored directly, no buffer, no counter.
SWAP_AB (decode, M <= 64): the kernel computes out^T (N, M) = b @ a^T, so N fills the tile's BLOCK_M side and the
few tokens its narrow BLOCK_N side (as vLLM's CUTLASS fp8 dispatch does); tensor and row scales only.
The tile schedule (row / col / grouped, gemmbench/kernels/schedules.py) is a compile-time parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import torch
import triton
import triton.language as tl

from gemmbench.configs import tuning
from gemmbench.kernels.schedules import SCHEDULES, tile_of
from gemmbench.kernels.tile_loop import (
    TRITON_FP8_ACCUMS,
    TRITON_SCALINGS,
    BlockScales,
    accumulate_tile,
    block_scaled,
    fit_block_k,
    fp8_promote_every,
    scale_tile,
    tma_descriptors,
)
from gemmbench.registry import Launch, Variant, register


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def splitk_gemm_kernel(
    a_ptr,  # (M, K)
    b_ptr,  # (N, K)
    c_ptr,  # (M, N)
    a_scale_ptr,  # fp32: (1,) per tensor or (M,) per row; read only when SCALE != "none"
    b_scale_ptr,  # fp32: (1,) per tensor or (N,) per row
    a_bscale_ptr,  # (M, ceil(K/128)) fp32, read only when SCALE_BLOCK
    b_bscale_ptr,  # (ceil(N/128), ceil(K/128)) fp32, read only when SCALE_BLOCK
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    buf_ptr,  # fp32 partial sums: (M, N) for atomic, (SPLIT_K, M, N) for ordered; zero between calls
    count_ptr,  # int32 per output tile: splits finished so far; zero between calls
    M,
    N,
    K,
    SPLIT_K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SCHEDULE: tl.constexpr,
    REDUCE: tl.constexpr,
    SPLIT: tl.constexpr,
    SCALE: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
    TMA: tl.constexpr,  # a_ptr, b_ptr are tensor descriptors (tile_loop.py)
    SCALE_BLOCK: tl.constexpr,  # 128: fp8 block scales, applied in each split's K loop (tile_loop.py); 0: none
):
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_of(tl.program_id(0), grid_m, grid_n, SCHEDULE, GROUP_M)
    pid_k = tl.program_id(1)

    kb_start, kb_end = split_range(K, BLOCK_K, SPLIT_K, pid_k)

    acc, offs_m, offs_n, rows_a, rows_b = accumulate_tile(
        a_ptr,
        b_ptr,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bn,
        stride_bk,
        pid_m,
        pid_n,
        kb_start,
        kb_end,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        EVEN_K,
        EVEN_N,
        PRECISE_ACC,
        TMA,
        a_bscale_ptr,
        b_bscale_ptr,
        stride_asm,
        stride_ask,
        stride_bsn,
        stride_bsk,
        SCALE_BLOCK,
    )

    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if not SPLIT:
        scale_store(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)
    else:
        mn = offs_m[:, None] * N + offs_n[None, :]  # the buffer is contiguous (M, N) fp32
        last, total = reduce_splits(
            acc, buf_ptr, count_ptr, pid_m * grid_n + pid_n, mn, mask, pid_k, M * N, SPLIT_K, REDUCE
        )
        if last:
            scale_store(total, c_ptrs, mask, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)


@triton.jit
def split_range(K, BLOCK_K: tl.constexpr, SPLIT_K, pid_k):
    """This split's share [kb_start, kb_end) of the K blocks (the last splits may get fewer, or none:
    their partial is 0)."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_blocks, SPLIT_K)
    kb_start = pid_k * per_split
    return kb_start, tl.minimum(kb_start + per_split, k_blocks)


@triton.jit
def reduce_splits(acc, buf_ptr, count_ptr, tile, mn, mask, pid_k, slice_size, SPLIT_K, REDUCE: tl.constexpr):
    """Meet the other splits of one output tile: returns (last, total), where `last` is true in the
    split that finished last, and `total` is then the tile's whole fp32 sum.  That split also leaves
    the buffer and the tile's counter zero for the next call.  mn: the tile's offsets in one (rows, N)
    fp32 slice of buf_ptr; slice_size: rows * N (REDUCE="ordered" keeps SPLIT_K slices)."""
    if REDUCE == "atomic":
        tl.atomic_add(buf_ptr + mn, acc, mask=mask, sem="relaxed")
    else:
        tl.store(buf_ptr + pid_k * slice_size + mn, acc, mask=mask)
    # Every thread's partial is out before one thread's release-increment of the counter (the
    # CUTLASS semaphore pattern); the acquire side makes the other splits' partials visible.
    tl.debug_barrier()
    done = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel")
    last = done == SPLIT_K - 1
    total = tl.zeros_like(acc)
    if last:
        if REDUCE == "atomic":
            total = tl.load(buf_ptr + mn, mask=mask, other=0.0, cache_modifier=".cg")
            # The threads that load an element are not the ones that store its zero (different
            # layouts): without this barrier a zero could land first (measured on the H100: rows
            # of zeros in the output, one tile in a few thousand).
            tl.debug_barrier()
            tl.store(buf_ptr + mn, tl.zeros_like(acc), mask=mask)
        else:
            for s in range(0, SPLIT_K):  # in split order, whichever split arrived last
                total += tl.load(buf_ptr + s * slice_size + mn, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(count_ptr + tile, 0)
    return last, total


@triton.jit
def scale_store(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE: tl.constexpr):
    """Apply the fp8 scales (once, to the full sum; block scales were applied in the K loop: SCALE "block") and
    store in the output dtype (also the stream-K kernel's epilogue)."""
    acc = scale_tile(acc, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)
    tl.store(c_ptrs, acc.to(c_ptrs.dtype.element_ty), mask=mask)


@dataclass(frozen=True, kw_only=True)
class SplitKConfig(tuning.KernelConfig):
    """A config of the SplitK kernel; its fields are its JSON keys, in the order they are written."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    SPLIT_K: int  # programs per output tile along K; 1: data-parallel.  Built: the split launched (<= K blocks)
    GROUP_M: int = 8  # rows of tiles the grouped schedule sweeps together
    schedule: str = field(default="row", metadata={"choices": SCHEDULES})
    num_warps: int
    num_stages: int
    TMA: bool = False  # the K loop reads through tensor descriptors (tile_loop.py); built: whether it did
    # the kernel computes out^T = b @ a^T: BLOCK_M tiles N, BLOCK_N tiles M (SplitKGemm); None (unset, left out of
    # the JSON, so configs from before it compare equal): not swapped
    SWAP_AB: Optional[bool] = None
    FP8_PROMOTE: Optional[int] = None  # fp8: K summed before fp32 promotion; None: tile_loop.FP8_PROMOTE


SWAP_BLOCKS_REFUSED = (
    "SWAP_AB does not take block scales: the kernel's K loop reads 1x128 group scales for its A operand and "
    "128x128 block scales for its B, and swapped the weight would be A; use SWAP_AB with tensor or row scales"
)


class SplitKGemm:
    """The buffers of one (problem, inputs, config) and a closure that launches the kernel once.  a, b, a_scale,
    b_scale are the kernel's operands: under SWAP_AB the call's b and a (and their scales), M and N exchanged, and
    out_strides the output's exchanged, so the kernel's (N, M) tile lands transposed in out (M, N)."""

    def __init__(
        self, a, b, out, a_scale, b_scale, scaling: str, config: SplitKConfig, reduce: str, blocks=None,
        fp8_accum: str = "precise",
    ):  # fmt: skip
        self.fp8_accum = fp8_accum  # tile_loop.fp8_promote_every: precise promotes, fast does not
        M, K = a.shape
        N, K2 = b.shape
        assert K == K2 and out.shape == (M, N), (a.shape, b.shape, out.shape)
        self.blocks = blocks if blocks is not None and blocks.on else None
        if self.blocks:
            if config.SWAP_AB:
                raise ValueError(SWAP_BLOCKS_REFUSED)
            self.blocks.check(config.BLOCK_K)
        self.out_strides = (out.stride(0), out.stride(1))
        if config.SWAP_AB:  # out^T = b @ a^T: each scale goes with its tensor (row-wise: (M,) becomes the column scale)
            a, b, a_scale, b_scale, M, N = b, a, b_scale, a_scale, N, M
            self.out_strides = (out.stride(1), out.stride(0))
        self.a, self.b, self.out, self.config, self.reduce = a, b, out, config, reduce
        self.a_scale, self.b_scale = a_scale, b_scale
        # "block": applied in the K loop, nothing after it
        self.scale = "none" if a_scale is None else ("block" if self.blocks else scaling)
        descriptors = tma_descriptors(a, b, config)
        self.tma = descriptors is not None
        self.operands = descriptors or (a, b)
        bm, bn, bk = config.BLOCK_M, config.BLOCK_N, config.BLOCK_K
        self.split_k = max(1, min(config.SPLIT_K, triton.cdiv(K, bk)))
        self.grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), self.split_k)
        dev = a.device
        if self.split_k > 1:
            slices = 1 if reduce == "atomic" else self.split_k
            # zeroed once here; the kernel leaves them zero after every call
            self.buf = torch.zeros((slices, M, N), dtype=torch.float32, device=dev)
            self.count = torch.zeros(self.grid[0], dtype=torch.int32, device=dev)
        else:
            self.buf = self.count = torch.empty(1, dtype=torch.int32, device=dev)  # never touched

    def __call__(self) -> torch.Tensor:
        a, b, out, cfg = self.a, self.b, self.out, self.config
        M, K = a.shape
        N = b.shape[0]
        splitk_gemm_kernel[self.grid](
            *self.operands,
            out,
            self.a_scale if self.a_scale is not None else a,
            self.b_scale if self.b_scale is not None else b,
            *(self.blocks.args if self.blocks else (a, b, 0, 0, 0, 0)),
            self.buf,
            self.count,
            M,
            N,
            K,
            self.split_k,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            *self.out_strides,
            BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            GROUP_M=cfg.GROUP_M,
            SCHEDULE=cfg.schedule,
            REDUCE=self.reduce,
            SPLIT=self.split_k > 1,
            SCALE=self.scale,
            EVEN_K=(K % cfg.BLOCK_K == 0),
            EVEN_N=(N % cfg.BLOCK_N == 0),
            PRECISE_ACC=fp8_promote_every(a, cfg, self.fp8_accum),
            TMA=self.tma,
            SCALE_BLOCK=self.blocks.block if self.blocks else 0,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        return out


# ---------------------------------------------------------------- configs


def split_candidates(tiles: int, k_blocks: int, sms: int) -> list[int]:
    """SPLIT_K values worth trying: 1 (data-parallel); powers of two from where the grid first fills
    the SMs up to about 8 programs per SM; and the splits that make the grid whole waves of 1, 2 and 4
    programs per SM.  Never more splits than K blocks."""
    out = {1}
    s = 2
    while s <= k_blocks and tiles * s <= 8 * sms:
        if tiles * s >= sms // 2:
            out.add(s)
        s *= 2
    if tiles < sms:
        for per_sm in (1, 2, 4):
            s = round(per_sm * sms / tiles)
            if 2 <= s <= k_blocks:
                out.add(s)
    if len(out) == 1 and k_blocks >= 2 and tiles < sms:  # tiny grids: at least one real split
        out.add(min(k_blocks, 1 << max(1, (sms // max(tiles, 1)).bit_length() - 1)))
    return sorted(out)


def search_space(problem, on_gpu: bool, full: bool = True) -> list[SplitKConfig]:
    """Candidates for `gemmbench tune` (full) or for a run that finds no stored config (not full); block scales:
    BLOCK_K at most 128 (tile_loop.fit_block_k), and no SWAP_AB (SWAP_BLOCKS_REFUSED)."""
    blocks = block_scaled(problem)
    swapped = [] if blocks else _swap_space(problem, on_gpu, full)
    return fit_block_k(_space(problem, on_gpu, full), blocks) + swapped


def _swap_space(problem, on_gpu: bool, full: bool) -> list[SplitKConfig]:
    """SWAP_AB candidates of a full GPU search at decode (M <= 64): the kernel's BLOCK_M (64: one warpgroup's wgmma
    rows) tiles N, its BLOCK_N the tokens (16, 32 or 64; tl.dot's minimum is 16); one BLOCK_K, one pipeline depth,
    pointer loads, the split_candidates values: a handful of configs beside the unswapped ones (docs/BENCHMARKS.md,
    "The Gluon kernel, step by step": none has yet beaten a stored unswapped config)."""
    M, N, K = problem.M, problem.N, problem.K
    if not (on_gpu and full and M <= 64):
        return []
    bm, bn = 64, 16 if M <= 16 else (32 if M <= 32 else 64)
    bk = 256 if problem.dtype == "fp8" else 128
    splits = split_candidates(triton.cdiv(N, bm) * triton.cdiv(M, bn), triton.cdiv(K, bk), tuning.sm_count())
    return [SplitKConfig.tile(bm, bn, bk, 4, 4, SPLIT_K=sk, SWAP_AB=True) for sk in splits]


def _space(problem, on_gpu: bool, full: bool) -> list[SplitKConfig]:
    if not on_gpu:
        # Triton's CPU interpreter: one small tile, split 2 ways (so the reduction runs), or 1 if K is one block
        k_blocks = triton.cdiv(problem.K, 32)
        return [SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=2 if k_blocks > 1 else 1)]
    M, N, K = problem.M, problem.N, problem.K
    fp8 = problem.dtype == "fp8"
    sms = tuning.sm_count()
    if M <= 64:
        bm = 16 if M <= 16 else (32 if M <= 32 else 64)
        bns = (16, 32, 64, 128) if full else (64,)
        bks = ((128, 256) if fp8 else (64, 128)) if full else ((256,) if fp8 else (128,))
        stages = (3, 5) if full else (4,)
        schedules = ("row",)  # one row of tiles: the order of the tiles does not matter
    else:
        bm = 64 if M <= 128 else 128
        bns = (64, 128, 256) if full else (128,)
        bks = ((64, 128) if fp8 else (64,)) if full else (64 if not fp8 else 128,)
        stages = (3, 4) if full else (3,)
        schedules = SCHEDULES if full else ("grouped",)
    # The copy engine's K loop (TMA) lost to the pointer loop on all six fp8 GEMMs probed at M = 16
    # (by 1-50%, H100, cold), tied at M = 64 and won at M >= 256 (dense_dp.py): searched above 16 rows.
    tmas = (False,)
    if M > 16 and tuning.has_tma():
        tmas = (False, True) if full else ((True,) if M > 64 else (False,))
    out = []
    for bn in bns:
        for bk in bks:
            tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
            splits = split_candidates(tiles, triton.cdiv(K, bk), sms)
            if not full:
                splits = [max(splits)] if len(splits) > 1 else splits
            for sk in splits:
                for st in stages:
                    for sch in schedules:
                        for tma in tmas:
                            warps = 4 if bm * bn <= 64 * 64 else 8
                            out.append(SplitKConfig.tile(bm, bn, bk, warps, st, SPLIT_K=sk, schedule=sch, TMA=tma))
    return out


def _build(reduce: str):
    def build(problem, inputs, config: SplitKConfig) -> Launch:
        out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=inputs.a.device)
        scales = (inputs.a_scale, inputs.b_scale)
        if inputs.scaling == "row":
            scales = (inputs.a_scale.reshape(-1), inputs.b_scale.reshape(-1))
        gemm = SplitKGemm(inputs.a, inputs.b, out, *scales, inputs.scaling, config, reduce, BlockScales(inputs),
                          problem.fp8_accum)  # fmt: skip
        return Launch(fn=gemm, params=replace(config, SPLIT_K=gemm.split_k, TMA=gemm.tma), out=out)

    return build


_REDUCE_TEXT = {
    "atomic": "partials atomically added into an fp32 buffer",
    "ordered": "partials in an fp32 workspace, summed in split order (bitwise reproducible)",
}
_COMMON = (
    "; one launch: the last split of each tile scales, casts, writes and clears the buffer "
    "(no zeroing or reduction launch); SPLIT_K=1 is the data-parallel fallback"
)

# The family's one reduction in a default run: the atomic one, faster on most cells (docs/BENCHMARKS.md)
DEFAULT_REDUCE = "atomic"

for _name, _reduce in (("triton_splitk_atomic", "atomic"), ("triton_splitk_reduce", "ordered")):
    for _scalings, _suffix, _dtypes, _what in (
        (
            TRITON_SCALINGS,
            "",
            ("fp16", "bf16", "fp8"),
            "fp8: per-tensor or block scales (1x128, 128x128; applied in each split's K loop), bf16 out",
        ),
        (("row",), "_rowwise", ("fp8",), "fp8 row-wise scales ((M,1), (N,1)), bf16 out"),
    ):
        _tunable = tuning.Tunable(_name + _suffix, search_space, _build(_reduce), SplitKConfig)
        register(
            Variant(
                name=_name + _suffix,
                family="triton_splitk",
                dtypes=_dtypes,
                description=f"Triton SplitK GEMM, {_REDUCE_TEXT[_reduce]}{_COMMON}; {_what}",
                make=_tunable.make,
                supports=tuning.needs_triton_device,
                scalings=_scalings,
                fp8_accums=TRITON_FP8_ACCUMS,
                tunable=_tunable,
                by_default=_reduce == DEFAULT_REDUCE,  # the reproducible reduce runs when named
            )
        )
