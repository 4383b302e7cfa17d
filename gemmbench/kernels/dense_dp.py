"""Data-parallel Triton GEMM (the seeds' "base Triton"): one program per output tile, full K loop.

The kernel the seed's SplitK is measured against (docs/SEEDS.md, TK-GEMM §4).

out (M, N) = a (M, K) @ b (N, K)^T, b stored as nn.Linear stores its weight (K contiguous, which is
also the K-major B operand Hopper's fp8 tensor-core path wants).  fp8 e4m3 takes per-tensor scales
read from device memory (no host sync) and writes bf16, as torch._scaled_mm does; fp16/bf16 write
their own dtype.  The tile schedule is a compile-time parameter (gemmbench/kernels/schedules.py), registered
as three variants.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import torch
import triton
import triton.language as tl

from gemmbench.configs import tuning
from gemmbench.dtypes import REFERENCE_FP8_ACCUM
from gemmbench.kernels.schedules import SCHEDULES, tile_of
from gemmbench.kernels.tile_loop import (
    TRITON_FP8_ACCUMS,
    TRITON_SCALINGS,
    BlockScales,
    accumulate_tile,
    block_scaled,
    fit_block_k,
    fp8_promote_every,
    tma_descriptors,
)
from gemmbench.registry import Launch, Variant, register


# M changes with every decode step: not specialising on it (M == 1, M % 16) means one compile per
# config serves every M of a bucket (measured: compiles, not timing, dominated the first sweeps).
@triton.jit(do_not_specialize=["M"])
def dp_gemm_kernel(
    a_ptr,  # (M, K)
    b_ptr,  # (N, K)
    c_ptr,  # (M, N)
    a_scale_ptr,  # (1,) fp32, read only when HAS_SCALE
    b_scale_ptr,  # (1,) fp32, read only when HAS_SCALE
    a_bscale_ptr,  # (M, ceil(K/128)) fp32, read only when SCALE_BLOCK
    b_bscale_ptr,  # (ceil(N/128), ceil(K/128)) fp32, read only when SCALE_BLOCK
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    M,
    N,
    K,
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
    HAS_SCALE: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
    TMA: tl.constexpr,  # a_ptr, b_ptr are tensor descriptors (tile_loop.py)
    SCALE_BLOCK: tl.constexpr,  # 128: fp8 block scales, applied in the K loop (tile_loop.py); 0: none there
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_of(pid, grid_m, grid_n, SCHEDULE, GROUP_M)

    acc, offs_m, offs_n, _, _ = accumulate_tile(
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
        0,
        tl.cdiv(K, BLOCK_K),
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

    if HAS_SCALE:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr))
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@dataclass(frozen=True, kw_only=True)
class DenseConfig(tuning.KernelConfig):
    """A config of the data-parallel kernel; its fields are its JSON keys, in the order they are written."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8  # rows of tiles the grouped schedule sweeps together
    num_warps: int
    num_stages: int
    TMA: bool = False  # the K loop reads through tensor descriptors (tile_loop.py); built: whether it did
    # the tile order: the variant's, set when it builds (stored and searched configs leave it out)
    schedule: Optional[str] = field(default=None, metadata={"choices": SCHEDULES})
    FP8_PROMOTE: Optional[int] = None  # fp8: K summed before fp32 promotion; None: tile_loop.FP8_PROMOTE


