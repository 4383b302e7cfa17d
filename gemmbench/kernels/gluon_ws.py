"""Gluon GEMM for Hopper: a ring of TMA-filled stages, wgmma consumers, and a TMA-store epilogue.

out (M, N) = a (M, K) @ b (N, K)^T, as dense_dp.py.  Written in Gluon (triton.experimental.gluon), where the
kernel names its own warps, barriers and shared memory: what Triton's own compiler does not let a kernel say.
The schedules (config field SCHEDULE), each a step on the one before:

- "pipelined": one program per output tile, one partition; the TMA loads run STAGES-2 K steps ahead of async
  wgmma, which keeps one group in flight.
- "persistent": one program per SM, walking tiles in grouped order, the same loop per tile.
- "ws": persistent and warp-specialized: a one-warp producer partition fills the ring across tile boundaries
  (an mbarrier pair per stage: ready when its bytes landed, empty when its wgmma finished); one consumer
  partition of 4 warps, or 8 (cooperative: two warpgroups on one tile), runs wgmma and the epilogue.
- "pingpong": two 4-warp consumer partitions, each its own tile (even and odd tiles of the program), taking
  turns at their K loops, so one's epilogue runs while the other's wgmma keep the tensor cores busy, the way
  CUTLASS's Hopper ping-pong kernels do.
Both warp-specialized schedules can widen a tile by a second accumulator (BLOCK_N2: 128 + 32 = 160 columns).

fp8: FP8_PROMOTE K summed in the tensor cores' reduced-precision accumulator before each fp32 promotion
(warpgroup_mma's max_num_imprecise_acc; tile_loop.FP8_PROMOTE, the contract of cuBLAS without fast accumulation),
or none (fast accumulation, except where promotes() says); PROMOTE_OVERLAP: each K step's sum promoted in the K
loop, overlapped with the next step's wgmma.  Per-tensor or row-wise scales are applied in the epilogue; block
scales (1 x 128 activation groups, 128 x 128 weight blocks) to each K step's own sum in the consumer's K loop; bf16
out.

Triton 3.6's gluon.jit ignores TRITON_INTERPRET: the host side (configs, layouts, grid, register budgets,
descriptors) is tested on the CPU, the kernel on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import triton

from gemmbench import dtypes
from gemmbench.configs import tuning
from gemmbench.kernels.tile_loop import TRITON_SCALINGS, BlockScales, block_scaled, fp8_promote_every
from gemmbench.measure.device import on_the_gpu
from gemmbench.registry import Launch, Variant, register

try:  # the Gluon names this kernel is written against (supports() refuses a Triton whose Gluon differs)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    GLUON_IMPORT_ERROR: Optional[str] = None
except ImportError as exc:  # pragma: no cover - an older or newer Triton without these names
    GLUON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

# The Triton releases whose Gluon this kernel was written and tested against: Gluon is experimental and its API
# changes between releases (layouts computed by constexpr functions, accumulator tokens), so another release is
# refused rather than miscompiled.
GLUON_TRITON_RELEASES = ("3.6.",)
SCHEDULES = ("pipelined", "persistent", "ws", "pingpong")
SMEM_BYTES = 227 * 1024  # what one block may hold on the H100
PRODUCER_REGS = 40  # the producer warp holds addresses and counters only
CONSUMER_REGS = 232  # what each consumer thread may hold: ACC + fp8 promotion tile + scales, under 256
WARPGROUP = 4  # warps per warpgroup: registers are reallocated per warpgroup


if GLUON_IMPORT_ERROR is None:

    @gluon.jit
    def _tile_coords(tile, grid_m, grid_n, GROUP_M: gl.constexpr):
        """(pid_m, pid_n) of a tile in the grouped order: GROUP_M rows of tiles swept together, so the A rows and B
        columns that neighbouring programs read stay in L2."""
        per_group = GROUP_M * grid_n
        first_m = (tile // per_group) * GROUP_M
        rows = gl.minimum(grid_m - first_m, GROUP_M)
        within = tile % per_group
        return first_m + within % rows, within // rows

    @gluon.jit
    def _mma_step(a_smem, b_smem, acc, PROMOTE: gl.constexpr):
        """One async wgmma of a stage into acc; PROMOTE > 0 (fp8 precise): promoted into fp32 every PROMOTE K."""
        if PROMOTE > 0:
            acc = warpgroup_mma(a_smem, b_smem.permute((1, 0)), acc, is_async=True, max_num_imprecise_acc=PROMOTE)
        else:
            acc = warpgroup_mma(a_smem, b_smem.permute((1, 0)), acc, is_async=True)
        return acc

    @gluon.jit
    def _epilogue(acc, c_desc, c_smem, a_scale_ptr, b_scale_ptr, off_m, off_n, M, N, SCALE: gl.constexpr,
                  layout: gl.constexpr):  # fmt: skip
        """Scale the fp32 tile, cast it, and store it through shared memory with one TMA copy (which clips what lies
        past M and N); the previous tile's copy must have left c_smem first."""
        BM: gl.constexpr = c_desc.block_type.shape[0]
        BN: gl.constexpr = c_desc.block_type.shape[1]
        if SCALE == "tensor":
            acc = acc * (gl.load(a_scale_ptr) * gl.load(b_scale_ptr))
        elif SCALE == "row":
            rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
            cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
            sa = gl.load(a_scale_ptr + rows, mask=rows < M, other=0.0)
            sb = gl.load(b_scale_ptr + cols, mask=cols < N, other=0.0)
            acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        tma.store_wait(0)
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)

    @gluon.jit
    def _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, pos, off_m, off_n, k, pred):
        """TMA copies of one K step of A and B into ring position pos, counted on its ready barrier."""
        slot = pos % a_bufs.shape[0]
        bar = ready.index(slot)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(a_desc, [off_m, k], bar, a_bufs.index(slot), pred)
        tma.async_copy_global_to_shared(b_desc, [off_n, k], bar, b_bufs.index(slot), pred)

    @gluon.jit
    def single_partition_kernel(a_desc, b_desc, c_desc, a_scale_ptr, b_scale_ptr, M, N, K,
                                GROUP_M: gl.constexpr, STAGES: gl.constexpr, PROMOTE: gl.constexpr,
                                SCALE: gl.constexpr, layout: gl.constexpr):  # fmt: skip
        """The "pipelined" and "persistent" schedules: the grid says which (one program per tile, or per SM)."""
        BM: gl.constexpr = a_desc.block_type.shape[0]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        AHEAD: gl.constexpr = STAGES - 2  # the stage the wgmma in flight reads is not refilled under it
        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
        c_smem = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        grid_m = gl.cdiv(M, BM)
        grid_n = gl.cdiv(N, BN)
        k_steps = gl.cdiv(K, BK)
        base = 0  # ring position of this tile's first K step
        for tile in range(gl.program_id(0), grid_m * grid_n, gl.num_programs(0)):
            pid_m, pid_n = _tile_coords(tile, grid_m, grid_n, GROUP_M)
            off_m = pid_m * BM
            off_n = pid_n * BN
            for j in gl.static_range(AHEAD):
                _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, base + j, off_m, off_n, j * BK, j < k_steps)
            acc = gl.zeros([BM, BN], gl.float32, layout)
            for k in range(k_steps):
                ahead = k + AHEAD
                _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, base + ahead, off_m, off_n, ahead * BK,
                            ahead < k_steps)  # fmt: skip
                pos = base + k
                mbarrier.wait(ready.index(pos % STAGES), (pos // STAGES) & 1)
                acc = _mma_step(a_bufs.index(pos % STAGES), b_bufs.index(pos % STAGES), acc, PROMOTE)
                acc = warpgroup_mma_wait(1, deps=[acc])
            acc = warpgroup_mma_wait(0, deps=[acc])
            base += k_steps
            _epilogue(acc, c_desc, c_smem, a_scale_ptr, b_scale_ptr, off_m, off_n, M, N, SCALE, layout)
        tma.store_wait(0)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))

    @gluon.jit
    def _producer(a_desc, b_desc, b2_desc, ring, M, N, K, GROUP_M: gl.constexpr, BN2: gl.constexpr):
        """The producer warp: every K step of every tile of this program into the ring, in the order the consumers
        take them, each stage once its last reader released it.  BN2 > 0: each stage also holds the BN2 rows of B
        after the first BLOCK_N (a tile BLOCK_N + BN2 wide)."""
        a_bufs, b_bufs, b2_bufs, ready, empty = ring
        BM: gl.constexpr = a_desc.block_type.shape[0]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        STAGES: gl.constexpr = a_bufs.shape[0]
        grid_m = gl.cdiv(M, BM)
        grid_n = gl.cdiv(N, BN + BN2)
        k_steps = gl.cdiv(K, BK)
        pos = 0
        for tile in range(gl.program_id(0), grid_m * grid_n, gl.num_programs(0)):
            pid_m, pid_n = _tile_coords(tile, grid_m, grid_n, GROUP_M)
            off_n = pid_n * (BN + BN2)
            for k in range(k_steps):
                slot = pos % STAGES
                # barriers start with phase 1 complete: the first pass over the ring does not wait
                mbarrier.wait(empty.index(slot), ((pos // STAGES) & 1) ^ 1)
                if BN2 > 0:
                    bar = ready.index(slot)
                    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes
                                    + b2_desc.block_type.nbytes)  # fmt: skip
                    tma.async_copy_global_to_shared(a_desc, [pid_m * BM, k * BK], bar, a_bufs.index(slot))
                    tma.async_copy_global_to_shared(b_desc, [off_n, k * BK], bar, b_bufs.index(slot))
                    tma.async_copy_global_to_shared(b2_desc, [off_n + BN, k * BK], bar, b2_bufs.index(slot))
                else:
                    _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, pos, pid_m * BM, off_n, k * BK, True)
                pos += 1

    @gluon.jit
    def _add_step(acc, part, k, bscales, off_m, off_n, M, N, BK: gl.constexpr, SCALE: gl.constexpr,
                  layout: gl.constexpr):  # fmt: skip
        """acc + one K step's partial sum; block scales: the partial times its rows' activation scales and its
        columns' weight scales of the 128-K group the step lies in (column n: weight block row n // 128)."""
        if SCALE == "block":
            a_bs, b_bs, s_am, s_ak, s_bn, s_bk = bscales
            BM: gl.constexpr = acc.shape[0]
            BN: gl.constexpr = acc.shape[1]
            group = (k * BK) // 128
            rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
            cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
            sa = gl.load(a_bs + rows * s_am + group * s_ak, mask=rows < M, other=0.0)
            sb = gl.load(b_bs + (cols // 128) * s_bn + group * s_bk, mask=cols < N, other=0.0)
            return acc + part * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        else:
            return acc + part

    @gluon.jit
    def _k_loop_overlapped(a_bufs, b_bufs, ready, empty, base, k_steps, acc, bscales, off_m, off_n, M, N,
                           SCALE: gl.constexpr, layout: gl.constexpr):  # fmt: skip
        """fp8 with each K step's sum promoted on its own: each step's wgmma starts a partial sum of its own (two,
        alternating), and the finished one is added into the fp32 tile (block scales: scaled first) while the
        other's wgmma runs; Triton's max_num_imprecise_acc instead drains the wgmma group before each add.  Two K
        steps a trip, so each partial keeps its registers (a wgmma accumulates in place)."""
        STAGES: gl.constexpr = a_bufs.shape[0]
        BK: gl.constexpr = a_bufs.shape[2]
        pa = gl.zeros_like(acc)
        pb = gl.zeros_like(acc)
        for k in range(0, k_steps, 2):
            pos = base + k
            mbarrier.wait(ready.index(pos % STAGES), (pos // STAGES) & 1)
            pa = warpgroup_mma(a_bufs.index(pos % STAGES), b_bufs.index(pos % STAGES).permute((1, 0)), pa,
                               use_acc=False, is_async=True)  # fmt: skip
            pa, pb = warpgroup_mma_wait(1, deps=[pa, pb])
            if k > 0:  # the step before's partial
                acc = _add_step(acc, pb, k - 1, bscales, off_m, off_n, M, N, BK, SCALE, layout)
            mbarrier.arrive(empty.index((pos + STAGES - 1) % STAGES), count=1, pred=k > 0)
            if k + 1 < k_steps:
                nxt = pos + 1
                mbarrier.wait(ready.index(nxt % STAGES), (nxt // STAGES) & 1)
                pb = warpgroup_mma(a_bufs.index(nxt % STAGES), b_bufs.index(nxt % STAGES).permute((1, 0)), pb,
                                   use_acc=False, is_async=True)  # fmt: skip
                pa, pb = warpgroup_mma_wait(1, deps=[pa, pb])
                acc = _add_step(acc, pa, k, bscales, off_m, off_n, M, N, BK, SCALE, layout)
                mbarrier.arrive(empty.index(pos % STAGES), count=1)
        pa, pb = warpgroup_mma_wait(0, deps=[pa, pb])
        if k_steps % 2 == 1:
            acc = _add_step(acc, pa, k_steps - 1, bscales, off_m, off_n, M, N, BK, SCALE, layout)
        else:
            acc = _add_step(acc, pb, k_steps - 1, bscales, off_m, off_n, M, N, BK, SCALE, layout)
        mbarrier.arrive(empty.index((base + k_steps - 1) % STAGES), count=1)
        return acc

    @gluon.jit
    def _consumer(ring, turns, c_desc, c2_desc, c_smem, c2_smem, a_scale_ptr, b_scale_ptr, bscales, M, N, K,
                  FIRST: gl.constexpr, EVERY: gl.constexpr, GROUP_M: gl.constexpr, PROMOTE: gl.constexpr,
                  OVERLAP: gl.constexpr, SCALE: gl.constexpr, layout: gl.constexpr, layout2: gl.constexpr,
                  BN2: gl.constexpr):  # fmt: skip
        """A consumer partition: the program's tiles FIRST, FIRST + EVERY, ... (its ring positions follow: each
        tile takes k_steps of them), each summed by async wgmma and stored by this partition's epilogue.  A stage
        goes back to the producer once the wgmma after the one reading it has been issued and the reader done.
        Two consumers take turns at their K loops (turns: one barrier each, the other arrives on it), so neither
        waits on a ring position more than one lap ahead: an mbarrier's phase parity tells one lap from the next
        only.  BN2 > 0: a second accumulator for the tile's last BN2 columns (register tensors are powers of two:
        a 128 + 32 wide tile is two of them)."""
        a_bufs, b_bufs, b2_bufs, ready, empty = ring
        BM: gl.constexpr = c_desc.block_type.shape[0]
        BN: gl.constexpr = c_desc.block_type.shape[1]
        BK: gl.constexpr = a_bufs.shape[2]
        STAGES: gl.constexpr = a_bufs.shape[0]
        grid_m = gl.cdiv(M, BM)
        grid_n = gl.cdiv(N, BN + BN2)
        k_steps = gl.cdiv(K, BK)
        step = gl.num_programs(0)
        base = FIRST * k_steps
        turn = 0
        for tile in range(gl.program_id(0) + FIRST * step, grid_m * grid_n, EVERY * step):
            pid_m, pid_n = _tile_coords(tile, grid_m, grid_n, GROUP_M)
            acc = gl.zeros([BM, BN], gl.float32, layout)
            if BN2 > 0:
                acc2 = gl.zeros([BM, BN2], gl.float32, layout2)
            if EVERY > 1:  # the first consumer's first turn finds its barrier's phase 1 complete, as created
                mbarrier.wait(turns.index(FIRST), (turn & 1) ^ (1 - FIRST))
            if OVERLAP:
                acc = _k_loop_overlapped(a_bufs, b_bufs, ready, empty, base, k_steps, acc, bscales, pid_m * BM,
                                         pid_n * (BN + BN2), M, N, SCALE, layout)  # fmt: skip
            else:
                for k in range(k_steps):
                    pos = base + k
                    mbarrier.wait(ready.index(pos % STAGES), (pos // STAGES) & 1)
                    acc = _mma_step(a_bufs.index(pos % STAGES), b_bufs.index(pos % STAGES), acc, PROMOTE)
                    if BN2 > 0:
                        acc2 = _mma_step(a_bufs.index(pos % STAGES), b2_bufs.index(pos % STAGES), acc2, PROMOTE)
                        acc, acc2 = warpgroup_mma_wait(2, deps=[acc, acc2])
                    else:
                        acc = warpgroup_mma_wait(1, deps=[acc])
                    mbarrier.arrive(empty.index((pos + STAGES - 1) % STAGES), count=1, pred=k > 0)
                if BN2 > 0:
                    acc, acc2 = warpgroup_mma_wait(0, deps=[acc, acc2])
                else:
                    acc = warpgroup_mma_wait(0, deps=[acc])
                mbarrier.arrive(empty.index((base + k_steps - 1) % STAGES), count=1)
            if EVERY > 1:
                mbarrier.arrive(turns.index(1 - FIRST), count=1)
                turn += 1
            base += EVERY * k_steps
            off_n = pid_n * (BN + BN2)
            _epilogue(acc, c_desc, c_smem, a_scale_ptr, b_scale_ptr, pid_m * BM, off_n, M, N, SCALE, layout)
            if BN2 > 0:
                _epilogue(acc2, c2_desc, c2_smem, a_scale_ptr, b_scale_ptr, pid_m * BM, off_n + BN, M, N, SCALE,
                          layout2)  # fmt: skip
        tma.store_wait(0)

    @gluon.jit
    def warp_specialized_kernel(a_desc, b_desc, b2_desc, c_desc, c2_desc, a_scale_ptr, b_scale_ptr, a_bs_ptr, b_bs_ptr,
                                s_am, s_ak, s_bn, s_bk, M, N, K,
                                GROUP_M: gl.constexpr, STAGES: gl.constexpr, PROMOTE: gl.constexpr,
                                SCALE: gl.constexpr, layout: gl.constexpr, layout2: gl.constexpr, BN2: gl.constexpr,
                                CONSUMERS: gl.constexpr, OVERLAP: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                PRODUCER_REGS: gl.constexpr):  # fmt: skip
        """The "ws" (CONSUMERS 1) and "pingpong" (CONSUMERS 2) schedules: a producer warp and consumer partitions
        sharing one ring of STAGES stages; each consumer stores through a tile of shared memory of its own.  Where
        BN2 is 0, b2_desc and c2_desc are b_desc and c_desc, never read."""
        BM: gl.constexpr = a_desc.block_type.shape[0]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
        if BN2 > 0:
            b2_bufs = gl.allocate_shared_memory(b2_desc.dtype, [STAGES, BN2, BK], b2_desc.layout)
            c20 = gl.allocate_shared_memory(c2_desc.dtype, [BM, BN2], c2_desc.layout)
        else:
            b2_bufs = b_bufs
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(turns.index(i), count=1)
        c0 = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
        if BN2 == 0:
            c20 = c0
        ring = (a_bufs, b_bufs, b2_bufs, ready, empty)
        bscales = (a_bs_ptr, b_bs_ptr, s_am, s_ak, s_bn, s_bk)  # SCALE "block": (M, K/128) and (N/128, K/128)
        # Gluon takes each partition's function written out in the call (a tuple variable holds no function)
        if CONSUMERS == 1:
            gl.warp_specialize(
                [
                    (_consumer, (ring, turns, c_desc, c2_desc, c0, c20, a_scale_ptr, b_scale_ptr, bscales, M, N, K, 0, 1,
                                 GROUP_M, PROMOTE, OVERLAP, SCALE, layout, layout2, BN2)),
                    (_producer, (a_desc, b_desc, b2_desc, ring, M, N, K, GROUP_M, BN2)),
                ],
                [1],
                [PRODUCER_REGS],
            )  # fmt: skip
        else:
            c1 = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
            if BN2 > 0:
                c21 = gl.allocate_shared_memory(c2_desc.dtype, [BM, BN2], c2_desc.layout)
            else:
                c21 = c1
            gl.warp_specialize(
                [
                    (_consumer, (ring, turns, c_desc, c2_desc, c0, c20, a_scale_ptr, b_scale_ptr, bscales, M, N, K, 0, 2,
                                 GROUP_M, PROMOTE, OVERLAP, SCALE, layout, layout2, BN2)),
                    (_consumer, (ring, turns, c_desc, c2_desc, c1, c21, a_scale_ptr, b_scale_ptr, bscales, M, N, K, 1, 2,
                                 GROUP_M, PROMOTE, OVERLAP, SCALE, layout, layout2, BN2)),
                    (_producer, (a_desc, b_desc, b2_desc, ring, M, N, K, GROUP_M, BN2)),
                ],
                [4, 1],  # WARPGROUP: a jit function reads no module constant
                [CONSUMER_REGS, PRODUCER_REGS],
            )  # fmt: skip
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))
            mbarrier.invalidate(empty.index(i))


def gluon_unsupported_reason() -> Optional[str]:
    """Why this Triton's Gluon is not the one the kernel was written for, or None."""
    if GLUON_IMPORT_ERROR is not None:
        return f"this Triton's Gluon lacks what the kernel uses ({GLUON_IMPORT_ERROR})"
    if not triton.__version__.startswith(GLUON_TRITON_RELEASES):
        written = ", ".join(r + "x" for r in GLUON_TRITON_RELEASES)
        return f"written for Gluon in Triton {written}; this is Triton {triton.__version__} (Gluon's API changes)"
    return None


# ---------------------------------------------------------------- configs


@dataclass(frozen=True, kw_only=True)
class GluonConfig(tuning.KernelConfig):
    """A config of the Gluon kernel; its fields are its JSON keys, in the order they are written.  num_warps: the
    warps of one consumer partition (ping-pong: of each of its two)."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8
    num_warps: int
    num_stages: int
    SCHEDULE: str = field(default="pingpong", metadata={"choices": SCHEDULES})
    FP8_PROMOTE: Optional[int] = None  # fp8 precise: K summed before fp32 promotion; None: tile_loop.FP8_PROMOTE
    # fp8 precise, warp-specialized schedules: promote once per K step in the K loop, overlapped with the next
    # step's wgmma (_k_loop_overlapped), rather than in Triton's wgmma lowering every FP8_PROMOTE
    PROMOTE_OVERLAP: bool = False
    # warp-specialized schedules: a second accumulator of BLOCK_N2 columns beside BLOCK_N, so that a tile can be
    # 128 + 32 = 160 wide (cuBLAS's width for N 1280: 8 tiles across, not 10 or 5); Triton's tensors are powers of two
    BLOCK_N2: int = field(default=0, metadata={"choices": (0, 16, 32, 64)})


def wgmma_layout_params(bm: int, bn: int, warps: int, elem_bits: int) -> tuple[list[int], list[int]]:
    """(warps_per_cta, instr_shape) of the fp32 accumulator of a (bm, bn) tile on `warps` warps: the warps stacked
    along M, 16 rows each, then along N; the wgmma instruction as wide along N as the warps' share of the tile
    allows (at most 256), K 32 bytes deep."""
    m_warps = max(WARPGROUP, min(warps, bm // 16))
    n_warps = warps // m_warps
    n = min(256, bn // n_warps)
    return [m_warps, n_warps], [16, n, 256 // elem_bits]


def partition_warps(config: GluonConfig) -> tuple[int, list[int]]:
    """(the default partition's warps, the worker partitions' warps) of a warp-specialized schedule."""
    if config.SCHEDULE == "pingpong":
        return WARPGROUP, [WARPGROUP, 1]
    return config.num_warps, [1]


def max_registers(config: GluonConfig) -> Optional[int]:
    """The kernel's register limit (maxnreg): what lets the consumers be given CONSUMER_REGS and the producer
    PRODUCER_REGS when the registers are redistributed, warps counted in whole warpgroups; None for one partition."""
    if config.SCHEDULE not in ("ws", "pingpong"):
        return None
    default, workers = partition_warps(config)
    consumer_warps = default + sum(w for w in workers if w >= WARPGROUP)
    producer_warps = WARPGROUP  # the producer's one warp takes a whole warpgroup's registers
    total = 32 * (consumer_warps + producer_warps)
    return (CONSUMER_REGS * 32 * consumer_warps + PRODUCER_REGS * 32 * producer_warps) // total


def smem_bytes(config: GluonConfig, elem: int, out_elem: int = 2) -> int:
    """Shared memory of a config: its ring of A and B stages and each consumer's output tile."""
    width = config.BLOCK_N + config.BLOCK_N2
    stages = config.num_stages * (config.BLOCK_M + width) * config.BLOCK_K * elem
    consumers = 2 if config.SCHEDULE == "pingpong" else 1
    return stages + consumers * config.BLOCK_M * width * out_elem


def accumulator_registers(config: GluonConfig, fp8_precise: bool) -> int:
    """fp32 registers a consumer thread holds for its tile, plus, for fp8 promoted every FP8_PROMOTE, the
    reduced-precision partial of one wgmma instruction (64 rows by its N) that is added into it."""
    warps = WARPGROUP if config.SCHEDULE == "pingpong" else config.num_warps
    regs = config.BLOCK_M * (config.BLOCK_N + config.BLOCK_N2) // (32 * warps)
    if fp8_precise and config.PROMOTE_OVERLAP:
        return 3 * regs  # the fp32 tile and two partial sums
    if fp8_precise:
        (_, n_warps), (_, n, _) = wgmma_layout_params(config.BLOCK_M, config.BLOCK_N, warps, 8)
        regs += 64 * n // (32 * WARPGROUP)
    return regs


def fits(config: GluonConfig, elem: int, fp8_precise: bool, block: bool = False) -> bool:
    """A config the SM can hold: its shared memory within SMEM_BYTES, its accumulators within the consumer's
    registers with room for addresses and scales, BLOCK_M whole warpgroup wgmmas (64 rows each)."""
    if config.BLOCK_M % 64 or config.num_stages < 2:
        return False
    if config.BLOCK_N2 and (config.SCHEDULE not in ("ws", "pingpong") or config.PROMOTE_OVERLAP or block):
        return False  # only the warp-specialized K loop without overlapped promotion has the second accumulator
    if block and (config.SCHEDULE not in ("ws", "pingpong") or not config.PROMOTE_OVERLAP):
        return False  # block scales multiply each K step's own sum: the overlapped K loop's partials
    # registers left for addresses, barriers' phases and scales: 40 under the consumers' CONSUMER_REGS; one
    # partition, 255 a thread, keeps 192 for accumulators (docs/BENCHMARKS.md, "The Gluon kernel": what spilled)
    budget = CONSUMER_REGS - 40 if config.SCHEDULE in ("ws", "pingpong") else 192
    return smem_bytes(config, elem) <= SMEM_BYTES and accumulator_registers(config, fp8_precise) <= budget


# Fast accumulation is a bound on the error, not a demand: where cuBLAS's fast kernels are accurate, which the fast
# tolerance follows, the kernel promotes anyway: at decode M, and where the output has fewer 128 x 128 tiles than
# the GPU has SMs (cuBLAS splits K there).  One wgmma chain over all of K drifts outside that tolerance in both
# (docs/BENCHMARKS.md, "The Gluon kernel": fp8 fast where cuBLAS is accurate).
PROMOTE_FAST_UP_TO_M = 64


def promotes(problem) -> bool:
    """Whether the kernel promotes its fp8 sums into fp32 for a problem: the precise contract always; fast at
    M <= PROMOTE_FAST_UP_TO_M and on outputs of fewer 128 x 128 tiles than SMs."""
    if problem.dtype != "fp8":
        return False
    if problem.fp8_accum != dtypes.FAST_FP8_ACCUM or problem.M <= PROMOTE_FAST_UP_TO_M:
        return True
    return triton.cdiv(problem.M, 128) * triton.cdiv(problem.N, 128) < tuning.sm_count()


def search_space(problem, on_gpu: bool, full: bool = True) -> list[GluonConfig]:
    """Candidates for `gemmbench tune` (full) or for a run that finds no stored config (the first few)."""
    return _space(problem, full, SCHEDULES[2:])


# The quick candidates are each contract's fastest on the H100 (docs/BENCHMARKS.md, "The Gluon kernel, step by
# step"): 16-bit and fp8 fast, cooperative 128 x 256 (8 warps, 3 stages) and ping-pong 128 x 128; fp8 precise,
# cooperative 256 x 128 (each warpgroup promotes its own 128 x 128 half) and 128 x 128; and for every contract
# the 128 + 32 = 160 wide cooperative tile, which fills the 132 SMs where N is 1280 (8 tiles across).  128 x 256
# with fp8 promotion needs 256 registers a thread (it spills: fits() keeps it out); four-warp cooperative tiles
# were slower than the eight-warp ones and stay out of the quick list.
_WIDE = {"BLOCK_N2": 32}
_QUICK = {
    "16-bit": (("ws", 128, 256, 8, 3, {}), ("pingpong", 128, 128, 4, 5, {}), ("ws", 128, 128, 8, 4, _WIDE)),
    "fast": (("ws", 128, 256, 8, 3, {}), ("pingpong", 128, 128, 4, 4, {}), ("ws", 128, 128, 8, 4, _WIDE)),
    "precise": (("ws", 256, 128, 8, 3, {}), ("ws", 128, 128, 8, 4, {}), ("ws", 128, 128, 8, 4, _WIDE)),
    # block scales scale each K step's own sum: the overlapped loop's partials, whose three tiles fit 128 x 128 on
    # 8 warps or 64 x 128 on 4
    "block": (
        ("ws", 128, 128, 8, 4, {"PROMOTE_OVERLAP": True}),
        ("pingpong", 64, 128, 4, 6, {"PROMOTE_OVERLAP": True}),
    ),
}
# the one-partition steps: 128 x 256 on 8 warps, except with fp8 promotion (256 registers a thread: it spills),
# where 128 x 128 on 4 warps (192: it does not)
_STEP_QUICK = {"16-bit": (128, 256, 8, 3), "fast": (128, 256, 8, 3), "precise": (128, 128, 4, 4)}


def _space(problem, full: bool, schedules: tuple[str, ...]) -> list[GluonConfig]:
    fp8 = problem.dtype == "fp8"
    precise = promotes(problem)
    block = block_scaled(problem)
    elem, bk = (1, 128) if fp8 else (2, 64)
    tile = GluonConfig.tile
    contract = "block" if block else ("precise" if precise else "fast") if fp8 else "16-bit"
    quick = [tile(bm, bn, bk, w, st, SCHEDULE=s, **x) for s, bm, bn, w, st, x in _QUICK[contract] if s in schedules]
    if contract in _STEP_QUICK:
        bm, bn, warps, stages = _STEP_QUICK[contract]
        quick += [tile(bm, bn, bk, warps, stages, SCHEDULE=s) for s in schedules if s in ("pipelined", "persistent")]
    quick = [c for c in quick if fits(c, elem, precise, block)]
    if not full:
        return quick
    more = [
        tile(bm, bn, bk, warps, stages, SCHEDULE=schedule, PROMOTE_OVERLAP=overlap, BLOCK_N2=bn2)
        for schedule in schedules
        for bm in (64, 128, 256)
        for bn in (64, 128, 256)
        for bn2 in ((0, 32) if bn == 128 and schedule in ("ws", "pingpong") else (0,))
        for warps in ((4,) if schedule == "pingpong" else (4, 8))
        for stages in (3, 4, 5, 6)
        for overlap in ((False, True) if precise and schedule in ("ws", "pingpong") else (False,))
    ]
    return quick + [c for c in more if c not in quick and fits(c, elem, precise, block)]


# ---------------------------------------------------------------- launch


def unsupported(problem, device) -> Optional[str]:
    """Why the Gluon kernel cannot run a problem here, or None: it needs Hopper's wgmma and TMA (compute
    capability 9.x: Blackwell has no wgmma), the Gluon it was written for, and rows of A, B and the output on
    16-byte boundaries (TMA).  The scalings it applies are declared (Variant.scalings)."""
    if device.kind != "cuda":
        return "Gluon kernels run on a CUDA GPU only (Triton's gluon.jit has no CPU interpreter)"
    if device.capability[0] != 9:
        return f"wgmma is Hopper's (compute capability 9.x); {device.name} has {device.capability}"
    if device.stand_in:  # a GPU described from the parts table: this machine's Triton says nothing about its own
        return alignment_reason(problem) or on_the_gpu(device, "whether its Triton's Gluon is the kernel's")
    reason = gluon_unsupported_reason()
    if reason:
        return reason
    return alignment_reason(problem)


def alignment_reason(problem) -> Optional[str]:
    """Why TMA cannot read the operands or write the output of a problem (16-byte rows), or None."""
    elem = 1 if problem.dtype == "fp8" else 2
    if (problem.K * elem) % 16:
        return f"K={problem.K}: rows of {problem.K * elem} bytes are not 16-byte aligned, as TMA needs"
    if (problem.N * 2) % 16:
        return f"N={problem.N}: output rows of {problem.N * 2} bytes are not 16-byte aligned, as TMA needs"
    return None


def _gl_dtype(t: torch.Tensor):
    return {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float8_e4m3fn: gl.float8e4nv}[t.dtype]


def descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: GluonConfig) -> tuple:
    """TMA descriptors of A ([BLOCK_M, BLOCK_K] blocks), B ([BLOCK_N, BLOCK_K]), B's next BLOCK_N2 rows, the output
    ([BLOCK_M, BLOCK_N]) and its next BLOCK_N2 columns, each in the shared-memory layout with the widest swizzle
    its rows allow; without BLOCK_N2 the second B and output descriptors are the first ones (never read)."""
    bm, bn, bk, bn2 = config.BLOCK_M, config.BLOCK_N, config.BLOCK_K, config.BLOCK_N2

    def made(t: torch.Tensor, block: list[int]):
        return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(t)))

    da, db, dc = made(a, [bm, bk]), made(b, [bn, bk]), made(out, [bm, bn])
    return da, db, made(b, [bn2, bk]) if bn2 else db, dc, made(out, [bm, bn2]) if bn2 else dc


def accumulator_layouts(config: GluonConfig, elem_bits: int) -> tuple:
    """The wgmma layouts of the consumer's accumulators: BLOCK_N's, and BLOCK_N2's (the first where it is 0)."""
    warps = WARPGROUP if config.SCHEDULE == "pingpong" else config.num_warps

    def layout(bn: int):
        warps_per_cta, instr = wgmma_layout_params(config.BLOCK_M, bn, warps, elem_bits)
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=warps_per_cta, instr_shape=instr)

    first = layout(config.BLOCK_N)
    return first, layout(config.BLOCK_N2) if config.BLOCK_N2 else first


def programs(config: GluonConfig, M: int, N: int, sms: int) -> int:
    """Grid size: one program per tile ("pipelined"), else one per SM at most (persistent schedules)."""
    tiles = triton.cdiv(M, config.BLOCK_M) * triton.cdiv(N, config.BLOCK_N + config.BLOCK_N2)
    return tiles if config.SCHEDULE == "pipelined" else max(1, min(tiles, sms))


class GluonGemm:
    """The descriptors, layout and grid of one (problem, inputs, config), and a closure that launches it once."""

    def __init__(self, a, b, out, a_scale, b_scale, scale: str, config: GluonConfig, promote: int,
                 blocks: Optional[BlockScales] = None):  # fmt: skip
        M, K = a.shape
        N = b.shape[0]
        self.config, self.out, self.shape = config, out, (M, N, K)
        self.descs = descriptors(a, b, out, config)
        self.scales = (a_scale, b_scale) if scale in ("tensor", "row") else (out, out)
        self.scale, self.promote = scale, promote
        on = blocks is not None and blocks.on  # (M, K/128) and (N/128, K/128) fp32 scales, with their strides
        self.blocks = (blocks.a, blocks.b, *blocks.strides) if on else (out, out, 0, 0, 0, 0)
        self.layouts = accumulator_layouts(config, 8 * a.element_size())
        self.programs = programs(config, M, N, tuning.sm_count())
        self.compiled = None  # the CompiledKernel of the last launch: registers and spills

    def resources(self) -> Optional[dict]:
        """What ptxas reported for the kernel last launched (None before the first launch): registers a thread
        (the kernel's limit where the partitions redistribute them) and bytes spilled."""
        if self.compiled is None:
            return None
        return {"registers": self.compiled.n_regs, "spills": self.compiled.n_spills}

    def __call__(self) -> torch.Tensor:
        cfg, (M, N, K) = self.config, self.shape
        a_desc, b_desc, b2_desc, c_desc, c2_desc = self.descs
        common = dict(GROUP_M=cfg.GROUP_M, STAGES=cfg.num_stages, PROMOTE=self.promote, SCALE=self.scale,
                      layout=self.layouts[0])  # fmt: skip
        if cfg.SCHEDULE in ("pipelined", "persistent"):
            self.compiled = single_partition_kernel[(self.programs,)](
                a_desc, b_desc, c_desc, *self.scales, M, N, K, **common, num_warps=cfg.num_warps
            )
        else:
            self.compiled = warp_specialized_kernel[(self.programs,)](
                a_desc, b_desc, b2_desc, c_desc, c2_desc, *self.scales, *self.blocks, M, N, K, **common,
                layout2=self.layouts[1],
                BN2=cfg.BLOCK_N2, CONSUMERS=2 if cfg.SCHEDULE == "pingpong" else 1,
                OVERLAP=cfg.PROMOTE_OVERLAP and self.promote > 0 or self.scale == "block", CONSUMER_REGS=CONSUMER_REGS,
                PRODUCER_REGS=PRODUCER_REGS, num_warps=partition_warps(cfg)[0], maxnreg=max_registers(cfg),
            )  # fmt: skip
        return self.out


def _build(problem, inputs, config: GluonConfig) -> Launch:
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=inputs.a.device)
    a_scale, b_scale, scale = inputs.a_scale, inputs.b_scale, inputs.scaling
    blocks = BlockScales(inputs)
    if a_scale is None:
        scale = "none"
    elif blocks.on:
        blocks.check(config.BLOCK_K)
        scale = "block"
    elif scale == "row":
        a_scale, b_scale = a_scale.reshape(-1), b_scale.reshape(-1)
    promote = fp8_promote_every(
        inputs.a, config, dtypes.REFERENCE_FP8_ACCUM if promotes(problem) else problem.fp8_accum
    )
    gemm = GluonGemm(inputs.a, inputs.b, out, a_scale, b_scale, scale, config, promote or 0, blocks)
    return Launch(fn=gemm, params=config, out=out, resources=gemm.resources)


def _register(name: str, schedules: tuple[str, ...], what: str, scalings: tuple[str, ...]) -> None:
    def space(problem, on_gpu: bool, full: bool = True) -> list[GluonConfig]:
        return _space(problem, full, schedules)

    tunable = tuning.Tunable(name, space, _build, GluonConfig)
    register(
        Variant(
            name=name,
            family="gluon",
            dtypes=("fp16", "bf16", "fp8"),
            description=f"Gluon GEMM (Hopper): {what}; TMA operands and output, wgmma; fp8: {', '.join(scalings)} "
            "scales, bf16 out",
            make=tunable.make,
            supports=unsupported,
            tunable=tunable,
            scalings=scalings,
            fp8_accums=("precise", "fast"),
            by_default=False,  # run when named: below cuBLAS where a default run looks (docs/BENCHMARKS.md)
        )
    )


_register(
    "gluon_ws",
    SCHEDULES[2:],
    "persistent, a producer warp and ping-pong or cooperative consumers",
    TRITON_SCALINGS + ("row",),
)
_register(
    "gluon_persistent", ("persistent",), "persistent, one partition, pipelined TMA loads (a step)", ("tensor", "row")
)
_register("gluon_pipelined", ("pipelined",), "one program per tile, pipelined TMA loads (a step)", ("tensor", "row"))
