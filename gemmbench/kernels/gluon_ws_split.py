"""The Gluon GEMM's split-K and stream-K in device code: which tile and which K steps a unit of work is, and how the
units of one tile meet; the warp-specialized schedules of gluon_ws_device.py call them, gluon_ws.py sizes the split
and the workspace.

An output with fewer tiles than SMs leaves SMs idle, and one whose last wave is partial leaves them idle at its end:
the first WHOLE tiles run as one unit each (the grid's whole waves, or none), and each tile after them as SPLITS
units, each a contiguous share of the K steps (the host makes every share non-empty).  The splits meet as
splitk.py's ordered reduction: each unit stores its fp32 partial in its own slice of the workspace (a whole tile
per split, a split tile's slices adjacent), then counts itself on its tile's counter; the one that counts last sums
the slices in split order (bitwise the same sum, whichever arrived last), leaves the counter zero for the next call,
and runs the epilogue.  ATOMIC instead: each unit adds its partial into its tile's one slice by L2 atomics, and the
one that counts last reads that slice alone and leaves it zero: the last unit reads one slice however many splits,
where the ordered sum reads them all one after another; the order of the adds, and so the sum's last bits, may
differ from call to call.  Stream-K (SPLITS 0) instead spreads the K steps of the tiles after the WHOLE ones evenly
over every program, tile after tile: a program's share is one or more pieces, each ending where its tile or its share
ends, and a tile's pieces meet by atomics as above, the count that makes one last being how many programs' shares
hold a piece of it.  No unit waits on another (none spins), so units may run in any order, and there is no
zeroing or reduction launch.  Each consumer partition counts on a counter of its own: the halves meet their row
halves apart.
"""

from __future__ import annotations

from gemmbench.kernels import gluon_api

