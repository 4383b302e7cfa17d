"""Stream-K Triton GEMM (Osama et al., 2023), built for skinny decode GEMMs (TP8 QKV fp8, M <= 16).

out (M, N) = a (M, K) @ b (N, K)^T, the operands, scales and output dtypes of splitk.py.  A decode GEMM has few
output tiles over a deep K (N 1280, K 8192 at BLOCK_N 64: 20 tiles for 132 SMs), so SplitK cuts each tile's K loop
into SPLIT_K equal parts; whether tiles x SPLIT_K fills the SMs evenly depends on the shape.  Stream-K instead
lays all the work out as one line of MAC iterations (tile 0's K blocks, then tile 1's, ...: tiles x K blocks in
all) and gives each of a persistent grid's P programs an equal contiguous share, [p * total // P, (p + 1) *
total // P): every program streams the same number of weight bytes (to within one K block), and a share may end
in the middle of one tile and go on into the next.

The pieces of a tile meet as SplitK's splits do (splitk.reduce_splits): each piece adds its partial into an fp32
(M, N) buffer (REDUCE "atomic") or stores it in its own slice of a workspace (REDUCE "ordered": one slice per
piece of a tile, summed in piece order, bitwise the same every run), and a per-tile counter tells the piece that
finishes LAST, which scales, stores and leaves the buffer and the counter zero for the next call.  The owner is
whichever piece arrives last, not a fixed program waiting on a flag: no program ever spins, so programs may run in
any order (Triton's CPU interpreter runs them one after another, where a spin-wait would deadlock), and there is
no zeroing or reduction launch.  A tile that one program covers whole is stored directly (no buffer, no counter).

Which programs hold pieces of a tile follows from the arithmetic alone: iteration i belongs to the last program p
with p * total // P <= i, that is p = ((i + 1) * P - 1) // total; with P <= total (the host caps P) every program
has at least one iteration, so a tile's pieces are the programs from the owner of its first iteration to the owner
of its last (owner_of).  So neither the counter's target nor a piece's slice needs any table.

The K loop is tile_loop.accumulate_tile's (pointers, or tensor descriptors where TMA; block scales per K step).

Prefill (M > 64, _prefill_space): the persistent kernel's winning tiles, read through TMA.  HYBRID gives every full
wave of tiles but the last to the programs whole (data-parallel, dp_tiles) and shares out only the rest, so that
fewer tiles are met in pieces.

Measured on the H100 (docs/BENCHMARKS.md keeps the figures): at decode its best config was level with cuBLAS and
slower than SplitK: even shares do not pay where SplitK's splits already fill the SMs, and the pieces still meet in
L2.  At prefill it beat the persistent kernel on a few cells only (never cuBLAS) and was slower on the rest: programs
working at different K offsets share no operand tiles in L2 (ncu: a multiple of the persistent kernel's DRAM bytes),
and on 128-wide tiles this kernel holds far more registers a thread than the persistent kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import torch
import triton
import triton.language as tl

from gemmbench.configs import tuning
from gemmbench.dtypes import REFERENCE_FP8_ACCUM
from gemmbench.kernels import persistent
from gemmbench.kernels.schedules import tile_of
from gemmbench.kernels.splitk import reduce_splits, scale_store
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

REDUCES = ("atomic", "ordered")


@triton.jit(do_not_specialize=["M", "PROGRAMS", "DP_TILES"])
def streamk_gemm_kernel(
    a_ptr,  # (M, K), or its tensor descriptor where TMA
    b_ptr,  # (N, K), or its tensor descriptor where TMA
    c_ptr,  # (M, N)
    a_scale_ptr,  # SCALE "tensor": (1,) fp32; "row": (M,) fp32; otherwise not read
    b_scale_ptr,  # SCALE "tensor": (1,) fp32; "row": (N,) fp32; otherwise not read
    a_bscale_ptr,  # SCALE_BLOCK: (M, ceil(K/128)) fp32
    b_bscale_ptr,  # SCALE_BLOCK: (ceil(N/128), ceil(K/128)) fp32
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    buf_ptr,  # fp32 partials: (M, N) for atomic, (max pieces of a tile, M, N) for ordered; zero between calls
    count_ptr,  # int32 per output tile: pieces finished so far; zero between calls
    M,
    N,
    K,
    PROGRAMS,  # the persistent grid; <= the stream-K part's tiles x K blocks (the host caps it)
    DP_TILES,  # HYBRID: the first DP_TILES tiles (whole waves) go whole to programs; 0: all stream-K
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
    REDUCE: tl.constexpr,
    SCALE: tl.constexpr,  # "none", "tensor", "row" (after the sum) or "block" (in the K loop)
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
    TMA: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    # Data-parallel part (HYBRID): tiles [0, DP_TILES), whole, program p taking p, p + PROGRAMS, ... (grouped order)
    for tile in range(pid, DP_TILES, PROGRAMS):
        pid_m, pid_n = tile_of(tile, grid_m, grid_n, "grouped", GROUP_M)
        acc, offs_m, offs_n, rows_a, rows_b = accumulate_tile(
            a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk, pid_m, pid_n, 0, k_blocks,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, PRECISE_ACC, TMA, a_bscale_ptr, b_bscale_ptr,
            stride_asm, stride_ask, stride_bsn, stride_bsk, SCALE_BLOCK,
        )  # fmt: skip
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        scale_store(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)
    # Stream-K part: the other tiles' MAC iterations, one line shared evenly; i counts from tile DP_TILES's first
    total = (grid_m * grid_n - DP_TILES) * k_blocks
    it = pid * total // PROGRAMS
    end = (pid + 1) * total // PROGRAMS
    while it < end:
        local = it // k_blocks
        tile = DP_TILES + local
        kb_start = it - local * k_blocks
        kb_end = tl.minimum(k_blocks, kb_start + (end - it))
        pid_m, pid_n = tile_of(tile, grid_m, grid_n, "grouped", GROUP_M)
        acc, offs_m, offs_n, rows_a, rows_b = accumulate_tile(
            a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk, pid_m, pid_n, kb_start, kb_end,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, PRECISE_ACC, TMA, a_bscale_ptr, b_bscale_ptr,
            stride_asm, stride_ask, stride_bsn, stride_bsk, SCALE_BLOCK,
        )  # fmt: skip
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        if kb_end - kb_start == k_blocks:  # the whole tile in this program: no one to meet
            scale_store(acc, c_ptrs, mask, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)
        else:
            first = owner_of(local * k_blocks, total, PROGRAMS)
            pieces = owner_of(local * k_blocks + k_blocks - 1, total, PROGRAMS) - first + 1
            mn = offs_m[:, None] * N + offs_n[None, :]  # the buffer is contiguous (M, N) fp32
            last, tile_sum = reduce_splits(acc, buf_ptr, count_ptr, tile, mn, mask, pid - first, M * N, pieces, REDUCE)
            if last:
                scale_store(tile_sum, c_ptrs, mask, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)
        it += kb_end - kb_start


@triton.jit
def owner_of(i, total, PROGRAMS):
    """The program whose share holds MAC iteration i: the last p with p * total // PROGRAMS <= i (module docstring)."""
    return ((i + 1) * PROGRAMS - 1) // total


