"""The Gluon GEMM (gemmbench/kernels/gluon_ws*.py) on the GPU: every schedule, 16-bit and fp8 (per tensor,
row-wise and block scales, precise and fast accumulation, the promotion in the wgmma lowering, overlapped in the K
loop and in row waves, one wave also with a step's lag, the waves, the lag and split-K at every stage count they
fit), tiles that leave partial tiles in M, N and K, programs with several tiles each (so the two ping-pong consumers take
turns), decode M, and several calls of one launch.  Each result is checked against the fp32 reference through
the one check.  No timing is asserted."""

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture
def split_as_configured(monkeypatch):
    """A tail split or stream-K runs as configured at every shape: the launch rule that runs it whole where the split
    model finds it does not pay (gluon_ws_space.launched_split) has its CPU tests, and these test the kernel."""
    from gemmbench.kernels import gluon_ws_space

    monkeypatch.setattr(gluon_ws_space, "launched_split", lambda problem, config, sms: config)


# (M, N, K): decode M 1; partial tiles in M, N and K (N 1008: not a multiple of 64, K 1040: of 128); 2048 x 8192
# at 128 x 128 is 1024 tiles, about 8 per program on 132 SMs
SHAPES = [(1, 1280, 8192), (333, 1008, 1040), (2048, 8192, 1024)]
CASES = [("bf16", "none", "precise"), ("fp16", "none", "precise"), ("fp8", "tensor", "precise"),
         ("fp8", "row", "precise"), ("fp8", "tensor", "fast"), ("fp8", "row", "fast"), ("fp8", "block", "precise"),
         ("fp8", "block-ue8m0", "precise")]  # fmt: skip
