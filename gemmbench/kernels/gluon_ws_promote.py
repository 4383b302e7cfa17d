"""The Gluon GEMM's fp8 promotion in device code: the consumer K loops that promote by themselves (the overlapped
partials and the row waves, with their block scales) and a tile's per-tensor or row-wise scales; the schedules that
call them are gluon_ws_device.py's.

Triton's wgmma lowering promotes every PROMOTE of K by itself (max_num_imprecise_acc) and waits for each wgmma before
adding it.  The overlapped loop sums each K step into one of two alternating partials and adds the finished one while
the other's wgmma runs (three fp32 tiles, and three of a second accumulator's BN2 columns).  The waves take the tile's
rows in one or two waves: each K step's sum of a wave goes into one partial, waited for and added into that wave's
fp32 tile, so only one partial lives beside the fp32 tile; in the halves schedule two consumers run it on the two
halves of a tile's rows, each on its own, or taking turns at the waves' wgmma (the config's TURNS, by default with
block scales: docs/BENCHMARKS.md, "Promoted fp8: the waves and the halves").  Two waves and block scales run the
peeled loop (k_loop_waves_peeled: each step's first wave issued at the end of the trip before), where with block
scales the next K step's ready wait and scale loads also run under the last wave's wgmma.  One wave can instead keep
a step's wgmma in flight while it promotes the step before (k_loop_lagged: two partials in turn).  Each jit signature
is grouped by role, a commented line each.
"""

from __future__ import annotations

from gemmbench.kernels import gluon_api