def owner(i: int, total: int, programs: int) -> int:
    """owner_of on the host (the ordered workspace's size, the tests' derivations)."""
    return ((i + 1) * programs - 1) // total


def max_pieces(tiles: int, k_blocks: int, programs: int) -> int:
    """The most programs that share one tile: the ordered workspace keeps one slice per piece."""
    total = tiles * k_blocks
    return max(owner(t * k_blocks + k_blocks - 1, total, programs) - owner(t * k_blocks, total, programs) + 1
               for t in range(tiles))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class StreamKConfig(tuning.KernelConfig):
    """A config of the stream-K kernel; its fields are its JSON keys, in the order they are written."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    PROGRAMS: int = 0  # the persistent grid; 0: one per SM.  Built: the count launched (<= tiles x K blocks)
    GROUP_M: int = 8  # rows of tiles the grouped order sweeps together (one row at decode: no effect there)
    num_warps: int
    num_stages: int
    REDUCE: str = field(default="atomic", metadata={"choices": REDUCES})
    TMA: bool = False  # read through tensor descriptors where the rows allow (tile_loop.py); built: whether it did
    FP8_PROMOTE: Optional[int] = None  # fp8: K summed before fp32 promotion; None: tile_loop.FP8_PROMOTE
    HYBRID: bool = False  # whole waves of tiles data-parallel but the last one or two (dp_tiles); the rest stream-K


def dp_tiles(tiles: int, programs: int, hybrid: bool) -> int:
    """The tiles a HYBRID grid gives whole to its programs, data-parallel: every full wave but the last, so that the
    stream-K part keeps between one and two waves' tiles (the Stream-K paper's "two-tile SK + DP" hybrid).  The
    last full wave stays in it: shared with the partial wave, every program gets the same work; left whole, the
    partial wave alone would leave SMs idle.  0 (all stream-K) where there are fewer than two waves."""
    return max(0, tiles // programs - 1) * programs if hybrid else 0


class StreamKGemm:
    """The buffers and grid of one (problem, inputs, config), and a closure that launches the kernel once."""

    def __init__(
        self, a, b, out, a_scale, b_scale, scaling: str, config: StreamKConfig, blocks: BlockScales,
        fp8_accum: str = REFERENCE_FP8_ACCUM,
    ):  # fmt: skip
        M, K = a.shape
        N = b.shape[0]
        blocks.check(config.BLOCK_K)
        self.a, self.b, self.out, self.config, self.blocks = a, b, out, config, blocks
        self.fp8_accum = fp8_accum
        self.scale = "none" if a_scale is None else ("block" if blocks.on else scaling)
        self.scales = (a_scale, b_scale) if self.scale in ("tensor", "row") else (a, a)
        descriptors = tma_descriptors(a, b, config)
        self.tma = descriptors is not None
        self.operands = descriptors or (a, b)
        tiles = triton.cdiv(M, config.BLOCK_M) * triton.cdiv(N, config.BLOCK_N)
        k_blocks = triton.cdiv(K, config.BLOCK_K)
        wanted = config.PROGRAMS or (tuning.sm_count() if a.is_cuda else 4)
        self.dp_tiles = dp_tiles(tiles, wanted, config.HYBRID)
        streamed = tiles - self.dp_tiles  # >= wanted where dp_tiles > 0: the grid is never capped below it then
        # at most one program per MAC iteration of the stream-K part, so that every program has work (owner_of)
        self.programs = max(1, min(wanted, streamed * k_blocks))
        assert (streamed * k_blocks + 1) * self.programs < 2**31, "the iteration arithmetic is int32"
        slices = 1 if config.REDUCE == "atomic" else max_pieces(streamed, k_blocks, self.programs)
        # zeroed once here; the kernel leaves them zero after every call
        self.buf = torch.zeros((slices, M, N), dtype=torch.float32, device=a.device)
        self.count = torch.zeros(tiles, dtype=torch.int32, device=a.device)

    def __call__(self) -> torch.Tensor:
        a, b, out, cfg = self.a, self.b, self.out, self.config
        M, K = a.shape
        N = b.shape[0]
        streamk_gemm_kernel[(self.programs,)](
            *self.operands,
            out,
            *self.scales,
            *(self.blocks.args if self.blocks.on else (a, a, 0, 0, 0, 0)),
            self.buf,
            self.count,
            M,
            N,
            K,
            self.programs,
            self.dp_tiles,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            out.stride(0),
            out.stride(1),
            BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            GROUP_M=cfg.GROUP_M,
            REDUCE=cfg.REDUCE,
            SCALE=self.scale,
            EVEN_K=(K % cfg.BLOCK_K == 0),
            EVEN_N=(N % cfg.BLOCK_N == 0),
            PRECISE_ACC=fp8_promote_every(a, cfg, self.fp8_accum),
            TMA=self.tma,
            SCALE_BLOCK=self.blocks.block,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        return out


# ---------------------------------------------------------------- configs

# At least this many fp32 accumulator registers a thread: below it, warps idle on a tile too small for them (16 x 32
# on 8 warps would hold 2).  A floor of judgement, not measured; persistent.fits keeps 32 for its MMA-bound tiles.
ACC_REGS_MIN = 4


def fits(bm: int, bn: int, bk: int, warps: int, stages: int, elem: int, tiles: int = 1) -> bool:
    """persistent.fits with the decode tiles' register floor, ACC_REGS_MIN."""
    return persistent.fits(bm, bn, bk, warps, stages, elem, tiles, min_regs=ACC_REGS_MIN)


