"""The Gluon GEMM's kernels (device code); gemmbench/kernels/gluon_ws.py launches them (their configs and budgets
are gluon_ws_config.py's, their search space gluon_ws_space.py's), gluon_ws_promote.py holds the K loops that
promote fp8 by themselves, gluon_ws_split.py split-K's units and meeting.

out (M, N) = a (M, K) @ b (N, K)^T.  The schedules (config field SCHEDULE), each a step on the one before:

- "pipelined": one program per output tile, one partition; the TMA loads run STAGES-2 K steps ahead of async
  wgmma, which keeps one group in flight.
- "persistent": one program per SM, walking tiles in grouped order, the same loop per tile.
- "ws": persistent and warp-specialized: a one-warp producer partition fills the ring across tile boundaries
  (an mbarrier pair per stage: ready when its bytes landed, empty when its wgmma finished); one consumer
  partition of 4 warps, or 8 (cooperative: two warpgroups on one tile), runs wgmma and the epilogue.
- "pingpong": two 4-warp consumer partitions, each its own tile (even and odd tiles of the program), taking
  turns at their K loops, so one's epilogue runs while the other's wgmma keep the tensor cores busy, the way
  CUTLASS's Hopper ping-pong kernels do.
- "halves": two 4-warp consumer partitions on the two row halves of every tile, each running its own K loop (fp8
  promoted in row waves: gluon_ws_promote.k_loop_waves, with two waves or block scales k_loop_waves_peeled; in turns
  at each wave's wgmma where the config's TURNS says, by default with block scales), so one's promotion runs under
  the other's wgmma; unpromoted, Triton's plain K loop on each half, neither warpgroup waiting on the other's.
Each warp-specialized schedule can widen a tile by a second accumulator (BLOCK_N2: 128 + 32 = 160 or 64 + 16 = 80
columns; the waves hold one per wave).  Per-tensor and row-wise scales are applied in the epilogue; block scales to
each K step's own sum; bf16 out.

Each jit signature is grouped by role, a commented line each.  Triton 3.6's gluon.jit ignores TRITON_INTERPRET: this
code runs on the GPU only (tests/test_gpu_gluon_ws.py).
"""

from __future__ import annotations

from gemmbench.kernels import gluon_api