TILES = [  # (schedule, BLOCK_M, BLOCK_N, warps, stages, extra)
    ("ws", 128, 128, 8, 4, {"BLOCK_N2": 32}),
    ("pingpong", 128, 128, 4, 4, {"BLOCK_N2": 32}),
    ("pipelined", 128, 128, 4, 4, {}),
    ("persistent", 128, 256, 8, 3, {}),
    ("ws", 256, 128, 8, 3, {}),
    ("ws", 128, 128, 8, 4, {"PROMOTE_OVERLAP": True}),
    ("ws", 64, 128, 4, 6, {}),
    ("pingpong", 128, 128, 4, 4, {"GROUP_M": 1}),
    ("pingpong", 64, 128, 4, 6, {"PROMOTE_OVERLAP": True}),
    # the overlapped partials in trips of four K steps (K 1040: two trips and one step alone; K 1024: two trips), on
    # the cooperative tile and on each half of the halves' rows
    ("ws", 128, 64, 8, 6, {"PROMOTE_OVERLAP": True}),
    ("halves", 128, 64, 4, 6, {"PROMOTE_OVERLAP": True}),
    # and where four tiles of them fit the registers with promotion: ping-pong's, and split-K's shares shorter than a
    # trip (the tail alone, from each share's first K step) meeting by atomics, as the H200's N 1280 M 128 config runs
    ("pingpong", 64, 64, 4, 6, {"PROMOTE_OVERLAP": True}),
    # with a second accumulator, 64 + 16 = 80 wide (N 1008: the last tile's second accumulator partly or wholly past N)
    ("halves", 128, 64, 4, 6, {"PROMOTE_OVERLAP": True, "BLOCK_N2": 16}),
    ("ws", 128, 64, 8, 6, {"PROMOTE_OVERLAP": True, "BLOCK_N2": 16}),
    ("ws", 64, 64, 8, 4, {"PROMOTE_OVERLAP": True, "SPLIT_K": 3, "SPLIT_ATOMIC": True, "SPLIT_TAIL": True}),
    ("ws", 256, 128, 8, 3, {"PROMOTE_WAVES": 2}),
    ("ws", 128, 256, 8, 3, {"PROMOTE_WAVES": 2}),
    ("ws", 128, 128, 8, 4, {"PROMOTE_WAVES": 1}),
    ("ws", 128, 128, 8, 4, {"PROMOTE_WAVES": 2}),
    ("halves", 256, 128, 4, 3, {"PROMOTE_WAVES": 2}),
    ("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1}),
    # the waves with a second accumulator: 128 + 32 = 160 and 64 + 16 = 80 wide (N 1008: the last tile's second
    # accumulator partly or wholly past N)
    ("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1, "BLOCK_N2": 32}),
    ("halves", 128, 64, 4, 4, {"PROMOTE_WAVES": 1, "BLOCK_N2": 16}),
    ("ws", 128, 128, 8, 4, {"PROMOTE_WAVES": 2, "BLOCK_N2": 32}),
    # 128 + 64 = 192 wide (the tile fitted to M 333's waves): cooperative at each stage count it fits (16-bit and
    # fp8 fast: (128 + 192) x 128 B a stage and a 49152 B output tile, 4 x 40960 + 49152 = 212992 B), and the halves
    # (the waves' test below takes them through every stage count); N 1008: the second accumulator past N
    ("ws", 128, 128, 8, 2, {"BLOCK_N2": 64}),
    ("ws", 128, 128, 8, 3, {"BLOCK_N2": 64}),
    ("ws", 128, 128, 8, 4, {"BLOCK_N2": 64}),
    ("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1, "BLOCK_N2": 64}),
    # 256 wide in one accumulator (16-bit and fp8 fast; the tile fitted where its one wave loads least): (128 + 256) x
    # 128 B a stage and a 65536 B output tile, 3 stages; N 1008: the tile's last 16 columns past N
    ("ws", 128, 256, 8, 3, {}),
    # the halves without promotion (16-bit and fp8 fast; fp8 fast at decode M promotes in the wgmma lowering): each
    # consumer Triton's plain K loop on its 64 rows, 128 + 64 = 192 wide at 4 stages, 256 wide at 3, 64 wide at 8
    ("halves", 128, 128, 4, 4, {"BLOCK_N2": 64}),
    ("halves", 128, 256, 4, 3, {}),
    ("halves", 128, 64, 4, 8, {}),
    # split-K: K steps 64, 9 (fp8) and 17 (16-bit) in shares of 22, 3 (3 launched of 4) and 5 (the last 2);
    # 2048 x 8192 gives each program many units, each tile's counters reused within one launch
    ("ws", 128, 128, 8, 4, {"SPLIT_K": 3}),
    ("ws", 128, 128, 8, 4, {"SPLIT_K": 4, "PROMOTE_OVERLAP": True}),
    ("ws", 128, 128, 8, 4, {"SPLIT_K": 4, "PROMOTE_WAVES": 1}),
    ("halves", 128, 128, 4, 4, {"SPLIT_K": 4, "PROMOTE_WAVES": 1}),
    # split past the whole waves: partial tiles and decode M (no whole wave: every tile split); at 2048 x 8192 x 1024
    # the 100 tiles past seven whole waves, split though the split model finds it does not pay (split_as_configured)
    ("halves", 128, 128, 4, 4, {"SPLIT_K": 4, "PROMOTE_WAVES": 1, "SPLIT_TAIL": True}),
    ("ws", 128, 128, 8, 4, {"SPLIT_K": 4, "SPLIT_TAIL": True}),
    # the splits meeting by atomics: every tile split, the tail only, and the two row waves' slices of the halves
    ("ws", 128, 128, 8, 4, {"SPLIT_K": 3, "SPLIT_ATOMIC": True}),
    ("ws", 64, 128, 4, 6, {"SPLIT_K": 8, "SPLIT_ATOMIC": True, "SPLIT_TAIL": True}),
    ("halves", 128, 128, 4, 4, {"SPLIT_K": 4, "PROMOTE_WAVES": 1, "SPLIT_ATOMIC": True, "SPLIT_TAIL": True}),
    # the halves without promotion split, each consumer's rows meeting in their own slice rows: in split order, and
    # the tail by atomics
    ("halves", 128, 128, 4, 4, {"SPLIT_K": 3}),
    ("halves", 128, 128, 4, 4, {"SPLIT_K": 4, "SPLIT_ATOMIC": True, "SPLIT_TAIL": True}),
]


def _candidate(case, tile) -> bool:
    from gemmbench.kernels.gluon_ws_config import GluonConfig, fits

    (dtype, _, accum), (schedule, bm, bn, warps, stages, extra) = case, tile
    config = GluonConfig.tile(bm, bn, 128 if dtype == "fp8" else 64, warps, stages, SCHEDULE=schedule, **extra)
    block = case[1].startswith("block")
    return fits(config, 1 if dtype == "fp8" else 2, dtype == "fp8" and accum == "precise", block)


# Each tile with each case its search space would try (fits(): tests/test_gluon_ws.py checks what it keeps out)
RUNS = [(case, tile) for case in CASES for tile in TILES if _candidate(case, tile)]


def _run_id(run) -> str:
    """A run's id: its case and tile, with the tile's extra fields (-k BLOCK_N2_64 picks the 192-wide ones)."""
    case, (*tile, extra) = run
    return "-".join(map(str, (*case, *tile, *(f"{k}_{v}" for k, v in extra.items()))))


@pytest.mark.parametrize("case,tile", RUNS, ids=[_run_id(r) for r in RUNS])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gluon_on_gpu(M, N, K, case, tile, split_as_configured):
    from gemmbench import registry
    from gemmbench.kernels.gluon_ws_config import GluonConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    dtype, scaling, accum = case
    v = registry.get("gluon_ws")
    p = Problem("test", "g", M, N, K, dtype, scaling=scaling, fp8_accum=accum)
    assert v.unsupported_reason(p, detect()) is None
    schedule, bm, bn, warps, stages, extra = tile
    bk = 128 if dtype == "fp8" else 64
    config = GluonConfig.tile(bm, bn, bk, warps, stages, SCHEDULE=schedule, **extra)
    inputs = make_inputs(p, 3, "cuda")
    launch = v.tunable.build(p, inputs, config)
    ref = reference(p, inputs)
    for call in range(2):  # a persistent program's barriers and ring start afresh every launch
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"
    reported = launch.config["ptxas"]
    assert reported["registers"] > 0 and reported["spills"] >= 0


# the waves' quick tiles (gluon_ws._QUICK) and the halves': (schedule, BLOCK_M, BLOCK_N, BLOCK_N2, warps, waves) and
# the stage counts from 2 that fit, by hand.  Shared memory: (BLOCK_M + BLOCK_N) x 128 B a stage and 2 B an output
# element per consumer, within 232448 B: 256 x 128 and 128 x 256, 49152 a stage + 65536: 3 stages; 128 x 128 on one
# consumer, 32768 + 32768: 6, but 5 with block scales (1024 B more a stage: 6 x 33792 + 32768 = 235520); 256 rows
# with block scales, 2048 B more a stage: 3 x 51200 + 65536 = 219136, still 3; halves, two half-tiles: as one
# consumer.  Registers (192 of accumulators; block scales are staged in shared memory): 128 + 64 a thread for the
# first two and the 256-row halves (4 warps on 128 rows), 64 + 64 for 128 x 128 in one wave on 8 warps and for 128-row
# halves (64 rows on 4 warps); 128 x 256 spans two weight blocks, which the waves do not scale.
WAVE_TILES = [
    ("ws", 256, 128, 0, 8, 2, {"tensor": 2, "row": 2, "block": 2}),
    ("ws", 128, 256, 0, 8, 2, {"tensor": 2, "row": 2, "block": 0}),
    ("ws", 128, 128, 0, 8, 1, {"tensor": 5, "row": 5, "block": 4}),
    ("halves", 256, 128, 0, 4, 2, {"tensor": 2, "row": 2, "block": 2}),
    ("halves", 128, 128, 0, 4, 1, {"tensor": 5, "row": 5, "block": 4}),
    # a second accumulator of BN2 columns (not with block scales, which scale a tile by one weight block's scale):
    # 128 x (128 + 32), stages of (128 + 160) x 128 = 36864 B and a 128 x 160 bf16 output tile of 40960 B (halves: two
    # half-tiles), 5 stages; 128 x (64 + 16), 26624 B a stage and 20480 B: 7 (206848 B)
    ("halves", 128, 128, 32, 4, 1, {"tensor": 4, "row": 4, "block": 0}),
    ("ws", 128, 128, 32, 8, 2, {"tensor": 4, "row": 4, "block": 0}),
    ("halves", 128, 64, 16, 4, 1, {"tensor": 6, "row": 6, "block": 0}),
    # 128 x (128 + 64): stages of 40960 B and a 49152 B output tile, 4 x 40960 + 49152 = 212992 B (5: 253952): 3
    # stage counts; registers: the halves 64 x 192 on 4 warps, 96 a thread and one wave's partial, 96: 192; 8 warps in
    # two waves, 96 and 48
    ("halves", 128, 128, 64, 4, 1, {"tensor": 3, "row": 3, "block": 0}),
    ("ws", 128, 128, 64, 8, 2, {"tensor": 3, "row": 3, "block": 0}),
    # 64 wide: 24576 B a stage (25600 with block scales' 2 x 128 fp32) and a 16384 B output tile: 8 stages, 212992
    # (221184) B
    ("halves", 128, 64, 0, 4, 1, {"tensor": 7, "row": 7, "block": 7}),
    # one consumer warpgroup on a 64-row tile 64 + 16 = 80 wide (the tune's space holds it): (64 + 80) x 128 = 18432 B
    # a stage and a 64 x 80 output tile of 10240 B: 8 stages hold 157696 B, every count from 2 fits
    ("ws", 64, 64, 16, 4, 1, {"tensor": 7, "row": 7, "block": 0}),
]


@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
@pytest.mark.parametrize("tile", WAVE_TILES, ids=lambda t: "-".join(map(str, t[:6])))
def test_waves_at_every_stage_count_they_fit(tile, scaling):
    """A ring's races show at some stage counts only (a stage refilled under a wgmma still reading it): each wave
    tile at 2 stages to the space's deepest, wherever it fits, on partial tiles and on many tiles a program."""
    _waves_at_every_stage_count(tile, scaling, None)


@pytest.mark.parametrize("scaling", ["tensor", "block"])
@pytest.mark.parametrize("tile", [t for t in WAVE_TILES if t[0] == "halves"], ids=lambda t: "-".join(map(str, t[:6])))
def test_the_halves_the_other_way_of_taking_turns_at_every_stage_count(tile, scaling):
    """The halves' waves each way of taking turns (TURNS set against the scales' default: per tensor in turns,
    block scales without), at every stage count they fit: the turns' barriers change which consumer can run a lap
    ahead of the other on the ring."""
    _waves_at_every_stage_count(tile, scaling, scaling != "block")


def _waves_at_every_stage_count(tile, scaling, turns, lag=None, shapes=((333, 1008, 1040), (2048, 8192, 1024))) -> None:
    from gemmbench import registry
    from gemmbench.kernels.gluon_ws_config import GluonConfig, fits
    from gemmbench.kernels.gluon_ws_space import STAGE_CHOICES
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    schedule, bm, bn, bn2, warps, waves, stage_counts = tile
    v = registry.get("gluon_ws")
    ran = 0
    for M, N, K in shapes:
        p = Problem("test", "g", M, N, K, "fp8", scaling=scaling, fp8_accum="precise")
        inputs = make_inputs(p, 7, "cuda")
        ref = reference(p, inputs)
        for stages in range(2, max(STAGE_CHOICES) + 1):
            config = GluonConfig.tile(bm, bn, 128, warps, stages, SCHEDULE=schedule, PROMOTE_WAVES=waves,
                                      BLOCK_N2=bn2, TURNS=turns, PROMOTE_LAG=lag)  # fmt: skip
            if not fits(config, 1, True, scaling == "block"):
                continue
            launch = v.tunable.build(p, inputs, config)
            assert launch.config.get("TURNS") == turns and launch.config.get("PROMOTE_LAG") == lag
            for call in range(2):
                result = check_cell(p, None, inputs, launch=launch, ref=ref).result
                assert result.ok, f"K {K}, {stages} stages, call {call}: {result.detail}"
            ran += 1
    assert ran == len(shapes) * stage_counts[scaling]


# the one-wave tiles (gluon_ws_space.one_wave_config): one consumer warpgroup on 64 rows, 64 + 0, 16 or 32 wide, fp8
# promoted in the overlapped partials where the problem promotes.  Every stage count from 2 to the space's deepest
# fits, by hand: (64 + 96) x 128 B = 20480 B a stage (16-bit: 64 x 2 B a row, the same) and a 12288 B output tile, 8
# stages 176128 B; registers 64 x 96 / 128 threads = 48 fp32 a thread, four tiles with the partials: 192
@pytest.mark.parametrize("bn2", [0, 16, 32])
@pytest.mark.parametrize("case", [("fp8", "tensor", "precise"), ("fp8", "row", "precise"), ("fp8", "tensor", "fast"),
                                  ("bf16", "none", "precise")], ids="-".join)  # fmt: skip
def test_the_one_wave_tiles_at_every_stage_count(case, bn2):
    from gemmbench import registry
    from gemmbench.configs import tuning
    from gemmbench.kernels.gluon_ws_config import GluonConfig, fits
    from gemmbench.kernels.gluon_ws_space import STAGE_CHOICES, promotes
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    dtype, scaling, accum = case
    fp8 = dtype == "fp8"
    v = registry.get("gluon_ws")
    ran = 0
    # partial tiles in M, N and K; and TP 8's QKV at M 512, 8 x 16 = 128 tiles of 64 x 80 in one wave
    for M, N, K in [(333, 1008, 1040), (512, 1280, 8192)]:
        p = Problem("test", "g", M, N, K, dtype, scaling=scaling, fp8_accum=accum)
        inputs = make_inputs(p, 13, "cuda")
        ref = reference(p, inputs)
        overlap = promotes(p)
        for stages in range(2, max(STAGE_CHOICES) + 1):
            config = GluonConfig.tile(64, 64, 128 if fp8 else 64, 4, stages, SCHEDULE="ws", BLOCK_N2=bn2,
                                      PROMOTE_OVERLAP=overlap)  # fmt: skip
            assert fits(config, 1 if fp8 else 2, overlap)
            launch = v.tunable.build(p, inputs, config)
            if tuning.sm_count() == 132:  # there each width fills no worse than 64 wide: launched as it is
                assert launch.params == config
            for call in range(2):
                result = check_cell(p, None, inputs, launch=launch, ref=ref).result
                assert result.ok, f"{stages} stages, call {call}: {result.detail}"
            ran += 1
    assert ran == 2 * 7


@pytest.mark.parametrize(
    "tile,scaling",
    [(("halves", 256, 128, 2), s) for s in ("tensor", "row", "block")] + [(("halves", 128, 128, 1), "block")],
    ids=lambda x: "-".join(map(str, x)) if isinstance(x, tuple) else x,
)
def test_the_peeled_wave_loop_with_one_k_step(tile, scaling):
    """K of one step (K 128, BLOCK_K 128): the peeled loop (two waves, or block scales) runs no trip and its peeled
    last step does all: the first wave issued before the loop, the second wave, the promotions, the one release."""
    from gemmbench import registry
    from gemmbench.kernels.gluon_ws_config import GluonConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    schedule, bm, bn, waves = tile
    p = Problem("test", "g", 333, 1008, 128, "fp8", scaling=scaling, fp8_accum="precise")
    inputs = make_inputs(p, 11, "cuda")
    config = GluonConfig.tile(bm, bn, 128, 4, 3, SCHEDULE=schedule, PROMOTE_WAVES=waves)
    launch = registry.get("gluon_ws").tunable.build(p, inputs, config)
    ref = reference(p, inputs)
    for call in range(2):
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"


# the one wave with a step's lag (PROMOTE_LAG: two partials in turn) in trips of 2 or 4 K steps, as WAVE_TILES, and the
# stage counts from 2 that fit, by hand: shared memory as the waves'; registers, the fp32 tile and two partials, as
# three tiles in trips of 2 and four in trips of 4, within 192: 64 x 128 a warpgroup (the halves, and 128 rows on 8
# warps), 64 a thread a tile, 192 in trips of 2 (256 in trips of 4: out); 64 x (64 + 16), 40 a tile, 120 and 160
LAG_TILES = [
    (("halves", 128, 128, 0, 4, 1, {"tensor": 5, "row": 5, "block": 4}), (2,)),
    (("ws", 128, 128, 0, 8, 1, {"tensor": 5, "row": 5, "block": 4}), (2,)),
    (("halves", 128, 64, 16, 4, 1, {"tensor": 6, "row": 6, "block": 0}), (2, 4)),
]
LAG_RUNS = [(t, s, trip) for t, trips in LAG_TILES for s in ("tensor", "row", "block") if t[-1][s] for trip in trips]
# K steps 9 (K 1040: trips and one step alone), 8 (K 1024, many tiles a program: trips only), 1 (K 128: one step
# alone, no trip) and 2 (K 256: one trip of 2, or two steps alone)
LAG_SHAPES = ((333, 1008, 1040), (2048, 8192, 1024), (333, 1008, 128), (333, 1008, 256))


@pytest.mark.parametrize(
    "tile,scaling,trip", LAG_RUNS, ids=[f"{'-'.join(map(str, t[:5]))}-{s}-trip{r}" for t, s, r in LAG_RUNS]
)
def test_the_lagged_wave_at_every_stage_count(tile, scaling, trip):
    """The lag's loop takes K steps in trips, the steps past the last whole trip one at a time: each trip length on K
    steps that fill trips, leave one step over, or make no trip, at every stage count the tile fits (the halves in
    turns with block scales, on their own with the others: each scales' default)."""
    _waves_at_every_stage_count(tile, scaling, None, lag=trip, shapes=LAG_SHAPES)


# split-K's quick tiles (gluon_ws._SPLIT_QUICK) and the stage counts from 2 that fit, by hand: 128 x 128 fp8 stages
# of 32768 B and one 32768 B output tile (halves: two half-tiles): 6 within 232448 B; 5 where the waves hold block
# scales in each stage (33792 B a stage)
# (block scales have no fast contract)
SPLIT_TILES = [("ws", 128, 128, 8, 0, "fast"), ("halves", 128, 128, 4, 1, "precise"), ("ws", 128, 128, 8, 1, "precise")]
SPLIT_RUNS = [(t, s) for t in SPLIT_TILES for s in ("tensor", "row", "block") if not (s == "block" and t[-1] == "fast")]


@pytest.mark.parametrize("atomic", [None, True], ids=["ordered", "atomic"])
@pytest.mark.parametrize("tile,scaling", SPLIT_RUNS, ids=lambda x: "-".join(map(str, x)))
def test_split_k_at_every_stage_count_is_right_and_the_same_every_call(tile, scaling, atomic, split_as_configured):
    """Split-K's units share the ring like tiles and meet through a workspace and a counter per tile: every stage
    count from 2 that fits (2-6), a small output (4 x 10 tiles in 3 splits of 22, 22 and 20 K steps) and many units a program, every
    tile split or only those past the whole waves (12 x 78 = 936 tiles: seven waves of 132 whole, then 12 split in
    shares of 6, 6 and 4 K steps; 8 x 18 = 144 tiles: one wave whole, then 12 split); the counters left zero let
    the second call meet at all.  Ordered, the splits are summed in split order, so two calls give the same bits;
    by atomics, the second call is right only if the first left its slices zero, which the test sees too."""
    _split_k_at_every_stage_count(tile, scaling, atomic, None)


@pytest.mark.parametrize("atomic", [None, True], ids=["ordered", "atomic"])
@pytest.mark.parametrize("scaling", ["tensor", "block"])
def test_split_halves_the_other_way_of_taking_turns(scaling, atomic, split_as_configured):
    """The split halves with TURNS set against the scales' default (per tensor in turns, block scales without):
    both consumers take every unit in one order, so their turns pair up across the units and the meetings."""
    _split_k_at_every_stage_count(SPLIT_TILES[1], scaling, atomic, scaling != "block")


@pytest.mark.parametrize("atomic", [None, True], ids=["ordered", "atomic"])
@pytest.mark.parametrize("scaling", ["tensor", "block"])
def test_split_halves_with_the_lag(scaling, atomic, split_as_configured):
    """The split halves in one wave with a step's lag: a unit's share of K steps (22, 22 and 20; 3, 3 and 2; 6, 6
    and 4) starts its pairs where the share starts, after its odd step if it has one."""
    _split_k_at_every_stage_count(SPLIT_TILES[1], scaling, atomic, None, lag=2)


@pytest.mark.parametrize("tile,scaling", SPLIT_RUNS, ids=lambda x: "-".join(map(str, x)))
def test_stream_k_at_every_stage_count(tile, scaling, split_as_configured):
    """Stream-K's pieces: every stage count from 2 that fits; 4 x 10 tiles (M 512, N 1280) of 64 K steps shared by
    132 programs, 19 or 20 steps each, so most shares end inside a tile and go on in the next, and a tile meets 2 or
    4 pieces; M 333 (3 x 10 tiles, 15 or 14 steps a share, the last tile's rows partial); and the tails past whole
    waves, 12 tiles of 16 K steps shared by 132 (936 and 144 tiles: 1 or 2 steps each, a tile's 16 steps in 9 or
    10 pieces), and a tail of fewer steps than programs (8 x 17 = 136 tiles: 4 past one wave, 32 K steps, one a
    program for the first 32, none for the other 100).  The second call is right only if the first left the slices
    and counters zero."""
    _split_k_at_every_stage_count(tile, scaling, True, None, stream=True)


@pytest.mark.parametrize("scaling", ["tensor", "block"])
def test_stream_k_halves_with_the_lag(scaling, split_as_configured):
    """The streamed halves in one wave with a step's lag: a piece of 1 to 20 K steps in trips of two and a step
    over."""
    _split_k_at_every_stage_count(SPLIT_TILES[1], scaling, True, None, lag=2, stream=True)


def _split_k_at_every_stage_count(tile, scaling, atomic, turns, lag=None, stream=False) -> None:
    import torch

    from gemmbench import registry
    from gemmbench.kernels.gluon_ws_config import GluonConfig, fits
    from gemmbench.kernels.gluon_ws_space import STAGE_CHOICES
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    schedule, bm, bn, warps, waves, accum = tile
    v = registry.get("gluon_ws")
    ran = 0
    shapes = [(512, 1280, 8192, None), (2048, 8192, 1024, None), (1536, 9984, 2048, True), (1024, 2304, 2048, True)]
    if stream:
        shapes = [(512, 1280, 8192, None), (333, 1280, 8192, None), (1536, 9984, 2048, True), (1024, 2304, 2048, True),
                  (1024, 2176, 1024, True)]  # fmt: skip
    for M, N, K, tail in shapes:
        p = Problem("test", "g", M, N, K, "fp8", scaling=scaling, fp8_accum=accum)
        inputs = make_inputs(p, 11, "cuda")
        ref = reference(p, inputs)
        for stages in range(2, max(STAGE_CHOICES) + 1):
            config = GluonConfig.tile(bm, bn, 128, warps, stages, SCHEDULE=schedule, PROMOTE_WAVES=waves, SPLIT_K=3,
                                      SPLIT_TAIL=tail, SPLIT_ATOMIC=atomic, TURNS=turns, PROMOTE_LAG=lag)  # fmt: skip
            if stream:
                config = config.streamed()
            if not fits(config, 1, accum == "precise", scaling == "block"):
                continue
            launch = v.tunable.build(p, inputs, config)
            if stream:
                assert launch.config["STREAM_K"] and "SPLIT_K" not in launch.config and launch.fn.streamed
            else:
                assert launch.config["SPLIT_K"] == 3
            assert launch.config.get("TURNS") == turns and launch.config.get("PROMOTE_LAG") == lag
            assert (launch.fn.whole > 0) == bool(tail)  # the tail's split tiles follow whole waves here
            outputs = []
            for call in range(2):
                result = check_cell(p, None, inputs, launch=launch, ref=ref).result
                assert result.ok, f"{stages} stages, call {call}: {result.detail}"
                outputs.append(launch.out.clone())
            if atomic:
                assert launch.fn.atomic and not launch.fn.workspace.any(), f"{stages} stages: slices left unzeroed"
            else:
                assert torch.equal(*outputs), f"{stages} stages: two calls differ"
            ran += 1
    assert ran == len(shapes) * (4 if waves and scaling == "block" else 5)  # each shape at stages 2 to 6 (or 5)


@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("M,N,K", [(1, 1280, 8192), (1, 5120, 16384), (1, 16384, 53248), (333, 256, 7168)])
def test_fast_accumulation_where_it_promotes_is_within_the_fast_tolerance(M, N, K, scaling):
    """At decode M and on few tiles the kernel promotes under the fast contract (gluon_ws.promotes): one
    reduced-precision chain over all of these K was outside the fast tolerance, which follows cuBLAS's accurate
    kernels there; through make, its own choice."""
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "g", M, N, K, "fp8", scaling=scaling, fp8_accum="fast")
    inputs = make_inputs(p, 5, "cuda")
    launch = registry.get("gluon_ws").make(p, inputs)
    result = check_cell(p, None, inputs, launch=launch).result
    assert result.ok, result.detail


def test_gluon_through_make_on_gpu():
    """The variant as a sweep runs it: make() picks among the quick candidates where no config is shipped (no
    shipped file holds N 1536, K 4096), and the row's config names them."""
    from gemmbench import registry
    from gemmbench.kernels.gluon_ws_config import GluonConfig
    from gemmbench.kernels.gluon_ws_space import search_space
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    for accum in ("precise", "fast"):
        p = Problem("test", "g", 512, 1536, 4096, "fp8", fp8_accum=accum)
        inputs = make_inputs(p, 5, "cuda")
        launch = registry.get("gluon_ws").make(p, inputs)
        assert check_cell(p, None, inputs, launch=launch).result.ok
        ran = GluonConfig.from_dict({k: v for k, v in launch.config.items() if k in GluonConfig.__dataclass_fields__})
        assert ran in search_space(p, on_gpu=True, full=False)


def test_m_between_two_stored_buckets_times_the_fitted_tile_beside_them(tmp_path, monkeypatch):
    """M 333 between two buckets of the user's configs (256, 512): the run times both buckets' configs and the tile
    fitted to M 333 (gluon_ws_space.fitted_configs: on 132 SMs the 128 x 192 tile of least traffic, 3 x 43 = 129
    tiles; no 64-row tile fits one wave), takes the fastest, and the row's config names all three times; the winner is
    right on fresh data."""
    from gemmbench import registry
    from gemmbench.configs import config_files, tuning
    from gemmbench.kernels.gluon_ws_config import GluonConfig
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path))
    tuning._chosen.clear()
    gpu = detect().name
    for accum, low, high in [
        ("precise", GluonConfig.tile(128, 128, 128, 4, 6, SCHEDULE="halves", PROMOTE_WAVES=1),
         GluonConfig.tile(256, 128, 128, 4, 3, SCHEDULE="halves", PROMOTE_WAVES=2)),
        ("fast", GluonConfig.tile(128, 128, 128, 4, 4, SCHEDULE="pingpong"),
         GluonConfig.tile(128, 256, 128, 8, 3, SCHEDULE="ws")),
    ]:  # fmt: skip
        p = Problem("test", "g", 333, 8192, 8192, "fp8", fp8_accum=accum)
        for bucket, config in ((256, low), (512, high)):
            config_files.save("gluon_ws", p.with_(M=bucket), gpu, config, 1.0, {})
        inputs = make_inputs(p, 9, "cuda")
        launch = registry.get("gluon_ws").make(p, inputs)
        assert launch.config["source"] in ("fitted", "stored-neighbour")
        assert set(launch.config["neighbours_us"]) == {"256", "512"} and launch.config["fitted_us"] > 0
        if tuning.sm_count() == 132:
            (fitted,) = registry.get("gluon_ws").tunable.fitted(p)
            assert (fitted.BLOCK_M, fitted.BLOCK_N + fitted.BLOCK_N2) == (128, 192)
        assert check_cell(p, None, inputs, launch=launch).result.ok
    tuning._chosen.clear()