def search_space(problem, on_gpu: bool, full: bool = True) -> list[StreamKConfig]:
    """Candidates for `gemmbench tune` (full) or for a run that finds no stored config (not full: one per SM, the
    splitk decode defaults' tile).  Block scales: BLOCK_K at most 128 (tile_loop.fit_block_k)."""
    return fit_block_k(_space(problem, on_gpu, full), block_scaled(problem))


def _space(problem, on_gpu: bool, full: bool) -> list[StreamKConfig]:
    tile = StreamKConfig.tile
    if not on_gpu:  # Triton's CPU interpreter: one small tile over 3 programs (pieces that cross tiles)
        return [tile(16, 32, 32, 4, 1, PROGRAMS=3)]
    if problem.M > 64:
        return _prefill_space(problem, full)
    M = problem.M
    fp8 = problem.dtype == "fp8"
    elem = 1 if fp8 else 2
    bm = 16 if M <= 16 else (32 if M <= 32 else 64)  # decode: the smallest tile that holds M's rows
    sms = tuning.sm_count()
    quick = [tile(bm, 64, 256 if fp8 else 128, 4, 4, PROGRAMS=sms)]
    if not full:
        return quick
    tiles = 2 if block_scaled(problem) else 1
    more = [
        tile(bm, bn, bk, warps, stages, PROGRAMS=programs)
        for bn in (32, 64, 128)
        for bk in (64, 128, 256)
        for warps in (4, 8)
        for stages in (3, 4, 5, 6)
        for programs in (sms, sms // 2)
        if fits(bm, bn, bk, warps, stages, elem, tiles)
    ]
    return quick + [c for c in more if c not in quick]


# The prefill tiles (BLOCK_M, BLOCK_N, warps, stages): those that won three or more of the persistent kernel's 216
# stored prefill buckets (Llama3-70B and Qwen2.5-72B, TP 1-8, M 128-4096, H100), in order of wins.  A stream-K
# program runs the same K loop over the same tiles; what it changes is which SM gets which part of them.
PREFILL_TILES = {
    "16-bit": [(128, 256, 8, 4), (128, 128, 4, 5), (128, 256, 8, 3), (64, 128, 4, 5), (128, 64, 4, 5), (64, 64, 4, 5)],
    "fp8": [(256, 128, 8, 4), (128, 128, 8, 5), (64, 128, 4, 5), (256, 128, 8, 3), (128, 128, 8, 4), (64, 64, 4, 5)],
}


def _prefill_space(problem, full: bool) -> list[StreamKConfig]:
    """Prefill (M > 64): PREFILL_TILES on one program per SM, read through tensor descriptors, atomic reduction (the
    ordered one keeps an (M, N) fp32 slice per piece).  Stream-K's use here is the last wave: 80 tiles of 128 x 256
    on 132 SMs (TP 8 QKV at M 2048) leave 52 SMs idle in a data-parallel or persistent grid.  HYBRID is searched
    only where it differs from all stream-K, at two or more waves of tiles.  Block scales keep the tiles whose two
    fp32 tiles fit (persistent.fits)."""
    fp8 = problem.dtype == "fp8"
    elem, bk = (1, 128) if fp8 else (2, 64)
    scale_tiles = 2 if block_scaled(problem) else 1
    sms = tuning.sm_count()
    rows = []  # per PREFILL_TILES row that fits: the config, and its hybrid twin
    for bm, bn, warps, stages in PREFILL_TILES["fp8" if fp8 else "16-bit"]:
        if not persistent.fits(bm, bn, bk, warps, stages, elem, scale_tiles):
            continue
        pure = StreamKConfig.tile(bm, bn, bk, warps, stages, PROGRAMS=sms, TMA=True)
        tiles = triton.cdiv(problem.M, bm) * triton.cdiv(problem.N, bn)
        rows.append([pure] + ([replace(pure, HYBRID=True)] if dp_tiles(tiles, sms, True) else []))
    return [c for row in rows for c in row] if full else rows[0]


def _build(problem, inputs, config: StreamKConfig) -> Launch:
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=inputs.a.device)
    scales = (inputs.a_scale, inputs.b_scale)
    if inputs.scaling == "row":
        scales = (inputs.a_scale.reshape(-1), inputs.b_scale.reshape(-1))
    gemm = StreamKGemm(inputs.a, inputs.b, out, *scales, inputs.scaling, config, BlockScales(inputs), problem.fp8_accum)
    return Launch(fn=gemm, params=replace(config, PROGRAMS=gemm.programs, TMA=gemm.tma), out=out)


_tunable = tuning.Tunable("triton_streamk", search_space, _build, StreamKConfig)
register(
    Variant(
        name="triton_streamk",
        family="triton_streamk",
        dtypes=("fp16", "bf16", "fp8"),
        description="Triton stream-K GEMM: a persistent grid splits tiles x K blocks evenly, shares crossing tile "
        "boundaries; a tile's pieces meet in fp32 (atomic or ordered), the last to finish scales and stores (one "
        "launch, no spin-wait); prefill: HYBRID keeps whole waves data-parallel; fp8: per-tensor, row-wise or block "
        "scales, bf16 out",
        make=_tunable.make,
        supports=tuning.needs_triton_device,
        tunable=_tunable,
        scalings=(*TRITON_SCALINGS, "row"),
        fp8_accums=TRITON_FP8_ACCUMS,
    )
)
