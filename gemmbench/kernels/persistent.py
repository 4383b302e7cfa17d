"""Persistent Triton GEMM: one program per SM, each walking output tiles in the grouped order.

out (M, N) = a (M, K) @ b (N, K)^T, as dense_dp.py.  The data-parallel kernel launches one program per tile, and
each program pays its prologue (address set-up, the pipeline's first loads) and epilogue (scales, cast, store)
alone; a persistent program keeps its SM and lets the software pipeline run across tile boundaries
(`tl.range(..., flatten=True)`: the next tile's first loads are issued while this tile's epilogue runs), the way
cuBLAS's and CUTLASS's Hopper kernels do.  Triton's tutorial 09 ("persistent matmul") is the pattern.

- Operands are read through tensor descriptors (TMA, tile_loop.py): Hopper's copy engine fills what lies past M, N
  and K with zeros, so the K loop has no masks.  The K loop is tile_loop.accumulate_tile's, so block scales (1x128,
  128x128, applied per K step) come with it.
- The output is written through a descriptor too where its rows allow one (16-byte aligned), in two halves along N
  (EPILOGUE_SUBTILE): half the registers and shared memory of a full tile's store, so the epilogue does not cut
  the stages the K loop can keep in flight.  Otherwise a masked store.
- fp8: per-tensor scales (one multiply after the loop), row-wise ((M,), (N,) vectors after the loop) or block
  scales (in the loop); bf16 out, as torch._scaled_mm.
- WARP_SPECIALIZE: Triton's warp specialisation of the tile loop (producer warps issue the copies, consumer warps
  the wgmma), where this Triton compiles it for the GPU; a config it cannot compile fails in the search and is
  not a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from gemmbench.configs import tuning
from gemmbench.dtypes import REFERENCE_FP8_ACCUM
from gemmbench.kernels.schedules import tile_of
from gemmbench.kernels.tile_loop import (
    TRITON_FP8_ACCUMS,
    TRITON_SCALINGS,
    BlockScales,
    accumulate_tile,
    block_scaled,
    fit_block_k,
    fp8_promote_every,
    scale_tile,
)
from gemmbench.registry import Launch, Variant, register

# The Hopper SM's shared memory a block may use (227 KiB), and the registers one thread may hold; the search space
# keeps only tiles within both (larger ones fail to compile or spill).
SMEM_BYTES = 227 * 1024
ACC_REGS_MAX = 128  # fp32 accumulator registers per thread: BLOCK_M * BLOCK_N / (32 * num_warps)
SMEM_SCRATCH = 32 * 1024  # the epilogue's half tile, barriers and scratch beside the stages (fits)


@triton.jit(do_not_specialize=["M"])
def persistent_gemm_kernel(
    a_desc,  # (M, K) tensor descriptor, [BLOCK_M, BLOCK_K] blocks
    b_desc,  # (N, K) tensor descriptor, [BLOCK_N, BLOCK_K] blocks
    c_ptr,  # (M, N): a tensor descriptor ([BLOCK_M, BLOCK_N // 2] or [BLOCK_M, BLOCK_N] blocks) where C_DESC
    a_scale_ptr,  # SCALE "tensor": (1,) fp32; "row": (M,) fp32; otherwise not read
    b_scale_ptr,  # SCALE "tensor": (1,) fp32; "row": (N,) fp32; otherwise not read
    a_bscale_ptr,  # SCALE_BLOCK: (M, ceil(K/128)) fp32
    b_bscale_ptr,  # SCALE_BLOCK: (ceil(N/128), ceil(K/128)) fp32
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    M,
    N,
    K,
    stride_cm,
    stride_cn,
    NUM_PROGRAMS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SCALE: tl.constexpr,  # "none", "tensor", "row" (after the loop) or "block" (in it)
    PRECISE_ACC: tl.constexpr,
    C_DESC: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    SCALE_BLOCK: tl.constexpr,
):
    start = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    # The epilogue takes its tile from a counter of its own (tutorial 09): with the loop flattened, the compiler
    # then need not keep the prologue's tile indices alive across the K loop.
    tile_out = start - NUM_PROGRAMS
    for tile in tl.range(start, grid_m * grid_n, NUM_PROGRAMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_of(tile, grid_m, grid_n, "grouped", GROUP_M)
        acc, _, _, _, _ = accumulate_tile(
            a_desc, b_desc, M, N, K, 0, 0, 0, 0, pid_m, pid_n, 0, k_blocks, BLOCK_M, BLOCK_N, BLOCK_K, True, True,
            PRECISE_ACC, True, a_bscale_ptr, b_bscale_ptr, stride_asm, stride_ask, stride_bsn, stride_bsk, SCALE_BLOCK,
        )  # fmt: skip
        tile_out += NUM_PROGRAMS
        pid_m, pid_n = tile_of(tile_out, grid_m, grid_n, "grouped", GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows_a = tl.where(offs_m < M, offs_m, M - 1)  # in bounds for the row-wise scales; the store masks the rest
        rows_b = tl.where(offs_n < N, offs_n, N - 1)
        acc = scale_tile(acc, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE)
        _store_tile(acc, c_ptr, pid_m, pid_n, offs_m, offs_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N,
                    C_DESC, EPILOGUE_SUBTILE)  # fmt: skip


@triton.jit
def _store_tile(
    acc,
    c_ptr,
    pid_m,
    pid_n,
    offs_m,
    offs_n,
    M,
    N,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    C_DESC: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
):
    """The tile in the output's dtype: through the descriptor (whole, or in two halves along N), else masked."""
    if C_DESC:
        dtype = c_ptr.dtype
        if EPILOGUE_SUBTILE:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_ptr.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left.to(dtype))
            c_ptr.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right.to(dtype))
        else:
            c_ptr.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(dtype))
    else:
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True, kw_only=True)
class PersistentConfig(tuning.KernelConfig):
    """A config of the persistent kernel; its fields are its JSON keys, in the order they are written."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8  # rows of tiles the grouped order sweeps together
    num_warps: int
    num_stages: int
    EPILOGUE_SUBTILE: bool = True  # store the tile in two halves along N (module docstring)
    WARP_SPECIALIZE: bool = False
    FP8_PROMOTE: Optional[int] = None  # fp8: K summed before fp32 promotion; None: tile_loop.FP8_PROMOTE


def unsupported(problem, device) -> Optional[str]:
    """Why the persistent kernel cannot run a problem here, or None: it reads through tensor descriptors, which need
    Hopper (or Triton's CPU interpreter, which emulates them) and rows of A and B that start on 16-byte
    boundaries (K * bytes per element a multiple of 16)."""
    reason = tuning.needs_triton_device(problem, device)
    if reason:
        return reason
    if device.kind == "cuda" and device.capability < (9, 0):
        return f"tensor descriptors (TMA) need compute capability 9.0+, {device.name} has {device.capability}"
    elem = 1 if problem.dtype == "fp8" else 2
    if (problem.K * elem) % 16:
        return f"K={problem.K}: rows of {problem.K * elem} bytes are not 16-byte aligned, as tensor descriptors need"
    return None


def _descriptor(t: torch.Tensor, block: list[int]):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, block)


def _out_takes_descriptor(out: torch.Tensor) -> bool:
    """Whether the output's rows start on 16-byte boundaries (a descriptor store can write them)."""
    return out.stride(1) == 1 and (out.stride(0) * out.element_size()) % 16 == 0 and out.data_ptr() % 16 == 0


class PersistentGemm:
    """The descriptors and grid of one (problem, inputs, config), and a closure that launches the kernel once."""

    def __init__(
        self, a, b, out, a_scale, b_scale, scaling: str, config: PersistentConfig, blocks: BlockScales,
        fp8_accum: str = REFERENCE_FP8_ACCUM,
    ):  # fmt: skip
        M, K = a.shape
        N = b.shape[0]
        bm, bn, bk = config.BLOCK_M, config.BLOCK_N, config.BLOCK_K
        blocks.check(bk)
        self.config, self.blocks, self.out, self.a = config, blocks, out, a
        self.fp8_accum = fp8_accum
        self.operands = (_descriptor(a, [bm, bk]), _descriptor(b, [bn, bk]))
        self.c_desc = _out_takes_descriptor(out)
        half = bn // 2 if config.EPILOGUE_SUBTILE else bn
        self.c = _descriptor(out, [bm, half]) if self.c_desc else out
        self.scale = "none" if a_scale is None else ("block" if blocks.on else scaling)
        self.scales = (a_scale, b_scale) if self.scale in ("tensor", "row") else (a, a)
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        self.programs = tuning.persistent_programs(tiles, a.is_cuda)
        self.shape = (M, N, K)

    def __call__(self) -> torch.Tensor:
        cfg, (M, N, K), out = self.config, self.shape, self.out
        persistent_gemm_kernel[(self.programs,)](
            *self.operands,
            self.c,
            *self.scales,
            *(self.blocks.args if self.blocks.on else (self.a, self.a, 0, 0, 0, 0)),
            M,
            N,
            K,
            out.stride(0),
            out.stride(1),
            NUM_PROGRAMS=self.programs,
            BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            GROUP_M=cfg.GROUP_M,
            SCALE=self.scale,
            PRECISE_ACC=fp8_promote_every(self.a, cfg, self.fp8_accum),
            C_DESC=self.c_desc,
            EPILOGUE_SUBTILE=cfg.EPILOGUE_SUBTILE,
            WARP_SPECIALIZE=cfg.WARP_SPECIALIZE,
            SCALE_BLOCK=self.blocks.block,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        return out


# ---------------------------------------------------------------- configs


def fits(bm: int, bn: int, bk: int, warps: int, stages: int, elem: int, tiles: int = 1, min_regs: int = 32) -> bool:
    """A tile the SM can hold, roughly: its pipeline's A and B stages and SMEM_SCRATCH in shared memory, and its fp32
    accumulator within ACC_REGS_MAX registers a thread (and at least min_regs, 32 here: eight warps on a 64 x 64 tile
    idle half the time; stream-K's decode tiles allow fewer).  Measured on the H100 (Triton 3.6): 128 x 256 x 64 bf16 and 256 x 128 x 128 fp8 with 4 stages (196608
    bytes of stages) compiled and were the fastest; 256 x 128 x 64 bf16 with 4 stages asked for 278568 bytes and
    failed, as a few such configs do: the search drops a config that fails to compile.  tiles: the fp32 tiles a
    thread holds (block scales: 2, the sum and each K step's dot before it is scaled, tile_loop.add_scaled)."""
    smem = stages * (bm + bn) * bk * elem + SMEM_SCRATCH
    regs = tiles * bm * bn // (32 * warps)
    return smem <= SMEM_BYTES and min_regs <= regs <= ACC_REGS_MAX


def search_space(problem, on_gpu: bool, full: bool = True) -> list[PersistentConfig]:
    """Candidates for `gemmbench tune` (full) or for a run that finds no stored config (the first few).  Block scales:
    BLOCK_K at most 128 (tile_loop.fit_block_k)."""
    return fit_block_k(_space(problem, on_gpu, full), block_scaled(problem))


# The space is pruned by what scripts/experiments/persistent_space.py measured on the H100 (docs/BENCHMARKS.md,
# Llama3-70B's QKV at TP 1 and 8, M 2048, bf16 and fp8): 2 stages cost 1.5-1.9x; fp8 BLOCK_K 64 cost 1.3-2.0x
# against 128; GROUP_M 32 or 64, warp specialisation and the whole-tile epilogue each moved the best configs by
# under 2% (0.3% for the first two): they stay fields of the config, searched no more.
def _space(problem, on_gpu: bool, full: bool) -> list[PersistentConfig]:
    tile = PersistentConfig.tile
    if not on_gpu:  # Triton's CPU interpreter: one small tile (its cost grows with the tile)
        return [tile(16, 32, 32, 4, 1, GROUP_M=2)]
    fp8 = problem.dtype == "fp8"
    elem, bk = (1, 128) if fp8 else (2, 64)
    tiles = 2 if block_scaled(problem) else 1  # block scales hold a second fp32 tile (fits)
    if problem.M <= 64:
        quick = [tile(64, 128, bk, 4, 4)] + ([tile(64, 256, bk, 8, 3)] if tiles == 1 else [])
    elif tiles == 2:
        # 256 x 128 on 8 warps spilled with block scales and ran at 0.27-0.35x cuBLAS (H100, DeepSeek-V3's GEMMs at
        # M 4096); the block-scaled dp kernel's tuned winners there are these two
        quick = [tile(128, 128, bk, 8, 4), tile(64, 128, bk, 4, 3)]
    elif fp8:  # the probe's winners: fp8 256 x 128, 16-bit 128 x 256, both 8 warps and 4 stages
        quick = [tile(256, 128, bk, 8, 4), tile(128, 256, bk, 8, 3)]
    else:
        quick = [tile(128, 256, bk, 8, 4), tile(128, 128, bk, 8, 4)]
    if not full:
        return quick
    more = [
        tile(bm, bn, bk, warps, stages)
        for bm in (64, 128, 256)
        for bn in (64, 128, 256)
        for warps in (4, 8)
        for stages in (3, 4, 5)
        if fits(bm, bn, bk, warps, stages, elem, tiles) and not (problem.M <= 64 and bm > 64)
    ]
    return quick + [c for c in more if c not in quick]


def _build(problem, inputs, config: PersistentConfig) -> Launch:
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=inputs.a.device)
    scales = (inputs.a_scale, inputs.b_scale)
    if inputs.scaling == "row":
        scales = (inputs.a_scale.reshape(-1), inputs.b_scale.reshape(-1))
    gemm = PersistentGemm(inputs.a, inputs.b, out, *scales, inputs.scaling, config, BlockScales(inputs),
                          problem.fp8_accum)  # fmt: skip
    return Launch(fn=gemm, params=config, out=out)


_tunable = tuning.Tunable("triton_persistent", search_space, _build, PersistentConfig)
register(
    Variant(
        name="triton_persistent",
        family="triton_persistent",
        dtypes=("fp16", "bf16", "fp8"),
        description="Triton persistent GEMM: one program per SM walking tiles in grouped order, operands and output "
        "through tensor descriptors (TMA), epilogue in two halves; fp8: per-tensor, row-wise or block scales, bf16 out",
        make=_tunable.make,
        supports=unsupported,
        tunable=_tunable,
        scalings=(*TRITON_SCALINGS, "row"),
        fp8_accums=TRITON_FP8_ACCUMS,
    )
)