@pytest.mark.parametrize("dtype,accum", [("fp8", "precise"), ("fp8", "fast"), ("bf16", "none")])
def test_the_fitted_tile_of_a_small_output_is_right_split(dtype, accum):
    """M 333, N 1280 (TP 8's QKV): the 128-row tile of least traffic, split where its tiles leave SMs idle (on 132
    SMs the 128 x 64 tile in 2 units a tile: gluon_ws_space.least_traffic_config), is right on fresh data, as
    launched; so is the other config a run fits to this M, on 132 SMs the one-wave 64 x 64 tile."""
    from gemmbench import registry
    from gemmbench.configs import tuning
    from gemmbench.kernels.gluon_ws_space import least_traffic_config
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "g", 333, 1280, 8192, dtype, fp8_accum=accum)
    tunable = registry.get("gluon_ws").tunable
    split, fitted = least_traffic_config(p), tunable.fitted(p)[0]
    assert tunable.fitted(p)[-1] == split
    if tuning.sm_count() == 132:
        assert (split.BLOCK_M, split.BLOCK_N, split.splits()) == (128, 64, 2)
        assert (fitted.BLOCK_M, fitted.BLOCK_N, fitted.BLOCK_N2, fitted.splits()) == (64, 64, 0, 1)
    inputs = make_inputs(p, 13, "cuda")
    for config in (split, fitted):
        launch = tunable.build(p, inputs, config)
        assert launch.params == config  # launched as fitted, split and all
        result = check_cell(p, None, inputs, launch=launch).result
        assert result.ok, result.detail