def dp_gemm(
    a, b, out, a_scale, b_scale, config: DenseConfig, schedule: str, operands=None, blocks: Optional[BlockScales] = None,
    fp8_accum: str = REFERENCE_FP8_ACCUM,
) -> torch.Tensor:  # fmt: skip
    """Launch into `out`.  Checks shapes; allocates nothing.  operands: (a, b) as tensor descriptors
    (tile_loop.tma_descriptors), made once by the caller.  blocks: fp8 block scales (then a_scale and b_scale are
    None: nothing to apply after the loop).  fp8_accum: the accumulation contract (tile_loop.fp8_promote_every)."""
    M, K = a.shape
    N, K2 = b.shape
    assert K == K2 and out.shape == (M, N), (a.shape, b.shape, out.shape)
    bm, bn, bk = config.BLOCK_M, config.BLOCK_N, config.BLOCK_K
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    has_scale = a_scale is not None
    dp_gemm_kernel[grid](
        *(operands or (a, b)),
        out,
        a_scale if has_scale else a,
        b_scale if has_scale else b,
        *(blocks.args if blocks else (a, b, 0, 0, 0, 0)),
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=config.GROUP_M,
        SCHEDULE=schedule,
        HAS_SCALE=has_scale,
        EVEN_K=(K % bk == 0),
        EVEN_N=(N % bn == 0),
        PRECISE_ACC=fp8_promote_every(a, config, fp8_accum),
        TMA=operands is not None,
        SCALE_BLOCK=blocks.block if blocks else 0,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


def search_space(problem, on_gpu: bool, full: bool = True) -> list[DenseConfig]:
    """Candidates for `gemmbench tune` (full) or for a run that finds no stored config (the first few).
    Decode shapes stream the weight: wide K tiles, few warps."""
    return fit_block_k(_space(problem, on_gpu, full), block_scaled(problem))


def _space(problem, on_gpu: bool, full: bool) -> list[DenseConfig]:
    tile = DenseConfig.tile
    if not on_gpu:
        # Triton's CPU interpreter: one small config; its cost grows with the tile size.
        return [tile(16, 32, 32, 4, 1, GROUP_M=2)]
    fp8 = problem.dtype == "fp8"
    if problem.M <= 64:
        bm = 16 if problem.M <= 16 else (32 if problem.M <= 32 else 64)
        quick = [tile(bm, 64, 128, 4, 4), tile(bm, 128, 128, 4, 4), tile(bm, 64, 256, 4, 3)]
        more = [
            tile(bm, bn, bk, 4, st)
            for bn in (32, 64, 128)
            for bk in ((128, 256) if fp8 else (64, 128))
            for st in (3, 5)
        ]
    else:
        bk = 128 if fp8 else 64
        quick = [tile(128, 128, bk, 8, 4), tile(128, 256, 64, 8, 3)]
        if tuning.has_tma():
            # the copy engine's K loop: at prefill on the H100 as fast as the pointer loop with square 128-row tiles,
            # and much faster with tiles twice as wide (docs/BENCHMARKS.md keeps the figures)
            quick = [tile(128, 128, bk, 8, 4, TMA=True), tile(128, 256, bk, 8, 3, TMA=True)] + quick
        more = [
            tile(bm, bn, bk, 4 if bm * bn <= 64 * 128 else 8, st)
            for bm in (64, 128)
            for bn in (128, 256)
            for bk in ((64, 128) if fp8 else (64,))
            for st in (3, 4)
        ]
        # Hopper's large tiles: 256 x 128 as well as 128 x 256, and L2 groups of 32 and 64 rows of tiles
        # beside the default 8 for the grouped order (the other orders ignore GROUP_M: a few duplicate timings)
        more += [tile(256, 128, bk, 8, 3)] + [tile(128, 256, bk, 8, st, GROUP_M=g) for st in (3, 4) for g in (32, 64)]
    if problem.M > 16 and tuning.has_tma():  # TMA lost everywhere at M = 16 (splitk.py search_space)
        more += [replace(c, TMA=True) for c in more]
    return quick + [c for c in more if c not in quick] if full else quick


def _build(schedule: str):
    def build(problem, inputs, config: DenseConfig) -> Launch:
        a, b = inputs.a, inputs.b
        out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=a.device)
        descriptors = tma_descriptors(a, b, config)
        blocks = BlockScales(inputs)
        blocks.check(config.BLOCK_K)
        # block scales are applied in the K loop: nothing after it
        sa, sb = (None, None) if blocks.on else (inputs.a_scale, inputs.b_scale)
        accum = problem.fp8_accum
        fn = lambda: dp_gemm(a, b, out, sa, sb, config, schedule, descriptors, blocks, accum)  # noqa: E731
        return Launch(fn=fn, params=replace(config, schedule=schedule, TMA=descriptors is not None), out=out)

    return build


_DESCRIPTIONS = {
    "row": "Triton data-parallel GEMM, row-major tile order (one program per output tile)",
    "col": "Triton data-parallel GEMM, column-major tile order (B tile shared by consecutive programs)",
    "grouped": "Triton data-parallel GEMM, grouped tile order (GROUP_M rows swept together, tutorial 03)",
}

# The family's one variant in a default run: the order that was fastest on most cells (docs/BENCHMARKS.md)
DEFAULT_SCHEDULE = "grouped"

for _schedule, _text in _DESCRIPTIONS.items():
    _tunable = tuning.Tunable(f"triton_dp_{_schedule}", search_space, _build(_schedule), DenseConfig)
    register(
        Variant(
            name=f"triton_dp_{_schedule}",
            family="triton_dp",
            dtypes=("fp16", "bf16", "fp8"),
            description=_text + "; fp8: per-tensor or block scales (1x128, 128x128; applied in the K loop), bf16 out",
            make=_tunable.make,
            supports=tuning.needs_triton_device,
            tunable=_tunable,
            scalings=TRITON_SCALINGS,
            fp8_accums=TRITON_FP8_ACCUMS,
            by_default=_schedule == DEFAULT_SCHEDULE,
        )
    )