if gluon_api.GLUON_IMPORT_ERROR is None:
    from gemmbench.kernels.gluon_api import (
        cp_async_load,
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        mbarrier_arrive_on_copies,
        tma,
        tma_store,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    # fmt: off

    @gluon.jit
    def scaled(
        acc,                                                     # the fp32 tile
        a_scale_ptr, b_scale_ptr,                                # scales: per tensor or per row
        off_m, off_n, M, N,                                      # the tile's first row and column; sizes
        SCALE: gl.constexpr,                                     # which scales
    ):
        """An fp32 tile (rows from off_m, columns from off_n) times its per-tensor or row-wise scales."""
        if SCALE == "tensor":
            return acc * (gl.load(a_scale_ptr) * gl.load(b_scale_ptr))
        elif SCALE == "row":
            layout: gl.constexpr = acc.type.layout
            rows = off_m + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
            cols = off_n + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
            sa = gl.load(a_scale_ptr + rows, mask=rows < M, other=0.0)
            sb = gl.load(b_scale_ptr + cols, mask=cols < N, other=0.0)
            return acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
        else:
            return acc

    @gluon.jit
    def _add_step(
        acc, part, k,                                            # the fp32 tile, one K step's sum, that step
        bscales,                                                 # block scales: pointers and strides
        off_m, off_n, M, N,                                      # the tile's first row and column; sizes
        BK: gl.constexpr, SCALE: gl.constexpr,                   # K step, which scales
        layout: gl.constexpr,                                    # meta: the accumulator's layout
    ):
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
    def rows_of(a_bufs, slot, ROW0: gl.constexpr, ROWS: gl.constexpr):
        """A stage's A block, or its ROWS rows from ROW0 where a consumer holds half the tile's rows (the halves)."""
        a = a_bufs.index(slot)
        if ROWS < a_bufs.shape[1]:
            a = a.slice(ROW0, ROWS, dim=0)
        return a

    @gluon.jit
    def _issue_step(a_bufs, b_bufs, b2_bufs, ready, pos, part, part2, ROW0: gl.constexpr, BN2: gl.constexpr):
        """Ring position pos, once landed, summed into `part` (started afresh) and, BN2 > 0, its last BN2 columns
        into `part2`: one wgmma group each, not waited for."""
        STAGES: gl.constexpr = a_bufs.shape[0]
        slot = pos % STAGES
        mbarrier.wait(ready.index(slot), (pos // STAGES) & 1)
        a = rows_of(a_bufs, slot, ROW0, part.shape[0])
        part = warpgroup_mma(a, b_bufs.index(slot).permute((1, 0)), part, use_acc=False, is_async=True)
        if BN2 > 0:
            part2 = warpgroup_mma(a, b2_bufs.index(slot).permute((1, 0)), part2, use_acc=False, is_async=True)
        return part, part2

    @gluon.jit
    def _wait_step(part, part2, STEPS_LEFT: gl.constexpr, BN2: gl.constexpr):
        """Until at most STEPS_LEFT K steps' wgmma are in flight (a step is one group, two with BN2 columns): the
        step summed in `part` (and `part2`) has finished."""
        if BN2 > 0:
            part, part2 = warpgroup_mma_wait(2 * STEPS_LEFT, deps=[part, part2])
        else:
            part = warpgroup_mma_wait(STEPS_LEFT, deps=[part])
        return part, part2

    @gluon.jit
    def _add_released(
        acc, part, acc2, part2, k, empty, pos, bscales,          # the fp32 tiles, step k's finished sums, its stage
        off_m, off_n, M, N,                                      # the first row and column; sizes
        BK: gl.constexpr, SCALE: gl.constexpr,                   # K step, which scales
        layout: gl.constexpr, BN2: gl.constexpr,                 # meta: the accumulator's layout; second's width
    ):
        """A finished step's partials added into the fp32 tiles (_add_step; the second takes no block scales:
        fits), and its stage given back."""
        STAGES: gl.constexpr = empty.shape[0]
        acc = _add_step(acc, part, k, bscales, off_m, off_n, M, N, BK, SCALE, layout)
        if BN2 > 0:
            acc2 = acc2 + part2
        mbarrier.arrive(empty.index(pos % STAGES), count=1)
        return acc, acc2

    @gluon.jit
    def k_loop_overlapped(
        a_bufs, b_bufs, b2_bufs, ready, empty,                   # shared memory: stages (B's next BN2 rows) and
                                                                 # their barriers
        base, k_first, k_steps,                                  # ring position, first K step (split-K), steps
        acc, acc2, bscales,                                      # the fp32 tiles (or their rows from ROW0): BLOCK_N
                                                                 # and BN2 columns; block scales
        off_m, off_n, M, N,                                      # the first row and column; sizes
        ROW0: gl.constexpr, SCALE: gl.constexpr,                 # this consumer's first row in a stage; which scales
        layout: gl.constexpr, BN2: gl.constexpr,                 # meta: the accumulator's layout; second's width
    ):
        """fp8 with each K step's sum promoted on its own: each step's wgmma starts a partial sum of its own (two,
        alternating), and the finished one is added into the fp32 tile (block scales: scaled first) while the
        other's wgmma runs; Triton's max_num_imprecise_acc instead drains the wgmma group before each add.  Four K
        steps a trip, every group retired within it: a group left in flight across the loop's back edge makes ptxas
        serialize the wgmma (C7514; docs/BENCHMARKS.md, "What bounds each kind of miss"); the steps past the last
        whole trip one at a time.  A consumer holding half the tile's rows (the halves) sums the stage's rows from
        ROW0 (off_m is then its own first row).  BN2 > 0: the tile's last BN2 columns in partials and an fp32 tile of
        their own (acc2), summed and added beside the first's; else acc2 stands for itself, never read."""
        BK: gl.constexpr = a_bufs.shape[2]
        pa = gl.zeros_like(acc)
        pb = gl.zeros_like(acc)
        pa2 = acc2
        pb2 = acc2
        if BN2 > 0:
            pa2 = gl.zeros_like(acc2)
            pb2 = gl.zeros_like(acc2)
        trips = k_steps // 4
        for i in range(trips):
            p0 = base + 4 * i
            k0 = k_first + 4 * i
            pa, pa2 = _issue_step(a_bufs, b_bufs, b2_bufs, ready, p0, pa, pa2, ROW0, BN2)
            pb, pb2 = _issue_step(a_bufs, b_bufs, b2_bufs, ready, p0 + 1, pb, pb2, ROW0, BN2)
            pa, pa2 = _wait_step(pa, pa2, 1, BN2)
            acc, acc2 = _add_released(acc, pa, acc2, pa2, k0, empty, p0, bscales, off_m, off_n, M, N, BK, SCALE,
                                      layout, BN2)
            pa, pa2 = _issue_step(a_bufs, b_bufs, b2_bufs, ready, p0 + 2, pa, pa2, ROW0, BN2)
            pb, pb2 = _wait_step(pb, pb2, 1, BN2)
            acc, acc2 = _add_released(acc, pb, acc2, pb2, k0 + 1, empty, p0 + 1, bscales, off_m, off_n, M, N, BK,
                                      SCALE, layout, BN2)
            pb, pb2 = _issue_step(a_bufs, b_bufs, b2_bufs, ready, p0 + 3, pb, pb2, ROW0, BN2)
            pa, pa2 = _wait_step(pa, pa2, 1, BN2)
            acc, acc2 = _add_released(acc, pa, acc2, pa2, k0 + 2, empty, p0 + 2, bscales, off_m, off_n, M, N, BK,
                                      SCALE, layout, BN2)
            pb, pb2 = _wait_step(pb, pb2, 0, BN2)
            acc, acc2 = _add_released(acc, pb, acc2, pb2, k0 + 3, empty, p0 + 3, bscales, off_m, off_n, M, N, BK,
                                      SCALE, layout, BN2)
        for k in range(4 * trips, k_steps):
            pa, pa2 = _issue_step(a_bufs, b_bufs, b2_bufs, ready, base + k, pa, pa2, ROW0, BN2)
            pa, pa2 = _wait_step(pa, pa2, 0, BN2)
            acc, acc2 = _add_released(acc, pa, acc2, pa2, k_first + k, empty, base + k, bscales, off_m, off_n, M, N,
                                      BK, SCALE, layout, BN2)
        return acc, acc2

    @gluon.jit
    def stage_block_scales(
        bscales, a_dst, b_dst, bar,                              # block scales: pointers and strides; a stage's
                                                                 # scale buffers and its ready barrier
        off_m, off_n, k, M,                                      # the tile's first row and column, K step; M
        BK: gl.constexpr,                                        # K step
    ):
        """The producer's copy of one K step's block scales into its stage, beside the TMA copies of its operands:
        the tile's rows' activation scales into a_dst, the tile's one weight scale (its columns lie in one 128-column
        weight block) into every element of b_dst, both by cp.async, counted on the stage's ready barrier.  The
        consumers then read them from shared memory after the wait that tells them the operands landed: loaded from
        global memory in the K loop, their latency stalled each step's promotion."""
        a_bs, b_bs, s_am, s_ak, s_bn, s_bk = bscales
        BM: gl.constexpr = a_dst.shape[0]
        copies: gl.constexpr = gl.BlockedLayout([BM // 32], [32], [1], [0])  # the producer's one warp
        group = (k * BK) // 128
        rows = off_m + gl.arange(0, BM, layout=copies)
        cp_async_load(a_dst, a_bs + rows * s_am + group * s_ak, mask=rows < M)
        cp_async_load(b_dst, b_bs + (off_n // 128) * s_bn + group * s_bk + rows * 0)
        mbarrier_arrive_on_copies(bar)  # the barrier's phase now also waits for these copies

    @gluon.jit
    def _staged_scales(a_sc, b_sc, row0, WAVE_M: gl.constexpr, layout: gl.constexpr):
        """One wave's block scales of a K step, per row, from its stage: each row's activation scale times the
        tile's weight scale."""
        rows: gl.constexpr = gl.SliceLayout(1, layout)
        return a_sc.slice(row0, WAVE_M).load(rows) * b_sc.slice(row0, WAVE_M).load(rows)

    @gluon.jit
    def k_loop_waves(
        a_bufs, b_bufs, b2_bufs, ready, empty, turns,            # shared memory: stages (B's next BN2 rows), their
                                                                 # barriers, the turns'
        base, k_steps, turn,                                     # ring position, steps; turns taken
        acc0, wide0,                                             # the wave's fp32 tiles: BLOCK_N and BN2 columns
        ROW0: gl.constexpr,                                      # this consumer's first row within a stage's A block
        FIRST: gl.constexpr, TURNS: gl.constexpr,                # schedule: which consumer, whether they alternate
        BN2: gl.constexpr,                                       # meta: the second accumulator's width (0: none)
    ):
        """fp8 promoted in one row wave, per-tensor or row-wise scales (applied in the epilogue): each K step's sum
        of the wave (each warpgroup its 64-row slice) goes into one reduced-precision accumulator, started afresh
        (use_acc False), waited for, and added into the wave's fp32 accumulator.  The step's ready wait comes first
        in each trip: with one wave this loop ran faster than k_loop_waves_peeled's (docs/BENCHMARKS.md, "Two waves
        in the peeled loop").  BN2 > 0: the wave also sums the tile's next BN2 columns into wide0 (a 128 + 32 wide
        tile is two power-of-two tensors), both wgmma issued together.  Returns the wave's tiles and the turns
        taken."""
        STAGES: gl.constexpr = a_bufs.shape[0]
        raw = gl.zeros_like(acc0)
        raw2 = raw  # stands for itself where there is no second accumulator, never read
        if BN2 > 0:
            raw2 = gl.zeros_like(wide0)
        for k in range(k_steps):
            pos = base + k
            slot = pos % STAGES
            mbarrier.wait(ready.index(slot), (pos // STAGES) & 1)
            raw, raw2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, slot, ROW0, raw, raw2, turns, turn, FIRST, TURNS,
                                          BN2)
            raw, raw2 = _wave_wait(raw, raw2, BN2)
            acc0 = acc0 + raw
            if BN2 > 0:
                wide0 = wide0 + raw2
            mbarrier.arrive(empty.index(slot), count=1)
        return acc0, wide0, turn

    @gluon.jit
    def k_loop_waves_peeled(
        a_bufs, b_bufs, b2_bufs, ready, empty, turns,            # shared memory: stages (B's next BN2 rows), their
                                                                 # barriers, the turns'
        a_sc, b_sc,                                              # the stages' block scales (stage_block_scales)
        base, k_steps, turn,                                     # ring position, steps; turns taken
        acc0, acc1, wide0, wide1,                                # the waves' fp32 tiles: BLOCK_N and BN2 columns
        ROW0: gl.constexpr,                                      # this consumer's first row within a stage's A block
        FIRST: gl.constexpr, TURNS: gl.constexpr,                # schedule: which consumer, whether they alternate
        SCALE: gl.constexpr, WAVES: gl.constexpr,                # fp8: which scales, how many waves
        BN2: gl.constexpr,                                       # meta: the second accumulators' width (0: none)
    ):
        """fp8 promoted in row waves, the loop of two waves and of block scales: each K step's sum of a wave of WAVE_M
        rows (each warpgroup its 64-row slice) goes into one reduced-precision accumulator, started afresh (use_acc
        False), waited for, and added into that wave's fp32 accumulator (block scales: times its rows' scales, which
        hold the tile's weight scale); then the next wave.  Only one partial beside the fp32 tile: 256 x 128 fits where
        Triton's promotion of a whole tile spills or serializes its wgmma.  Two consumers on the two halves of a tile's
        rows (the halves) each run this loop, and the tensor cores take the two warpgroups' wgmma as they are issued, so
        one's promotion runs under the other's wgmma, as DeepGEMM's math warpgroups do.  TURNS (the config's; by default
        the halves with block scales, which lost more cells than they gained without; per-tensor scales ran faster
        without: docs/BENCHMARKS.md, "Promoted fp8: the waves and the halves"): each issues a wave's wgmma in its turn
        and hands the turn over once issued.  Each step's first wave is issued at the end of the trip before, so the
        last step is peeled off the loop (a wgmma issued under a branch is not the tensor the loop carries); two
        per-tensor waves ran faster this way than with the ready wait first in each trip ("Two waves in the peeled
        loop").  With block scales (LAG) the next K step's ready wait and its scales' loads from shared memory also run
        while the step's last wave is in the tensor cores, not after its promotion ("The next K step's wait under the
        wgmma").  BN2 > 0: each wave also sums the tile's next BN2 columns (wide0, wide1), both wgmma issued together.
        Returns the waves' tiles and the turns taken."""
        STAGES: gl.constexpr = a_bufs.shape[0]
        WAVE_M: gl.constexpr = acc0.shape[0]
        LAG: gl.constexpr = SCALE == "block"
        layout: gl.constexpr = acc0.type.layout
        raw = gl.zeros_like(acc0)
        raw2 = raw  # stands for itself where there is no second accumulator, never read
        if BN2 > 0:
            raw2 = gl.zeros_like(wide0)
        s0, s1 = _ready_scales(ready, a_sc, b_sc, base, ROW0, WAVE_M, SCALE, WAVES, layout)
        raw, raw2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, base % STAGES, ROW0, raw, raw2, turns, turn, FIRST,
                                      TURNS, BN2)
        for k in range(k_steps - 1):
            pos = base + k
            acc0, wide0, raw, raw2, turn = _second_wave(a_bufs, b_bufs, b2_bufs, pos % STAGES, acc0, wide0, raw, raw2,
                                                        s0, turns, turn, ROW0, FIRST, TURNS, SCALE, WAVES, BN2)
            if LAG:
                n0, n1 = _ready_scales(ready, a_sc, b_sc, pos + 1, ROW0, WAVE_M, SCALE, WAVES, layout)
            acc0, acc1, wide0, wide1, raw, raw2 = _last_wave_promoted(acc0, acc1, wide0, wide1, raw, raw2, s0, s1,
                                                                      SCALE, WAVES, BN2)
            mbarrier.arrive(empty.index(pos % STAGES), count=1)
            if not LAG:
                n0, n1 = _ready_scales(ready, a_sc, b_sc, pos + 1, ROW0, WAVE_M, SCALE, WAVES, layout)
            raw, raw2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, (pos + 1) % STAGES, ROW0, raw, raw2, turns, turn,
                                          FIRST, TURNS, BN2)
            s0 = n0
            s1 = n1
        slot = (base + k_steps - 1) % STAGES
        acc0, wide0, raw, raw2, turn = _second_wave(a_bufs, b_bufs, b2_bufs, slot, acc0, wide0, raw, raw2, s0, turns,
                                                    turn, ROW0, FIRST, TURNS, SCALE, WAVES, BN2)
        acc0, acc1, wide0, wide1, raw, raw2 = _last_wave_promoted(acc0, acc1, wide0, wide1, raw, raw2, s0, s1, SCALE,
                                                                  WAVES, BN2)
        mbarrier.arrive(empty.index(slot), count=1)
        return acc0, acc1, wide0, wide1, turn

    @gluon.jit
    def k_loop_lagged(
        a_bufs, b_bufs, b2_bufs, ready, empty, turns,            # shared memory: stages (B's next BN2 rows), their
                                                                 # barriers, the turns'
        a_sc, b_sc,                                              # the stages' block scales (stage_block_scales)
        base, k_steps, turn,                                     # ring position, steps; turns taken
        acc0, wide0,                                             # the wave's fp32 tiles: BLOCK_N and BN2 columns
        ROW0: gl.constexpr,                                      # this consumer's first row within a stage's A block
        FIRST: gl.constexpr, TURNS: gl.constexpr,                # schedule: which consumer, whether they alternate
        SCALE: gl.constexpr, TRIP: gl.constexpr,                 # fp8: which scales; K steps a trip (even)
        BN2: gl.constexpr,                                       # meta: the second accumulator's width (0: none)
    ):
        """fp8 promoted in one row wave with a one-step lag, DeepGEMM's and lmdeploy's order: two partials in turn,
        each K step's wgmma issued before the step before it is waited for (one step left in flight), so that
        step's promotion (block scales: times its rows' scales, read from its stage) runs under this one's wgmma,
        not only under the other consumer's.  Three tiles where the waves hold two: one wave of 64 rows a
        warpgroup.  TRIP K steps a trip, every wgmma retired within it: a wgmma left in flight across the loop's back
        edge is what made ptxas serialize the overlapped partials' (C7514), and such a loop ran slower here too
        (docs/BENCHMARKS.md, "The one wave with a step's lag"); the steps past the last whole trip one at a time.
        Returns the wave's tiles and the turns taken."""
        STAGES: gl.constexpr = a_bufs.shape[0]
        WAVE_M: gl.constexpr = acc0.shape[0]
        layout: gl.constexpr = acc0.type.layout
        pa = gl.zeros_like(acc0)
        pb = gl.zeros_like(acc0)
        pa2 = pa  # stand for themselves where there is no second accumulator, never read
        pb2 = pb
        if BN2 > 0:
            pa2 = gl.zeros_like(wide0)
            pb2 = gl.zeros_like(wide0)
        for i in range(k_steps // TRIP):
            pos = base + TRIP * i
            sa, _ = _ready_scales(ready, a_sc, b_sc, pos, ROW0, WAVE_M, SCALE, 1, layout)
            pa, pa2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, pos % STAGES, ROW0, pa, pa2, turns, turn, FIRST,
                                        TURNS, BN2)
            for j in gl.static_range(1, TRIP):
                if j % 2 == 1:
                    sb, _ = _ready_scales(ready, a_sc, b_sc, pos + j, ROW0, WAVE_M, SCALE, 1, layout)
                    pb, pb2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, (pos + j) % STAGES, ROW0, pb, pb2, turns,
                                                turn, FIRST, TURNS, BN2)
                    pa, pa2 = _wait_step(pa, pa2, 1, BN2)
                    acc0, wide0 = _promoted(acc0, wide0, pa, pa2, sa, SCALE, BN2)
                else:
                    sa, _ = _ready_scales(ready, a_sc, b_sc, pos + j, ROW0, WAVE_M, SCALE, 1, layout)
                    pa, pa2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, (pos + j) % STAGES, ROW0, pa, pa2, turns,
                                                turn, FIRST, TURNS, BN2)
                    pb, pb2 = _wait_step(pb, pb2, 1, BN2)
                    acc0, wide0 = _promoted(acc0, wide0, pb, pb2, sb, SCALE, BN2)
                mbarrier.arrive(empty.index((pos + j - 1) % STAGES), count=1)
            pb, pb2 = _wave_wait(pb, pb2, BN2)
            acc0, wide0 = _promoted(acc0, wide0, pb, pb2, sb, SCALE, BN2)
            mbarrier.arrive(empty.index((pos + TRIP - 1) % STAGES), count=1)
        for k in range(TRIP * (k_steps // TRIP), k_steps):
            pos = base + k
            sa, _ = _ready_scales(ready, a_sc, b_sc, pos, ROW0, WAVE_M, SCALE, 1, layout)
            pa, pa2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, pos % STAGES, ROW0, pa, pa2, turns, turn, FIRST,
                                        TURNS, BN2)
            pa, pa2 = _wave_wait(pa, pa2, BN2)
            acc0, wide0 = _promoted(acc0, wide0, pa, pa2, sa, SCALE, BN2)
            mbarrier.arrive(empty.index(pos % STAGES), count=1)
        return acc0, wide0, turn

    @gluon.jit
    def _second_wave(a_bufs, b_bufs, b2_bufs, slot, acc0, wide0, raw, raw2, s0, turns, turn, ROW0: gl.constexpr,
                     FIRST: gl.constexpr, TURNS: gl.constexpr, SCALE: gl.constexpr, WAVES: gl.constexpr,
                     BN2: gl.constexpr):
        """With two waves: the first's K step sum, waited for and added, then the second wave's issued from the same
        stage into the same partial; with one, nothing."""
        if WAVES == 2:
            raw, raw2 = _wave_wait(raw, raw2, BN2)
            acc0, wide0 = _promoted(acc0, wide0, raw, raw2, s0, SCALE, BN2)
            raw, raw2, turn = _wave_issue(a_bufs, b_bufs, b2_bufs, slot, ROW0 + acc0.shape[0], raw, raw2, turns, turn,
                                          FIRST, TURNS, BN2)
        return acc0, wide0, raw, raw2, turn

    @gluon.jit
    def _last_wave_promoted(acc0, acc1, wide0, wide1, raw, raw2, s0, s1, SCALE: gl.constexpr, WAVES: gl.constexpr,
                            BN2: gl.constexpr):
        """The step's last wave's sum, waited for and added into its fp32 tiles."""
        raw, raw2 = _wave_wait(raw, raw2, BN2)
        if WAVES == 2:
            acc1, wide1 = _promoted(acc1, wide1, raw, raw2, s1, SCALE, BN2)
        else:
            acc0, wide0 = _promoted(acc0, wide0, raw, raw2, s0, SCALE, BN2)
        return acc0, acc1, wide0, wide1, raw, raw2

    @gluon.jit
    def _promoted(acc, wide, raw, raw2, scale, SCALE: gl.constexpr, BN2: gl.constexpr):
        """acc + one K step's exact sum (block scales: times its rows' scales first), and wide + its next BN2
        columns' (block-scaled configs have no second accumulator)."""
        if SCALE == "block":
            acc = gl.fma(raw, gl.expand_dims(scale, 1), acc)
        else:
            acc = acc + raw
        if BN2 > 0:
            wide = wide + raw2
        return acc, wide

    @gluon.jit
    def _ready_scales(ready, a_sc, b_sc, pos, ROW0: gl.constexpr, WAVE_M: gl.constexpr, SCALE: gl.constexpr,
                      WAVES: gl.constexpr, layout: gl.constexpr):
        """Waits until ring position pos has landed; returns its waves' block scales (ones for other scales, never
        read; the second wave's: the first's where there is one wave)."""
        STAGES: gl.constexpr = ready.shape[0]
        slot = pos % STAGES
        mbarrier.wait(ready.index(slot), (pos // STAGES) & 1)
        s0 = gl.full([WAVE_M], 1.0, gl.float32, gl.SliceLayout(1, layout))
        s1 = s0
        if SCALE == "block":
            s0 = _staged_scales(a_sc.index(slot), b_sc.index(slot), ROW0, WAVE_M, layout)
            if WAVES == 2:
                s1 = _staged_scales(a_sc.index(slot), b_sc.index(slot), ROW0 + WAVE_M, WAVE_M, layout)
        return s0, s1

    @gluon.jit
    def _wave_wait(raw, raw2, BN2: gl.constexpr):
        """A wave's wgmma (and BN2 > 0: its second's) finished."""
        if BN2 > 0:
            raw, raw2 = warpgroup_mma_wait(0, deps=[raw, raw2])
        else:
            raw = warpgroup_mma_wait(0, deps=[raw])
        return raw, raw2

    @gluon.jit
    def _wave_issue(a_bufs, b_bufs, b2_bufs, slot, ROW: gl.constexpr, raw, raw2, turns, turn, FIRST: gl.constexpr,
                    TURNS: gl.constexpr, BN2: gl.constexpr):
        """One wave's K step (the stage's rows from ROW) into raw (and BN2 > 0: its next BN2 columns into raw2),
        started afresh and not waited for; TURNS: issued in this consumer's turn (the first consumer's first turn
        finds its barrier's phase 1 complete, as created), the turn handed over once issued and counted (only then:
        the count's parity is the barrier's phase)."""
        WAVE_M: gl.constexpr = raw.shape[0]
        a = a_bufs.index(slot)
        b = b_bufs.index(slot).permute((1, 0))
        b2 = b2_bufs.index(slot).permute((1, 0))
        a = a.slice(ROW, WAVE_M, dim=0)
        if TURNS:
            mbarrier.wait(turns.index(FIRST), (turn & 1) ^ (1 - FIRST))
        raw = warpgroup_mma(a, b, raw, use_acc=False, is_async=True)
        if BN2 > 0:
            raw2 = warpgroup_mma(a, b2, raw2, use_acc=False, is_async=True)
        if TURNS:
            mbarrier.arrive(turns.index(1 - FIRST), count=1)
            turn += 1
        return raw, raw2, turn

    @gluon.jit
    def epilogue_waves(
        acc0, acc1,                                              # the waves' fp32 tiles
        c_desc, c_smem,                                          # output: TMA descriptor and staging tile
        a_scale_ptr, b_scale_ptr,                                # scales: per tensor or per row
        off_m, off_n, M, N,                                      # the first row and column; sizes
        SCALE: gl.constexpr, WAVES: gl.constexpr,                # which scales, how many waves
    ):
        """The epilogue (gluon_ws_device) for a tile held as row waves: each wave scaled and written into its rows of
        c_smem, then one TMA copy of the tile."""
        WAVE_M: gl.constexpr = acc0.shape[0]
        tma.store_wait(0)
        c_smem.slice(0, WAVE_M, dim=0).store(scaled(acc0, a_scale_ptr, b_scale_ptr, off_m, off_n, M, N, SCALE)
                                             .to(c_desc.dtype))
        if WAVES == 2:
            c_smem.slice(WAVE_M, WAVE_M, dim=0).store(
                scaled(acc1, a_scale_ptr, b_scale_ptr, off_m + WAVE_M, off_n, M, N, SCALE).to(c_desc.dtype))
        fence_async_shared()
        tma_store(c_desc, [off_m, off_n], c_smem)

    # fmt: on