if gluon_api.GLUON_IMPORT_ERROR is None:
    from gemmbench.kernels.gluon_api import cta_barrier, gl, gluon

    # fmt: off

    @gluon.jit
    def units_end(
        tiles, whole, k_steps,                                   # output tiles, tiles run whole, K steps of a tile
        SPLITS: gl.constexpr,                                    # units per split tile; 0: stream-K
    ):
        """Where this program's units end, its units being program_id, + num_programs, ... before it: every unit
        of the launch split-K's way; stream-K, the program's whole tiles and then its share's pieces of tiles."""
        if SPLITS == 0:
            programs = gl.num_programs(0)
            program = gl.program_id(0)
            first, end, _ = _stream_share(program, (tiles - whole) * k_steps)
            pieces = gl.where(end > first, (end - 1) // k_steps - first // k_steps + 1, 0)
            return program + (whole // programs + pieces) * programs
        else:
            return whole + (tiles - whole) * SPLITS

    @gluon.jit
    def _stream_share(program, steps):
        """(first, end, sharers): [first, end) of the `steps` streamed K steps (the tail's tiles' steps, tile after
        tile) that a program sums, an even share among the first `sharers` programs (no more programs than steps:
        every share holds one or more, which _stream_owner's count of a tile's pieces needs), none for the rest."""
        sharers = gl.minimum(gl.num_programs(0), steps)
        first = gl.minimum(program, sharers) * steps // sharers
        return first, gl.minimum(program + 1, sharers) * steps // sharers, sharers

    @gluon.jit
    def _stream_owner(step, sharers, steps):
        """The program whose share holds streamed K step `step`: the last whose share starts at or before it."""
        return ((step + 1) * sharers + steps - 1) // steps - 1

    @gluon.jit
    def unit_work(
        unit, k_steps, k_per,                                    # the unit, K steps of a tile, of a split
        tiles, whole,                                            # output tiles, tiles run whole before the others
        SPLITS: gl.constexpr,                                    # units per split tile; 0: stream-K
    ):
        """(tile, first K step, K steps, split, parts) of a unit, parts being how many units meet on its tile: a
        tile before `whole` whole (split 0, one part); after them, split-K's share (unit - whole) % SPLITS of tile
        whole + (unit - whole) // SPLITS's K steps, or stream-K's piece (unit - whole) // num_programs of its
        program's share (split 0: the pieces meet by atomics, in no order)."""
        if SPLITS == 1:
            return unit, 0, k_steps, 0, 1
        elif SPLITS == 0:
            programs = gl.num_programs(0)
            streamed = (tiles - whole) * k_steps
            first, end, sharers = _stream_share(unit % programs, streamed)
            at = first // k_steps + gl.maximum(unit - whole, 0) // programs  # the tile among the tail's
            k_first = gl.maximum(first - at * k_steps, 0)
            steps = gl.minimum(end - at * k_steps, k_steps) - k_first
            parts = _stream_owner((at + 1) * k_steps - 1, sharers, streamed) - _stream_owner(at * k_steps, sharers,
                                                                                              streamed) + 1
            whole_tile = unit < whole
            return (gl.where(whole_tile, unit, whole + at), gl.where(whole_tile, 0, k_first),
                    gl.where(whole_tile, k_steps, steps), 0, gl.where(whole_tile, 1, parts))
        else:
            past = gl.maximum(unit - whole, 0)
            split = past % SPLITS
            k_first = gl.where(unit < whole, 0, split * k_per)
            steps = gl.where(unit < whole, k_steps, gl.minimum(k_per, k_steps - k_first))
            return gl.where(unit < whole, unit, whole + past // SPLITS), k_first, steps, split, SPLITS

    @gluon.jit
    def _partial_ptrs(acc, ws_ptr, index, row0, TILE_M: gl.constexpr):
        """Where an fp32 partial (the tile's rows from row0 on, all its columns) lies in workspace slice `index`."""
        layout: gl.constexpr = acc.type.layout
        rows = row0 + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
        return (ws_ptr + index * (TILE_M * acc.shape[1]) + gl.expand_dims(rows, 1) * acc.shape[1]
                + gl.expand_dims(cols, 0))

    @gluon.jit
    def _summed(acc, ws_ptr, first, row0, TILE_M: gl.constexpr, SPLITS: gl.constexpr):
        """The tile's whole sum: its splits' slices (from slice `first`), added in split order (through L2: other
        SMs wrote them)."""
        ptrs = _partial_ptrs(acc, ws_ptr, first, row0, TILE_M)
        total = gl.load(ptrs, cache_modifier=".cg")
        for s in gl.static_range(1, SPLITS):
            total += gl.load(ptrs + s * (TILE_M * acc.shape[1]), cache_modifier=".cg")
        return total

    @gluon.jit
    def _taken(acc, ws_ptr, index, row0, TILE_M: gl.constexpr):
        """The atomics' sum in slice `index` (through L2: other SMs added to it), left zero for the next call."""
        ptrs = _partial_ptrs(acc, ws_ptr, index, row0, TILE_M)
        total = gl.load(ptrs, cache_modifier=".cg")
        gl.store(ptrs, gl.zeros_like(total))
        return total

    @gluon.jit
    def meet(
        acc0, acc1,                                              # this consumer's fp32 tiles (row waves, or one)
        ws_ptr, count_ptr, counter,                              # workspace, counters, this consumer's counter
        tile, whole, split, parts, row0,                         # the unit's tile, split, the tile's units, first
                                                                 # row in the tile
        TILE_M: gl.constexpr,                                    # the tile's rows
        SPLITS: gl.constexpr, TILES: gl.constexpr,               # units per split tile, tensors held (1 or 2 row
                                                                 # waves)
        ATOMIC: gl.constexpr,                                    # added into one slice, not stored in its own
    ):
        """Meet the tile's other splits: (last, acc0, acc1), last true in the unit that counted last, whose tiles
        are then the whole sums.  acc1 (TILES 2) holds the rows after acc0's."""
        WAVE_M: gl.constexpr = acc0.shape[0]
        if ATOMIC:
            first = tile - whole  # the tile's one slice
            gl.atomic_add(_partial_ptrs(acc0, ws_ptr, first, row0, TILE_M), acc0, sem="relaxed")
            if TILES == 2:
                gl.atomic_add(_partial_ptrs(acc1, ws_ptr, first, row0 + WAVE_M, TILE_M), acc1, sem="relaxed")
        else:
            first = (tile - whole) * SPLITS  # the tile's first slice
            gl.store(_partial_ptrs(acc0, ws_ptr, first + split, row0, TILE_M), acc0)
            if TILES == 2:
                gl.store(_partial_ptrs(acc1, ws_ptr, first + split, row0 + WAVE_M, TILE_M), acc1)
        # every thread's partial is out (stored or added) before one thread's release-increment of the counter (the
        # CUTLASS semaphore pattern); the acquire side makes the other units' partials visible to the one that counts
        # last
        cta_barrier()
        last = gl.atomic_add(count_ptr + counter, 1, sem="acq_rel") == parts - 1
        if last:
            if ATOMIC:
                acc0 = _taken(acc0, ws_ptr, first, row0, TILE_M)
                if TILES == 2:
                    acc1 = _taken(acc1, ws_ptr, first, row0 + WAVE_M, TILE_M)
            else:
                acc0 = _summed(acc0, ws_ptr, first, row0, TILE_M, SPLITS)
                if TILES == 2:
                    acc1 = _summed(acc1, ws_ptr, first, row0 + WAVE_M, TILE_M, SPLITS)
            gl.store(count_ptr + counter, 0)
        return last, acc0, acc1

    # fmt: on
