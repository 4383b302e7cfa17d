"""The Gluon GEMM's search space (gluon_ws.py registers it): the quick candidates a run chooses among where no config is
stored, the full space `gemmbench tune` searches, and which contract each problem's promotion follows."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from gemmbench import dtypes
from gemmbench.configs import tuning
from gemmbench.configs.config_files import m_bucket
from gemmbench.kernels.gluon_ws_config import (
    SPLITTABLE,
    TWO_CONSUMERS,
    WARP_SPECIALIZED,
    GluonConfig,
    cdiv,
    fits,
    split_shares,
    tiles,
)
from gemmbench.kernels.tile_loop import block_scaled

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
    return cdiv(problem.M, 128) * cdiv(problem.N, 128) < tuning.sm_count()


def search_space(problem, on_gpu: bool, full: bool = True) -> list[GluonConfig]:
    """Candidates for `gemmbench tune` (full) or for a run that finds no stored config (the first few)."""
    return schedules_space(problem, full, WARP_SPECIALIZED)


# The quick candidates are each contract's fastest (docs/BENCHMARKS.md: "The Gluon kernel, step by step", on the
# H100; "Promoted fp8: the waves and the halves", on the H200): 16-bit and fp8 fast, cooperative 128 x 256 (8 warps,
# 3 stages) and ping-pong 128 x 128; fp8 promoted and block scales, the halves (two one-warpgroup consumers on a
# tile's row halves, each running the waves' K loop) of 256 x 128 in two waves and of 128 x 128 in one (fp8
# promoted: also with a step's lag, in trips of two); and for
# every contract but block scales the 128 + 32 = 160 wide tile, which fills the 132 SMs where N is 1280 (8 tiles
# across): its halves (16-bit and fp8 fast without promotion, faster than the cooperative tile: docs/BENCHMARKS.md,
# "The halves without promotion"; fp8 promoted in one wave, 4 stages: 6 of 160 columns overflow shared memory) and for
# fp8 promoted the cooperative one too.  128 x 256 with Triton's promotion needs 256 registers a thread (it spills:
# fits() keeps it out); four-warp cooperative tiles were slower than the eight-warp ones and stay out of the quick list.
_WIDE = {"BLOCK_N2": 32}
_QUICK = {
    "16-bit": (("ws", 128, 256, 8, 3, {}), ("pingpong", 128, 128, 4, 5, {}), ("halves", 128, 128, 4, 4, _WIDE)),
    "fast": (("ws", 128, 256, 8, 3, {}), ("pingpong", 128, 128, 4, 4, {}), ("halves", 128, 128, 4, 4, _WIDE)),
    "precise": (
        ("halves", 256, 128, 4, 3, {"PROMOTE_WAVES": 2}),
        ("halves", 128, 128, 4, 6, {"PROMOTE_WAVES": 1}),
        ("halves", 128, 128, 4, 6, {"PROMOTE_WAVES": 1, "PROMOTE_LAG": 2}),
        ("ws", 128, 128, 8, 4, _WIDE),
        ("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1, **_WIDE}),
    ),
    # block scales scale each K step's own sum: a wave's partial (the tile's columns in one 128-column weight block);
    # the 256-row halves in two waves are faster on outputs of many tiles, slower where they halve a few
    # (docs/BENCHMARKS.md, "Two waves in the peeled loop")
    "block": (
        ("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1}),
        ("ws", 128, 128, 8, 4, {"PROMOTE_WAVES": 1}),
        ("halves", 256, 128, 4, 3, {"PROMOTE_WAVES": 2}),
    ),
}
# split-K (outputs of fewer tiles than SMs, or a last wave that leaves SMs idle): each contract's 128 x 128 halves (the
# consumers take every unit in one order), the tiles past the whole waves split as the split model finds fastest
# (filling_split), once meeting in split order and once by atomics (docs/BENCHMARKS.md, "The Gluon kernel against its
# targets": TP 8's QKV at M 128)
_SPLIT_QUICK = {
    "16-bit": ("halves", 128, 128, 4, 4, {}),
    "fast": ("halves", 128, 128, 4, 4, {}),
    "precise": ("halves", 128, 128, 4, 6, {"PROMOTE_WAVES": 1}),
    "block": ("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1}),
}
# the widths (BLOCK_N, BLOCK_N2) a quick candidate takes where it fills the SMs' last wave better than 128 columns
# by FILL_MARGIN or more (filling_width): tiles 64, 80, 96, 128, 144, 160 and 192 wide
_FILLING_WIDTHS = ((64, 0), (64, 16), (64, 32), (128, 0), (128, 16), (128, 32), (128, 64))
# the filling widths and 256 in one accumulator, which the 16-bit and fp8 fast contracts hold (the promoted halves do
# not): a second tile fitted to an M off the buckets by its loads, offered beside the filling widths' own, since where
# it loads less it runs faster only in some launches (docs/BENCHMARKS.md, "The fitted tile 256 wide")
_LEAST_TRAFFIC_WIDTHS = _FILLING_WIDTHS + ((256, 0),)
# the filling tile's schedule, warps and ring depths, deepest that fits first: the halves, promoting in one wave where
# the contract promotes (as its quick candidates), its ring as deep as the search space's (docs/BENCHMARKS.md, "M
# between the buckets", "The fitted tile's width by its loads" and "The halves without promotion")
_FILLING = {"precise": ("halves", 4, (6, 5, 4, 3), {"PROMOTE_WAVES": 1}),
            "fast": ("halves", 4, (8, 7, 6, 5, 4, 3), {}), "16-bit": ("halves", 4, (8, 7, 6, 5, 4, 3), {})}  # fmt: skip
# the 256 wide tile of the contracts that hold it: the eight-warp cooperative one, which its halves ran no faster
# than, and in some launches slower (docs/BENCHMARKS.md, "The halves without promotion")
_FILLING_256 = {"fast": ("ws", 8), "16-bit": ("ws", 8)}
FILL_MARGIN = 0.05
# the one-wave tile: a warpgroup on 64 rows, 64 + 0, 16 or 32 columns wide, where its tiles fit in one wave of the
# SMs: an SM computes one tile of half the rows a 128-row tile's does, on more SMs; past one wave the 128-row tiles'
# reuse of their operands wins (docs/BENCHMARKS.md, "One wave of 64-row tiles")
_ONE_WAVE_WIDTHS = ((64, 0), (64, 16), (64, 32))
# the ring's depths: a narrow tile's stages are small, and where its loads are the bound (one row of tiles) more of
# them in flight pays, as cuBLAS's narrow-tile kernels hold (docs/BENCHMARKS.md, "The other M 128 misses"); fits()
# keeps out the depths shared memory cannot hold
STAGE_CHOICES = (3, 4, 5, 6, 7, 8)
SPLIT_CHOICES = (2, 3, 4, 6, 8, 12, 16)  # the full search's splits, where a config's tiles leave SMs idle
MIN_SPLIT_STEPS = 4  # K steps a split takes at least: fewer spend more on filling the ring and meeting than summing
# a round of meetings in K steps of the tile (the partials out through L2 by atomics, the count, the last unit's read
# of its slice, all latency rather than bytes): the high end of what it measured on the 128 x 128 halves, where timed
# launches on shapes of no stored config favoured it over the low end (docs/BENCHMARKS.md, "Stream-K, and what a
# meeting costs" and "What a meeting costs the model")
MEETING_STEPS = 22
MOST_SPLITS = 16  # the model's splits go no further: SPLIT_CHOICES' largest
# the second accumulator's widths tried beside 64 and 128 columns (narrower than the first): 80, 96, 144, 160 and 192
# wide tiles, which divide the N of more weights into about as many tiles as the GPU has SMs than powers of two do
_SECOND_WIDTHS = (0, 16, 32, 64)
# the ways a warp-specialized consumer promotes (PROMOTE_OVERLAP, PROMOTE_WAVES): Triton's wgmma lowering, the
# overlapped partials, the tile in one or two row waves; the halves' waves also each way of taking turns (TURNS: the
# scales' default, unset, and the other way), since which pays differs from tile to tile
_PROMOTIONS = ((False, 0), (True, 0), (False, 1), (False, 2))
# one wave's K steps a trip with a step's lag (PROMOTE_LAG), or none
_LAGS = (None, 2, 4)
# the one-partition steps: 128 x 256 on 8 warps, except with fp8 promotion (256 registers a thread: it spills),
# where 128 x 128 on 4 warps (192: it does not)
_STEP_QUICK = {"16-bit": (128, 256, 8, 3), "fast": (128, 256, 8, 3), "precise": (128, 128, 4, 4)}


def _tile_count(M: int, N: int, block_m: int, columns: int) -> int:
    """Output tiles of block_m rows and `columns` columns."""
    return cdiv(M, block_m) * cdiv(N, columns)


def wave_fill(tiles: int, sms: int) -> float:
    """The share of the launch's SM slots its tiles fill: tiles over whole waves' worth of them."""
    return tiles / (cdiv(tiles, sms) * sms)


def filling_width(problem, sms: int) -> Optional[tuple[int, int]]:
    """The 128-row halves' (BLOCK_N, BLOCK_N2) whose tiles fill the launch's waves best (the widest within a
    hundredth: fewer operand bytes per FLOP), where that beats 128 columns by FILL_MARGIN; None where 128 does as
    well.  A tile fills by its count, not its speed: the tune measures it against the others."""

    def fill(width: tuple[int, int]) -> float:
        return wave_fill(_tile_count(problem.M, problem.N, 128, sum(width)), sms)

    best = max(_FILLING_WIDTHS, key=lambda w: (round(fill(w), 2), sum(w)))
    return best if fill(best) >= fill((128, 0)) + FILL_MARGIN else None


def split_time(tiles: int, sms: int, steps: int, splits: int, atomic: bool = False) -> int:
    """A launch's time in K steps, as the split model counts it: the grid's whole waves of whole tiles, then the
    tiles past them in `splits` units each, a wave of units at a time, each unit's round ending in a meeting of
    MEETING_STEPS (by atomics: every unit adds its partial into the tile's one slice, the last reads it); in split
    order the last unit reads every split's slice, one K step more for each past the first."""
    whole_waves = tiles // sms if splits > 1 else 0
    rest = tiles - whole_waves * sms
    meeting = MEETING_STEPS + (0 if atomic else splits - 1) if splits > 1 else 0
    unit = cdiv(steps, splits) + meeting
    return whole_waves * steps + cdiv(rest * splits, sms) * unit


def filling_split(problem, config: GluonConfig, sms: int, atomic: Optional[bool] = None) -> int:
    """The split of the tiles past the grid's whole waves that the split model (split_time) finds fastest, each
    split MIN_SPLIT_STEPS K steps or more, the fewest splits among equals, its units meeting as `atomic` says (the
    config's own way where None); 1 where none beats the tiles whole."""
    atomic = bool(config.SPLIT_ATOMIC) if atomic is None else atomic
    steps = cdiv(problem.K, config.BLOCK_K)
    count = tiles(config, problem.M, problem.N)
    splits = range(1, max(1, min(MOST_SPLITS, steps // MIN_SPLIT_STEPS)) + 1)
    best = min(splits, key=lambda s: (split_time(count, sms, steps, s, atomic), s))
    return split_shares(best, steps)[0]  # the split a launch of it runs


def launched_split(problem, config: GluonConfig, sms: int) -> GluonConfig:
    """The config a launch runs: a stored tail split runs where the split model (filling_split) finds that some split
    of this problem's tail beats its tiles whole, and runs whole where none does.  A config is stored per M bucket:
    its split was chosen at the bucket's M, whose last wave another M of the bucket may not have (and the tune and
    the quick candidates split only where the model does, so at the M they were chosen for they run as chosen).
    Stream-K likewise: where no split of the tail pays, its tiles nearly fill their last wave, and the meeting of
    pieces spread over every program would cost more than the wave's idle SMs."""
    tail = (config.SPLIT_TAIL and config.splits() > 1) or config.STREAM_K
    if tail and filling_split(problem, config, sms, atomic=bool(config.SPLIT_ATOMIC or config.STREAM_K)) == 1:
        return config.split(1)
    return config


def launched_width(problem, config: GluonConfig, sms: int) -> GluonConfig:
    """The config a launch runs: a stored second accumulator (BLOCK_N2) runs where its wider tiles fill this
    problem's waves no worse than BLOCK_N alone by FILL_MARGIN, or where they did not fill them better at the M of
    the problem's bucket either; elsewhere the tile runs BLOCK_N wide.  A width is chosen per M bucket (the filling
    width among the quick candidates): one that fills 132 SMs at the bucket's M can leave them idle at a smaller M
    it serves (the M 512 bucket of N 10240 at 128 + 32: 256 tiles at M 512, two waves nearly full; 192 at M 333, a
    wave and a half).  At the bucket's own M it always runs as stored."""
    if runs_narrower(problem, config.BLOCK_M, (config.BLOCK_N, config.BLOCK_N2), sms):
        return replace(config, BLOCK_N2=0)
    return config


def runs_narrower(problem, block_m: int, width: tuple[int, int], sms: int) -> bool:
    """Whether a launch runs a block_m-row tile of this (BLOCK_N, BLOCK_N2) BLOCK_N wide at the problem's M
    (launched_width's rule)."""
    bn, bn2 = width
    if not bn2:
        return False

    def fill(columns: int, M: int) -> float:
        return wave_fill(_tile_count(M, problem.N, block_m, columns), sms)

    at, tuned_at = problem.M, m_bucket(problem.M)
    return fill(bn, at) >= fill(bn + bn2, at) + FILL_MARGIN and fill(bn + bn2, tuned_at) >= fill(bn, tuned_at)


def launched(problem, config: GluonConfig) -> GluonConfig:
    """The config a launch of `config` runs at this problem: its stored tail split and second accumulator where they
    still pay at this M (launched_split, launched_width)."""
    sms = tuning.sm_count()
    return launched_width(problem, launched_split(problem, config, sms), sms)


def _splits_of(problem, config: GluonConfig, sms: int) -> list[GluonConfig]:
    """The full search's splits of an unsplit config, for each way of meeting (ordered, atomic): where the model
    splits (filling_split), SPLIT_CHOICES up to twice its split and its split itself, and there its tail streamed
    (stream-K) too; the config itself first."""
    found = [config]
    if config.SCHEDULE not in SPLITTABLE:
        return found
    for atomic in (False, True):
        best = filling_split(problem, config, sms, atomic)
        if best > 1:
            choices = sorted({best} | {s for s in SPLIT_CHOICES if s <= 2 * best})
            found += [config.split(s, tail=True, atomic=atomic) for s in choices]
            if atomic:
                found.append(config.streamed())
    return found


def _operands(problem) -> tuple[int, int]:
    """(bytes an operand element, BLOCK_K) of the problem's dtype: fp8's K steps of 128, 16-bit's of 64."""
    return (1, 128) if problem.dtype == "fp8" else (2, 64)


def _contract(problem) -> str:
    """Which of the quick lists' contracts a problem runs: "block", "precise" (promoted fp8), "fast" or "16-bit"."""
    if problem.dtype != "fp8":
        return "16-bit"
    return "block" if block_scaled(problem) else "precise" if promotes(problem) else "fast"


def least_traffic_widths(
    problem, sms: int, widths: tuple[tuple[int, int], ...] = _FILLING_WIDTHS
) -> list[tuple[int, int]]:
    """The 128-row tile's (BLOCK_N, BLOCK_N2)s of `widths`, fewest operand rows an SM loads a K step at the problem's
    M first: its waves times the tile's rows and columns, 128 + its width (the widest among equals), among the widths a
    launch runs as wide as they are (runs_narrower).  At these M a 128-row tile goes at the pace of its loads, not its
    wgmma (docs/BENCHMARKS.md, "The fitted tile's width by its loads")."""

    def traffic(width: tuple[int, int]) -> int:
        return cdiv(_tile_count(problem.M, problem.N, 128, sum(width)), sms) * (128 + sum(width))

    kept = [w for w in widths if not runs_narrower(problem, 128, w, sms)]
    return sorted(kept, key=lambda w: (traffic(w), -sum(w)))


def filling_config(
    problem, schedules: tuple[str, ...] = WARP_SPECIALIZED, width: Optional[tuple[int, int]] = None
) -> Optional[GluonConfig]:
    """The 128-row tile of `width` (by default the filling width at the problem's own M: filling_width), of its
    contract's schedule (256 wide: _FILLING_256's) and the deepest ring that fits; None where no width is given and
    128 columns fill as well, where the contract has none (block scales) or its schedule is not among `schedules`, or
    where no ring fits."""
    contract = _contract(problem)
    if contract not in _FILLING or _FILLING[contract][0] not in schedules:
        return None
    width = width or filling_width(problem, tuning.sm_count())
    if width is None:
        return None
    schedule, warps, depths, extra = _FILLING[contract]
    elem, bk = _operands(problem)
    (bn, bn2), precise = width, contract == "precise"
    if bn == 256 and contract in _FILLING_256:
        schedule, warps = _FILLING_256[contract]
    fitting = (GluonConfig.tile(128, bn, bk, warps, st, SCHEDULE=schedule, BLOCK_N2=bn2, **extra) for st in depths)
    return next((c for c in fitting if fits(c, elem, precise)), None)


def one_wave_config(problem, schedules: tuple[str, ...] = WARP_SPECIALIZED) -> Optional[GluonConfig]:
    """The cooperative 64-row tile of one warpgroup whose tiles fill one wave of the SMs best (the most tiles within
    it, the narrower among equals), of the widths _ONE_WAVE_WIDTHS, its ring the deepest of STAGE_CHOICES that fits,
    its fp8 sums promoted in the overlapped partials where the problem promotes; None for block scales, where no
    width's tiles fit in one wave, or where "ws" is not among `schedules`."""
    contract = _contract(problem)
    if contract == "block" or "ws" not in schedules:
        return None
    sms = tuning.sm_count()
    count = {w: _tile_count(problem.M, problem.N, 64, sum(w)) for w in _ONE_WAVE_WIDTHS}
    fitting = [w for w in _ONE_WAVE_WIDTHS if count[w] <= sms]
    if not fitting:
        return None
    bn, bn2 = max(fitting, key=lambda w: (count[w], -sum(w)))
    elem, bk = _operands(problem)
    precise = contract == "precise"
    deepest = (GluonConfig.tile(64, bn, bk, 4, st, SCHEDULE="ws", BLOCK_N2=bn2, PROMOTE_OVERLAP=precise)
               for st in sorted(STAGE_CHOICES, reverse=True))  # fmt: skip
    return next((c for c in deepest if fits(c, elem, precise)), None)


def fitted_configs(problem, schedules: tuple[str, ...] = WARP_SPECIALIZED) -> list[GluonConfig]:
    """The configs fitted to the problem's own M: the 64-row tile of one wave where there is one (one_wave_config),
    and the 128-row tile of least operand traffic (least_traffic_config), split where its tiles leave SMs idle, and
    where 256 columns load less still, that tile too; all, since which is faster turns on how full the one wave is
    and, for 256 columns, on how many waves there are.  A run times them where M is none of the stored buckets
    (tuning._fastest_at_m), since no bucket's tune saw this M's waves, and a bucket's tile may compute many rows past M
    (256 x 128 tuned at M 512 computes 512 rows at M 333)."""
    found = (one_wave_config(problem, schedules), least_traffic_config(problem, schedules),
             least_traffic_config(problem, schedules, _LEAST_TRAFFIC_WIDTHS))  # fmt: skip
    return list(dict.fromkeys(c for c in found if c is not None))


def least_traffic_config(
    problem, schedules: tuple[str, ...] = WARP_SPECIALIZED, widths: tuple[tuple[int, int], ...] = _FILLING_WIDTHS
) -> Optional[GluonConfig]:
    """The contract's 128-row tile of the least operand traffic per SM among `widths` that it holds
    (least_traffic_widths), its tiles past the grid's whole waves split where the split model finds that pays
    (filling_split: an output of fewer tiles than SMs, or a last wave that leaves SMs idle) and the split fits (the
    256 wide tile's meeting does not)."""
    sms = tuning.sm_count()
    ranked = least_traffic_widths(problem, sms, widths)
    config = next((c for c in (filling_config(problem, schedules, w) for w in ranked) if c is not None), None)
    if config is None or config.BLOCK_N2 or config.SCHEDULE not in SPLITTABLE:
        return config  # the second accumulator does not meet (fits)
    split = config.split(filling_split(problem, config, sms), tail=True)
    elem, _ = _operands(problem)
    return split if fits(split, elem, _contract(problem) == "precise") else config


def schedules_space(problem, full: bool, schedules: tuple[str, ...]) -> list[GluonConfig]:
    """The quick candidates (full False) or the whole space of the given schedules for a problem."""
    precise = promotes(problem)
    block = block_scaled(problem)
    elem, bk = _operands(problem)
    tile = GluonConfig.tile
    contract = _contract(problem)
    sms = tuning.sm_count()
    quick = [tile(bm, bn, bk, w, st, SCHEDULE=s, **x) for s, bm, bn, w, st, x in _QUICK[contract] if s in schedules]
    s, bm, bn, warps, stages, extra = _SPLIT_QUICK[contract]
    unsplit = tile(bm, bn, bk, warps, stages, SCHEDULE=s, **extra)
    for atomic in (False, True):  # each way of meeting at the split the model finds for it
        split = unsplit.split(filling_split(problem, unsplit, sms, atomic), tail=True, atomic=atomic)
        if s in schedules and split.splits() > 1:
            quick.append(split)
    filling = filling_config(problem, schedules)
    for more in (filling, one_wave_config(problem, schedules)):
        if more is not None and more not in quick:
            quick.append(more)
    if contract in _STEP_QUICK:
        bm, bn, warps, stages = _STEP_QUICK[contract]
        quick += [tile(bm, bn, bk, warps, stages, SCHEDULE=s) for s in schedules if s in ("pipelined", "persistent")]
    quick = [c for c in quick if fits(c, elem, precise, block)]
    if not full:
        return quick
    unsplit = [
        tile(bm, bn, bk, warps, stages, SCHEDULE=s, PROMOTE_OVERLAP=overlap, BLOCK_N2=bn2, PROMOTE_WAVES=waves, TURNS=t,
             PROMOTE_LAG=lag)
        for s in schedules
        for bm in (64, 128, 256)
        for bn in (64, 128, 256)
        for bn2 in (_SECOND_WIDTHS if bn in (64, 128) else (0,))
        if bn2 < bn
        for warps in ((4,) if s in TWO_CONSUMERS else (4, 8))
        for stages in STAGE_CHOICES
        for overlap, waves in (_PROMOTIONS if (precise or block) and s in WARP_SPECIALIZED else ((False, 0),))
        for t in ((None, not block) if s == "halves" and waves else (None,))
        for lag in (_LAGS if waves == 1 else (None,))
    ]  # fmt: skip
    more = [split for c in unsplit for split in _splits_of(problem, c, sms)]
    return quick + [c for c in more if c not in quick and fits(c, elem, precise, block)]
