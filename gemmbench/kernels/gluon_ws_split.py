"""The Gluon GEMM's split-K in device code: which tile and which K steps a unit of work is, and how the splits of one
tile meet; the warp-specialized schedules of gluon_ws_device.py call them, gluon_ws.py sizes the split and the
workspace.

An output with fewer tiles than SMs leaves SMs idle: SPLITS units per tile, each a contiguous share of the K steps
(the host makes every share non-empty), fill them.  The splits meet as splitk.py's ordered reduction: each unit
stores its fp32 partial in its own slice of a (SPLITS, M, N) workspace, then counts itself on its tile's counter;
the one that counts last sums the slices in split order (bitwise the same sum, whichever arrived last), leaves the
counter zero for the next call, and runs the epilogue.  No unit waits on another (none spins), so units may run in
any order, and there is no zeroing or reduction launch.  Each consumer partition counts on a counter of its own: the
halves meet their row halves apart.
"""

from __future__ import annotations

from gemmbench.kernels import gluon_api

if gluon_api.GLUON_IMPORT_ERROR is None:
    from gemmbench.kernels.gluon_api import gl, gluon

    # fmt: off

    @gluon.jit
    def unit_work(
        unit, k_steps, k_per,                                    # the unit, K steps of a tile, of a split
        SPLITS: gl.constexpr,                                    # units per tile
    ):
        """(tile, first K step, K steps) of a unit: unit // SPLITS's share unit % SPLITS of the K steps."""
        if SPLITS == 1:
            return unit, 0, k_steps
        else:
            k_first = (unit % SPLITS) * k_per
            return unit // SPLITS, k_first, gl.minimum(k_per, k_steps - k_first)

    @gluon.jit
    def _partial_ptrs(acc, ws_ptr, split, off_m, off_n, M, N):
        """Where an fp32 tile's partial (rows from off_m, columns from off_n) lies in split's workspace slice, and
        which of its elements lie inside the output."""
        layout: gl.constexpr = acc.type.layout
        rows = off_m + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
        cols = off_n + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
        ptrs = ws_ptr + split * M * N + gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0)
        return ptrs, gl.expand_dims(rows < M, 1) & gl.expand_dims(cols < N, 0)

    @gluon.jit
    def _summed(acc, ws_ptr, off_m, off_n, M, N, SPLITS: gl.constexpr):
        """The tile's whole sum: its splits' slices, added in split order (through L2: other SMs wrote them)."""
        ptrs, inside = _partial_ptrs(acc, ws_ptr, 0, off_m, off_n, M, N)
        total = gl.load(ptrs, mask=inside, other=0.0, cache_modifier=".cg")
        for s in gl.static_range(1, SPLITS):
            total += gl.load(ptrs + s * M * N, mask=inside, other=0.0, cache_modifier=".cg")
        return total

    @gluon.jit
    def meet(
        acc0, acc1,                                              # this consumer's fp32 tiles (row waves, or one)
        ws_ptr, count_ptr, counter,                              # workspace, counters, this consumer's counter
        split, off_m, off_n, M, N,                               # the unit's split; its first row, column; sizes
        SPLITS: gl.constexpr, TILES: gl.constexpr,               # units per tile, tensors held (1 or 2 row waves)
    ):
        """Meet the tile's other splits: (last, acc0, acc1), last true in the unit that counted last, whose tiles
        are then the whole sums.  acc1 (TILES 2) holds the rows after acc0's."""
        WAVE_M: gl.constexpr = acc0.shape[0]
        ptrs, inside = _partial_ptrs(acc0, ws_ptr, split, off_m, off_n, M, N)
        gl.store(ptrs, acc0, mask=inside)
        if TILES == 2:
            ptrs1, inside1 = _partial_ptrs(acc1, ws_ptr, split, off_m + WAVE_M, off_n, M, N)
            gl.store(ptrs1, acc1, mask=inside1)
        # every thread's partial is out before one thread's release-increment of the counter (the CUTLASS semaphore
        # pattern); the acquire side makes the other units' partials visible to the one that counts last
        gl.thread_barrier()
        last = gl.atomic_add(count_ptr + counter, 1, sem="acq_rel") == SPLITS - 1
        if last:
            acc0 = _summed(acc0, ws_ptr, off_m, off_n, M, N, SPLITS)
            if TILES == 2:
                acc1 = _summed(acc1, ws_ptr, off_m + WAVE_M, off_n, M, N, SPLITS)
            gl.store(count_ptr + counter, 0)
        return last, acc0, acc1

    # fmt: on