if gluon_api.GLUON_IMPORT_ERROR is None:
    from gemmbench.kernels.gluon_api import (
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        tma,
        tma_load,
        tma_store,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from gemmbench.kernels.gluon_ws_promote import (
        epilogue_waves,
        k_loop_lagged,
        k_loop_overlapped,
        k_loop_waves,
        k_loop_waves_peeled,
        rows_of,
        scaled,
        stage_block_scales,
    )
    from gemmbench.kernels.gluon_ws_split import meet, unit_work, units_end

    # fmt: off

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
    def _epilogue(
        acc,                                                     # the fp32 tile
        c_desc, c_smem,                                          # output: TMA descriptor and staging tile
        a_scale_ptr, b_scale_ptr,                                # scales: per tensor or per row
        off_m, off_n, M, N,                                      # the tile's first row and column; sizes
        SCALE: gl.constexpr,                                     # which scales
    ):
        """Scale the fp32 tile, cast it, and store it through shared memory with one TMA copy (which clips what lies
        past M and N); the previous tile's copy must have left c_smem first."""
        acc = scaled(acc, a_scale_ptr, b_scale_ptr, off_m, off_n, M, N, SCALE)
        tma.store_wait(0)
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma_store(c_desc, [off_m, off_n], c_smem)

    @gluon.jit
    def _load_stage(
        a_desc, b_desc,                                          # operands: TMA descriptors
        a_bufs, b_bufs, ready,                                   # shared memory: the stages, their ready barriers
        pos, off_m, off_n, k, pred,                              # ring position, block offsets, whether to load
    ):
        """TMA copies of one K step of A and B into ring position pos, counted on its ready barrier."""
        slot = pos % a_bufs.shape[0]
        bar = ready.index(slot)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
        tma_load(a_desc, [off_m, k], bar, a_bufs.index(slot), pred)
        tma_load(b_desc, [off_n, k], bar, b_bufs.index(slot), pred)

    @gluon.jit
    def single_partition_kernel(
        a_desc, b_desc, c_desc,                                  # operands and output: TMA descriptors
        a_scale_ptr, b_scale_ptr,                                # scales: per tensor or per row
        M, N, K,                                                 # sizes
        GROUP_M: gl.constexpr, STAGES: gl.constexpr,             # schedule
        PROMOTE: gl.constexpr, SCALE: gl.constexpr,              # fp8: promotion, which scales
        layout: gl.constexpr,                                    # meta: the accumulator's layout
    ):
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
                            ahead < k_steps)
                pos = base + k
                mbarrier.wait(ready.index(pos % STAGES), (pos // STAGES) & 1)
                acc = _mma_step(a_bufs.index(pos % STAGES), b_bufs.index(pos % STAGES), acc, PROMOTE)
                acc = warpgroup_mma_wait(1, deps=[acc])
            acc = warpgroup_mma_wait(0, deps=[acc])
            base += k_steps
            _epilogue(acc, c_desc, c_smem, a_scale_ptr, b_scale_ptr, off_m, off_n, M, N, SCALE)
        tma.store_wait(0)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))

    @gluon.jit
    def _producer(
        a_desc, b_desc, b2_desc,                                 # operands: TMA descriptors
        ring, bscales,                                           # shared memory: the stages and their barriers;
                                                                 # block scales: pointers and strides
        M, N, K, k_per, whole,                                   # sizes; K steps of a split, tiles run whole
        GROUP_M: gl.constexpr, SPLITS: gl.constexpr,             # schedule
        STAGED: gl.constexpr,                                    # block scales copied into each stage
        BN2: gl.constexpr,                                       # meta: the second accumulator's width
    ):
        """The producer warp: every K step of every unit (a tile, or a split of one) of this program into the ring,
        in the order the consumers take them, each stage once its last reader released it.  BN2 > 0: each stage also
        holds the BN2 rows of B after the first BLOCK_N (a tile BLOCK_N + BN2 wide).  STAGED: each stage also holds
        its K step's block scales (gluon_ws_promote.stage_block_scales)."""
        a_bufs, b_bufs, b2_bufs, ready, empty, a_sc, b_sc = ring
        BM: gl.constexpr = a_desc.block_type.shape[0]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        STAGES: gl.constexpr = a_bufs.shape[0]
        grid_m = gl.cdiv(M, BM)
        grid_n = gl.cdiv(N, BN + BN2)
        k_steps = gl.cdiv(K, BK)
        pos = 0
        for unit in range(gl.program_id(0), units_end(grid_m * grid_n, whole, k_steps, SPLITS), gl.num_programs(0)):
            tile, k_first, steps, _, _ = unit_work(unit, k_steps, k_per, grid_m * grid_n, whole, SPLITS)
            pid_m, pid_n = _tile_coords(tile, grid_m, grid_n, GROUP_M)
            off_n = pid_n * (BN + BN2)
            for k in range(k_first, k_first + steps):
                slot = pos % STAGES
                # barriers start with phase 1 complete: the first pass over the ring does not wait
                mbarrier.wait(empty.index(slot), ((pos // STAGES) & 1) ^ 1)
                if STAGED:  # before the TMA copies' expect: the phase cannot complete without the scales
                    stage_block_scales(bscales, a_sc.index(slot), b_sc.index(slot), ready.index(slot), pid_m * BM,
                                       off_n, k, M, BK)
                if BN2 > 0:
                    bar = ready.index(slot)
                    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes
                                    + b2_desc.block_type.nbytes)
                    tma_load(a_desc, [pid_m * BM, k * BK], bar, a_bufs.index(slot))
                    tma_load(b_desc, [off_n, k * BK], bar, b_bufs.index(slot))
                    tma_load(b2_desc, [off_n + BN, k * BK], bar, b2_bufs.index(slot))
                else:
                    _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, pos, pid_m * BM, off_n, k * BK, True)
                pos += 1

    @gluon.jit
    def _tile_epilogue(
        acc, w0, w1, acc2, v0, v1,                               # the tile: whole, or in row waves; its last BN2
                                                                 # columns: whole, or in row waves
        c_desc, c2_desc, c_smem, c2_smem,                        # output: TMA descriptors and staging tiles
        a_scale_ptr, b_scale_ptr,                                # scales: per tensor or per row
        off_m, off_n, M, N,                                      # the tile's first row and column; sizes
        ROW0: gl.constexpr, SCALE: gl.constexpr,                 # this consumer's first row in it; which scales
        WAVES: gl.constexpr, BN2: gl.constexpr,                  # how the tile is held
    ):
        """A consumer's epilogue of one tile, however it holds it (_epilogue, or gluon_ws_promote.epilogue_waves)."""
        off_n2 = off_n + c_desc.block_type.shape[1]
        if WAVES > 0:
            epilogue_waves(w0, w1, c_desc, c_smem, a_scale_ptr, b_scale_ptr, off_m + ROW0, off_n, M, N, SCALE, WAVES)
            if BN2 > 0:
                epilogue_waves(v0, v1, c2_desc, c2_smem, a_scale_ptr, b_scale_ptr, off_m + ROW0, off_n2, M, N, SCALE,
                               WAVES)
        else:
            _epilogue(acc, c_desc, c_smem, a_scale_ptr, b_scale_ptr, off_m + ROW0, off_n, M, N, SCALE)
            if BN2 > 0:
                _epilogue(acc2, c2_desc, c2_smem, a_scale_ptr, b_scale_ptr, off_m + ROW0, off_n2, M, N, SCALE)

    @gluon.jit
    def _consumer(
        ring, turns,                                             # shared memory: the stages, the turns' barriers
        c_desc, c2_desc, c_smem, c2_smem,                        # output: TMA descriptors and staging tiles
        a_scale_ptr, b_scale_ptr, bscales,                       # scales: per tensor or row; block (pointers, strides)
        ws_ptr, count_ptr,                                       # split-K: fp32 workspace, per-tile counters
        M, N, K, k_per, whole,                                   # sizes; K steps of a split, tiles run whole
        FIRST: gl.constexpr, EVERY: gl.constexpr,                # schedule: which of the program's tiles, or
        HALVES: gl.constexpr, GROUP_M: gl.constexpr,             # which half of every tile's rows; units per tile
        SPLITS: gl.constexpr, ATOMIC: gl.constexpr,              # and how they meet
        PROMOTE: gl.constexpr, OVERLAP: gl.constexpr,            # fp8: how it promotes, which scales; whether the
        WAVES: gl.constexpr, SCALE: gl.constexpr,                # halves' waves take turns; one wave with a
        TURNS: gl.constexpr, LAG: gl.constexpr,                  # step's lag: K steps a trip (k_loop_lagged; 0: none)
        layout: gl.constexpr, layout2: gl.constexpr,             # meta: accumulator layouts (whole, row waves; the
        wave_layout: gl.constexpr, wave_layout2: gl.constexpr,   # second's of BN2 columns), the second's width
        BN2: gl.constexpr,
    ):
        """A consumer partition: the program's tiles FIRST, FIRST + EVERY, ... (its ring positions follow: each
        tile takes k_steps of them), each summed by async wgmma and stored by this partition's epilogue.  A stage
        goes back to the producer once the wgmma after the one reading it has been issued and the reader done.
        Ping-pong's two consumers take turns at their K loops (turns: one barrier each, the other arrives on it), so
        neither waits on a ring position more than one lap ahead: an mbarrier's phase parity tells one lap from the
        next only.  BN2 > 0: a second accumulator for the tile's last BN2 columns (register tensors are powers of
        two: a 128 + 32 wide tile is two of them), one per wave where the tile is held in row waves.  HALVES: every
        tile of the program, rows FIRST * its half on (the output descriptor's block is the half), each consumer's
        waves on their own, or in turns where TURNS says (by default with block scales; k_loop_waves*): both read
        every stage, which goes back to the producer only once both released it, so neither runs more than one lap
        ahead of the other without turns.  SPLITS other than 1 (one consumer, or the halves: every unit in the same
        order; 0: stream-K): units, not tiles, each a share of a tile's K steps, and only the unit that meets its
        tile's other units last (gluon_ws_split.meet) runs the epilogue."""
        a_bufs, b_bufs, b2_bufs, ready, empty, a_sc, b_sc = ring
        BM: gl.constexpr = a_bufs.shape[1]  # the tile's rows; this consumer's are the output block's
        ROWS: gl.constexpr = c_desc.block_type.shape[0]
        ROW0: gl.constexpr = FIRST * ROWS if HALVES else 0
        WAVE_TURNS: gl.constexpr = HALVES and TURNS  # the waves' wgmma in turns (k_loop_waves*)
        BN: gl.constexpr = c_desc.block_type.shape[1]
        BK: gl.constexpr = a_bufs.shape[2]
        STAGES: gl.constexpr = a_bufs.shape[0]
        grid_m = gl.cdiv(M, BM)
        grid_n = gl.cdiv(N, BN + BN2)
        k_steps = gl.cdiv(K, BK)
        step = gl.num_programs(0)
        base = 0 if HALVES else FIRST * k_steps
        turn = 0
        units = units_end(grid_m * grid_n, whole, k_steps, SPLITS)
        for unit in range(gl.program_id(0) + (0 if HALVES else FIRST) * step, units, EVERY * step):
            tile, k_first, steps, split, parts = unit_work(unit, k_steps, k_per, grid_m * grid_n, whole, SPLITS)
            pid_m, pid_n = _tile_coords(tile, grid_m, grid_n, GROUP_M)
            acc = gl.zeros([ROWS, BN], gl.float32, layout)
            acc2 = acc  # the tensors a schedule does not hold stand for themselves, never read
            w0 = acc
            w1 = acc
            v0 = acc
            v1 = acc
            if BN2 > 0 and WAVES == 0:
                acc2 = gl.zeros([ROWS, BN2], gl.float32, layout2)
            if EVERY > 1:  # the first consumer's first turn finds its barrier's phase 1 complete, as created
                mbarrier.wait(turns.index(FIRST), (turn & 1) ^ (1 - FIRST))
            if WAVES > 0:
                w0 = gl.zeros([ROWS // WAVES, BN], gl.float32, wave_layout)
                w1 = w0
                if WAVES == 2:
                    w1 = gl.zeros_like(w0)
                if BN2 > 0:
                    v0 = gl.zeros([ROWS // WAVES, BN2], gl.float32, wave_layout2)
                    v1 = v0
                    if WAVES == 2:
                        v1 = gl.zeros_like(v0)
                if LAG > 0:
                    w0, v0, turn = k_loop_lagged(a_bufs, b_bufs, b2_bufs, ready, empty, turns, a_sc, b_sc, base, steps,
                                                 turn, w0, v0, ROW0, FIRST, WAVE_TURNS, SCALE, LAG, BN2)
                elif SCALE == "block" or WAVES == 2:
                    w0, w1, v0, v1, turn = k_loop_waves_peeled(a_bufs, b_bufs, b2_bufs, ready, empty, turns, a_sc, b_sc,
                                                                base, steps, turn, w0, w1, v0, v1, ROW0, FIRST,
                                                                WAVE_TURNS, SCALE, WAVES, BN2)
                else:
                    w0, v0, turn = k_loop_waves(a_bufs, b_bufs, b2_bufs, ready, empty, turns, base, steps, turn, w0, v0,
                                                ROW0, FIRST, WAVE_TURNS, BN2)
            elif OVERLAP:
                acc, acc2 = k_loop_overlapped(a_bufs, b_bufs, b2_bufs, ready, empty, base, k_first, steps, acc, acc2,
                                               bscales, pid_m * BM + ROW0, pid_n * (BN + BN2), M, N, ROW0, SCALE,
                                               layout, BN2)
            else:
                for k in range(steps):
                    pos = base + k
                    mbarrier.wait(ready.index(pos % STAGES), (pos // STAGES) & 1)
                    a = rows_of(a_bufs, pos % STAGES, ROW0, ROWS)  # the halves: this consumer's rows
                    acc = _mma_step(a, b_bufs.index(pos % STAGES), acc, PROMOTE)
                    if BN2 > 0:
                        acc2 = _mma_step(a, b2_bufs.index(pos % STAGES), acc2, PROMOTE)
                        acc, acc2 = warpgroup_mma_wait(2, deps=[acc, acc2])
                    else:
                        acc = warpgroup_mma_wait(1, deps=[acc])
                    mbarrier.arrive(empty.index((pos + STAGES - 1) % STAGES), count=1, pred=k > 0)
                if BN2 > 0:
                    acc, acc2 = warpgroup_mma_wait(0, deps=[acc, acc2])
                else:
                    acc = warpgroup_mma_wait(0, deps=[acc])
                mbarrier.arrive(empty.index((base + steps - 1) % STAGES), count=1)
            if EVERY > 1:
                mbarrier.arrive(turns.index(1 - FIRST), count=1)
                turn += 1
            base += EVERY * steps
            off_n = pid_n * (BN + BN2)
            if SPLITS != 1:  # split-K or stream-K (no second accumulator: fits)
                last = unit < whole  # a whole tile's unit is its tile's only one
                if unit >= whole:
                    if WAVES > 0:
                        last, w0, w1 = meet(w0, w1, ws_ptr, count_ptr, tile * 2 + FIRST, tile, whole, split, parts,
                                            ROW0, BM, SPLITS, WAVES, ATOMIC)
                    else:
                        last, acc, _ = meet(acc, acc, ws_ptr, count_ptr, tile * 2 + FIRST, tile, whole, split, parts,
                                            ROW0, BM, SPLITS, 1, ATOMIC)
                if last:
                    _tile_epilogue(acc, w0, w1, acc, w0, w1, c_desc, c2_desc, c_smem, c2_smem, a_scale_ptr,
                                   b_scale_ptr, pid_m * BM, off_n, M, N, ROW0, SCALE, WAVES, 0)
            else:
                _tile_epilogue(acc, w0, w1, acc2, v0, v1, c_desc, c2_desc, c_smem, c2_smem, a_scale_ptr, b_scale_ptr,
                               pid_m * BM, off_n, M, N, ROW0, SCALE, WAVES, BN2)
        tma.store_wait(0)

    @gluon.jit
    def warp_specialized_kernel(
        a_desc, b_desc, b2_desc, c_desc, c2_desc,                # operands and output: TMA descriptors
        a_scale_ptr, b_scale_ptr, a_bs_ptr, b_bs_ptr,            # scales: per tensor or row; block
        ws_ptr, count_ptr,                                       # split-K: fp32 workspace, per-tile counters
        s_am, s_ak, s_bn, s_bk,                                  # strides: the block scales'
        M, N, K, k_per, whole,                                   # sizes; K steps of a split, tiles run whole
        GROUP_M: gl.constexpr, STAGES: gl.constexpr,             # schedule
        CONSUMERS: gl.constexpr, HALVES: gl.constexpr, SPLITS: gl.constexpr,  # split-K's units a tile (0: stream-K)
        ATOMIC: gl.constexpr,                                    # split-K's units meet by atomics
        PROMOTE: gl.constexpr, OVERLAP: gl.constexpr,            # fp8: how it promotes, which scales; whether the
        WAVES: gl.constexpr, SCALE: gl.constexpr,                # halves' waves take turns; one wave with a
        TURNS: gl.constexpr, LAG: gl.constexpr,                  # step's lag: K steps a trip (k_loop_lagged; 0: none)
        layout: gl.constexpr, layout2: gl.constexpr,             # meta: accumulator layouts (whole, row waves; the
        wave_layout: gl.constexpr, wave_layout2: gl.constexpr,   # second's of BN2 columns), the second's width,
        BN2: gl.constexpr,                                       # each partition's registers
        CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
    ):
        """The "ws" (CONSUMERS 1), "pingpong" and "halves" (CONSUMERS 2, HALVES) schedules: a producer warp and
        consumer partitions sharing one ring of STAGES stages; each consumer stores through a tile of shared memory
        of its own (halves: the output descriptor's block is half the tile's rows).  Where BN2 is 0, b2_desc and
        c2_desc are b_desc and c_desc, never read; where SPLITS is 1, ws_ptr and count_ptr are never read."""
        BM: gl.constexpr = a_desc.block_type.shape[0]
        BN: gl.constexpr = b_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
        b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
        if BN2 > 0:
            b2_bufs = gl.allocate_shared_memory(b2_desc.dtype, [STAGES, BN2, BK], b2_desc.layout)
            c20 = gl.allocate_shared_memory(c2_desc.dtype, c2_desc.block_type.shape, c2_desc.layout)
        else:
            b2_bufs = b_bufs
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2 if HALVES else 1)  # halves: each consumer reads each stage
        STAGED: gl.constexpr = SCALE == "block" and WAVES > 0  # the waves read each step's scales from its stage
        if STAGED:
            scale_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # a stage is one vector
            a_sc = gl.allocate_shared_memory(gl.float32, [STAGES, BM], scale_layout)
            b_sc = gl.allocate_shared_memory(gl.float32, [STAGES, BM], scale_layout)
        else:
            a_sc = a_bufs
            b_sc = a_bufs
        turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(turns.index(i), count=1)
        c0 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
        if BN2 == 0:
            c20 = c0
        ring = (a_bufs, b_bufs, b2_bufs, ready, empty, a_sc, b_sc)
        bscales = (a_bs_ptr, b_bs_ptr, s_am, s_ak, s_bn, s_bk)  # SCALE "block": (M, K/128) and (N/128, K/128)
        # Gluon takes each partition's function written out in the call (a tuple variable holds no function)
        if CONSUMERS == 1:
            gl.warp_specialize(
                [
                    (_consumer, (ring, turns, c_desc, c2_desc, c0, c20, a_scale_ptr, b_scale_ptr, bscales,
                                 ws_ptr, count_ptr, M, N, K, k_per, whole, 0, 1, False, GROUP_M, SPLITS, ATOMIC,
                                 PROMOTE, OVERLAP, WAVES, SCALE, TURNS, LAG,
                                 layout, layout2, wave_layout, wave_layout2, BN2)),
                    (_producer, (a_desc, b_desc, b2_desc, ring, bscales, M, N, K, k_per, whole, GROUP_M, SPLITS,
                                 STAGED, BN2)),
                ],
                [1],
                [PRODUCER_REGS],
            )
        else:
            c1 = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
            if BN2 > 0:
                c21 = gl.allocate_shared_memory(c2_desc.dtype, c2_desc.block_type.shape, c2_desc.layout)
            else:
                c21 = c1
            gl.warp_specialize(
                [
                    (_consumer, (ring, turns, c_desc, c2_desc, c0, c20, a_scale_ptr, b_scale_ptr, bscales,
                                 ws_ptr, count_ptr, M, N, K, k_per, whole, 0, 1 if HALVES else 2, HALVES, GROUP_M,
                                 SPLITS, ATOMIC, PROMOTE, OVERLAP, WAVES, SCALE, TURNS, LAG,
                                 layout, layout2, wave_layout, wave_layout2, BN2)),
                    (_consumer, (ring, turns, c_desc, c2_desc, c1, c21, a_scale_ptr, b_scale_ptr, bscales,
                                 ws_ptr, count_ptr, M, N, K, k_per, whole, 1, 1 if HALVES else 2, HALVES, GROUP_M,
                                 SPLITS, ATOMIC, PROMOTE, OVERLAP, WAVES, SCALE, TURNS, LAG,
                                 layout, layout2, wave_layout, wave_layout2, BN2)),
                    (_producer, (a_desc, b_desc, b2_desc, ring, bscales, M, N, K, k_per, whole, GROUP_M, SPLITS,
                                 STAGED, BN2)),
                ],
                [4, 1],  # WARPGROUP: a jit function reads no module constant
                [CONSUMER_REGS, PRODUCER_REGS],
            )
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))
            mbarrier.invalidate(empty.index(i))
    # fmt: on