@pytest.mark.parametrize("dtype,accum", [("fp8", "fast"), ("bf16", "none")])
def test_the_fitted_tile_256_wide_is_right(dtype, accum):
    """M 333, N 10240 (TP 1's QKV): the last config a run fits to this M is the 128 x 256 tile on 132 SMs (one wave
    of 120 tiles loads less than two of 128 columns: gluon_ws_space.fitted_configs), whole; right on fresh data, as
    launched (333 rows: the last row block part past M)."""
    from gemmbench import registry
    from gemmbench.configs import tuning
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "g", 333, 10240, 2048, dtype, fp8_accum=accum)
    tunable = registry.get("gluon_ws").tunable
    fitted = tunable.fitted(p)[-1]
    if tuning.sm_count() == 132:
        assert (fitted.BLOCK_M, fitted.BLOCK_N, fitted.BLOCK_N2, fitted.splits()) == (128, 256, 0, 1)
    inputs = make_inputs(p, 17, "cuda")
    launch = tunable.build(p, inputs, fitted)
    assert launch.params == fitted
    result = check_cell(p, None, inputs, launch=launch).result
    assert result.ok, result.detail


def test_gluon_refuses_unaligned_rows_on_gpu():
    """TMA reads and writes 16-byte rows: K or N that break them are refused with the reason, not miscomputed."""
    from gemmbench import registry
    from gemmbench.measure.device import detect
    from gemmbench.shapes import Problem

    v = registry.get("gluon_ws")
    assert "16-byte" in v.unsupported_reason(Problem("t", "g", 64, 1024, 1000, "fp8"), detect())
    assert "16-byte" in v.unsupported_reason(Problem("t", "g", 64, 1004, 1024, "bf16"), detect())
