"""The Gluon GEMM's configs (gluon_ws.py launches them): the config's fields, what each schedule's partitions hold in
registers and shared memory, and which configs an SM can hold (fits); a config's tiles and its split of K."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Optional

from gemmbench.configs import tuning

SCHEDULES = ("pipelined", "persistent", "ws", "pingpong", "halves")
WARP_SPECIALIZED = SCHEDULES[2:]
TWO_CONSUMERS = ("pingpong", "halves")  # two 4-warp consumer partitions: each its own tile, or half of one
SPLITTABLE = ("ws", "halves")  # the schedules whose consumers take every unit in one order: split-K's
SMEM_BYTES = 227 * 1024  # what one block may hold on the H100
PRODUCER_REGS = 40  # the producer warp holds addresses and counters only
CONSUMER_REGS = 232  # what each consumer thread may hold: ACC + fp8 promotion tile + scales, under 256
WARPGROUP = 4  # warps per warpgroup: registers are reallocated per warpgroup


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
    # 128 + 32 = 160 or 64 + 16 = 80 wide (cuBLAS's widths for N 1280: 8 or 16 tiles across, not 10 or 5); Triton's
    # tensors are powers of two.  Launched BLOCK_N wide where the width no longer fills the SMs' waves
    # (gluon_ws_space.launched_width)
    BLOCK_N2: int = field(default=0, metadata={"choices": (0, 16, 32, 64)})
    # fp8 promoted or block-scaled, warp-specialized schedules: the tile's rows in this many waves, each K step's sum
    # of a wave started afresh in one partial accumulator and added into that wave's fp32 tile
    # (gluon_ws_promote.k_loop_waves, k_loop_waves_peeled); 0: not this loop
    PROMOTE_WAVES: int = field(default=0, metadata={"choices": (0, 1, 2)})
    # "ws" and "halves": units of work per output tile, each a share of its K steps, for outputs of fewer tiles
    # than SMs (gluon_ws_split.py); built: the split launched (split_k: no share empty).  None (unset, left out of
    # the JSON, so configs and rows from before it read the same): one unit a tile
    SPLIT_K: Optional[int] = None
    # split-K: True splits only the tiles past the grid's whole waves (the last, partial wave), the waves before it
    # running their tiles whole, so that an output of 144 tiles on 132 SMs runs one wave and a split twelfth, not
    # two waves; launched only where the split model finds a split of the launch's own tail pays
    # (gluon_ws_space.launched_split); None (unset): every tile is split
    SPLIT_TAIL: Optional[bool] = None
    # split-K: True adds each unit's fp32 partial into its tile's one workspace slice by L2 atomics and the last unit
    # reads that slice alone (its read does not grow with the splits), the sum's order, and so its last bits, free to
    # change from call to call; None (unset): each partial stored in a slice of its own and summed in split order by
    # the last unit, the same bits every call (gluon_ws_split.py)
    SPLIT_ATOMIC: Optional[bool] = None
    # True (stream-K): the K steps of the tiles past the grid's whole waves spread evenly over every program, a
    # program's share ending inside one tile and going on in the next, so that every SM sums as many K steps
    # whatever the tiles' count; the shares of a tile meet by atomics, as SPLIT_ATOMIC's (SPLIT_K, SPLIT_TAIL and
    # SPLIT_ATOMIC unset).  None (unset, left out of the JSON): no stream-K
    STREAM_K: Optional[bool] = None
    # the halves in row waves: True, the two consumers issue each wave's wgmma in turns (one waits for the other's
    # to be issued); False, each as soon as its stage is ready.  None (unset, left out of the JSON, so configs and
    # rows from before it read the same): in turns with block scales only, where more cells lost than gained without
    # them; per-tensor and row-wise scales ran faster without (docs/BENCHMARKS.md, "The halves without turns")
    TURNS: Optional[bool] = None
    # one row wave (PROMOTE_WAVES 1): each K step's wgmma issued before the step before it is waited for, two
    # partials in turn, so that a step's promotion runs under the next one's wgmma, in trips of this many K steps
    # (gluon_ws_promote.k_loop_lagged); a third tile's registers.  None (unset, left out of the JSON): each step
    # waited for before its promotion
    PROMOTE_LAG: Optional[int] = field(default=None, metadata={"choices": (2, 4)})

    # the way a consumer promotes: Triton's lowering, the overlapped partials or the waves (which alone take turns,
    # and in one wave a step's lag)
    ONE_CHOICE: ClassVar[tuple[tuple[str, ...], ...]] = (("PROMOTE_OVERLAP", "PROMOTE_WAVES", "TURNS", "PROMOTE_LAG"),)

    def takes_turns(self, scale: str) -> bool:
        """Whether the halves' consumers issue their waves' wgmma in turns under these scales (TURNS, else the
        scales' default: block scales only)."""
        return self.TURNS if self.TURNS is not None else scale == "block"

    def splits(self) -> int:
        """Units per tile asked for (SPLIT_K, 1 where unset)."""
        return self.SPLIT_K or 1

    def meets(self) -> bool:
        """Whether some tile's K steps are summed by more than one unit, which then meet: split-K or stream-K."""
        return self.splits() > 1 or bool(self.STREAM_K)

    def streamed(self) -> GluonConfig:
        """This config with its tail's K steps spread over every program (stream-K), split-K's fields unset."""
        return replace(self, SPLIT_K=None, SPLIT_TAIL=None, SPLIT_ATOMIC=None, STREAM_K=True)

    def split(self, splits: int, tail: Optional[bool] = None, atomic: Optional[bool] = None) -> GluonConfig:
        """This config in `splits` units per tile (unset where 1), of the tail's tiles only where tail is True, meeting
        by atomics where atomic is True (each the config's own choice where None)."""
        tail = self.SPLIT_TAIL if tail is None else tail
        atomic = self.SPLIT_ATOMIC if atomic is None else atomic
        many = splits > 1
        return replace(self, SPLIT_K=splits if many else None, SPLIT_TAIL=True if many and tail else None,
                       SPLIT_ATOMIC=True if many and atomic else None, STREAM_K=None)  # fmt: skip


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
    if config.SCHEDULE in TWO_CONSUMERS:
        return WARPGROUP, [WARPGROUP, 1]
    return config.num_warps, [1]


def max_registers(config: GluonConfig) -> Optional[int]:
    """The kernel's register limit (maxnreg): what lets the consumers be given CONSUMER_REGS and the producer
    PRODUCER_REGS when the registers are redistributed, warps counted in whole warpgroups; None for one partition."""
    if config.SCHEDULE not in WARP_SPECIALIZED:
        return None
    default, workers = partition_warps(config)
    consumer_warps = default + sum(w for w in workers if w >= WARPGROUP)
    producer_warps = WARPGROUP  # the producer's one warp takes a whole warpgroup's registers
    total = 32 * (consumer_warps + producer_warps)
    return (CONSUMER_REGS * 32 * consumer_warps + PRODUCER_REGS * 32 * producer_warps) // total


def smem_bytes(config: GluonConfig, elem: int, out_elem: int = 2, block: bool = False) -> int:
    """Shared memory of a config: its ring of A and B stages and each consumer's output tile (halves: half the
    tile's rows each); block scales in row waves: each stage's scales too, two fp32 per row of the tile."""
    width = config.BLOCK_N + config.BLOCK_N2
    stages = config.num_stages * (config.BLOCK_M + width) * config.BLOCK_K * elem
    if block and config.PROMOTE_WAVES:
        stages += config.num_stages * 2 * config.BLOCK_M * 4
    consumers = 2 if config.SCHEDULE == "pingpong" else 1
    return stages + consumers * config.BLOCK_M * width * out_elem


def accumulator_registers(config: GluonConfig, fp8_precise: bool) -> int:
    """fp32 registers a consumer thread holds for its tile, plus, for fp8 promoted every FP8_PROMOTE, the
    reduced-precision partial of one wgmma instruction (64 rows by its N) that is added into it (halves: of half
    the tile's rows)."""
    warps = WARPGROUP if config.SCHEDULE in TWO_CONSUMERS else config.num_warps
    rows = config.BLOCK_M // 2 if config.SCHEDULE == "halves" else config.BLOCK_M
    regs = rows * (config.BLOCK_N + config.BLOCK_N2) // (32 * warps)
    if fp8_precise and config.PROMOTE_OVERLAP:
        # the fp32 tile and two partial sums, counted as four: with a trip's groups in flight ptxas needs more than
        # three tiles' registers (a tile three of which just fit spilled: docs/BENCHMARKS.md, "What bounds each kind
        # of miss")
        return 4 * regs
    if fp8_precise and config.PROMOTE_LAG:
        # the fp32 tile and two partials, in one wave; in trips of four counted as four tiles, as the overlapped
        # partials' (in trips of four, three tiles of 64 rows by 128 columns a warpgroup spilled: docs/BENCHMARKS.md,
        # "The one wave with a step's lag")
        return (3 if config.PROMOTE_LAG == 2 else 4) * regs
    if fp8_precise and config.PROMOTE_WAVES:
        return regs + regs // config.PROMOTE_WAVES  # the fp32 tile and one wave's partial
    if fp8_precise:
        (_, n_warps), (_, n, _) = wgmma_layout_params(config.BLOCK_M, config.BLOCK_N, warps, 8)
        regs += 64 * n // (32 * WARPGROUP)
    return regs


def meeting_registers(config: GluonConfig) -> int:
    """fp32 registers a consumer thread holds where split-K's last unit sums the splits (gluon_ws_split.meet): its
    tile, and as much again loaded (ptxas issues the slices' loads together: 256 x 128 in two waves spilled)."""
    return 2 * accumulator_registers(config, False)


def fits(config: GluonConfig, elem: int, fp8_precise: bool, block: bool = False) -> bool:
    """A config the SM can hold: its shared memory within SMEM_BYTES, its accumulators within the consumer's
    registers with room for addresses and scales, BLOCK_M whole warpgroup wgmmas (64 rows each)."""
    if config.BLOCK_M % 64 or config.num_stages < 2:
        return False
    if config.meets() and (config.SCHEDULE not in SPLITTABLE or config.BLOCK_N2):
        return False  # the second accumulator does not meet
    waves = config.PROMOTE_WAVES
    halves = config.SCHEDULE == "halves"
    if config.BLOCK_N2 and (config.SCHEDULE not in WARP_SPECIALIZED or block):
        return False  # the second accumulator: the warp-specialized consumers' K loops; block scales scale a tile's
        # columns by one weight block's scale
    if waves and (config.SCHEDULE not in WARP_SPECIALIZED or config.PROMOTE_OVERLAP or not (fp8_precise or block)):
        return False  # the waves are a promotion of the warp-specialized consumers
    promoting = bool(waves or config.PROMOTE_OVERLAP)
    if halves and config.num_warps != WARPGROUP:
        return False  # the halves: one warpgroup a consumer
    if halves and promoting != (fp8_precise or block):
        return False  # the halves promote (in the waves' K loop or the overlapped partials) exactly where the
        # contract does; without promotion each runs Triton's plain K loop on its rows
    if halves and config.PROMOTE_OVERLAP and config.meets():
        return False  # split-K meets a tile held whole or in waves, not in the overlapped partials
    if config.PROMOTE_LAG and waves != 1:
        return False  # the lag's two partials are of the one wave's rows
    if waves and config.SCHEDULE == "pingpong":
        return False  # ping-pong's consumers take turns per tile, each its own: the waves are the halves'

    if config.BLOCK_M % (64 * max(waves, 1) * (2 if halves else 1)):
        return False  # each wave, and each of the halves' row halves, a whole number of 64-row warpgroup wgmmas
    if block and (config.SCHEDULE not in WARP_SPECIALIZED or not (config.PROMOTE_OVERLAP or waves)):
        return False  # block scales multiply each K step's own sum: the overlapped loop's partials, or a wave's
    if block and waves and 128 % config.BLOCK_N:
        return False  # the waves scale a tile by one weight block's scale: its columns within one 128-column block
    # registers left for addresses, barriers' phases and scales: 40 under the consumers' CONSUMER_REGS; one
    # partition, 255 a thread, keeps 192 for accumulators (docs/BENCHMARKS.md, "The Gluon kernel": what spilled)
    budget = CONSUMER_REGS - 40 if config.SCHEDULE in WARP_SPECIALIZED else 192
    if config.meets() and meeting_registers(config) > budget:
        return False
    return (
        smem_bytes(config, elem, block=block) <= SMEM_BYTES
        and accumulator_registers(config, fp8_precise or block) <= budget
    )


def tiles(config: GluonConfig, M: int, N: int) -> int:
    """Output tiles of a config."""
    return cdiv(M, config.BLOCK_M) * cdiv(N, config.BLOCK_N + config.BLOCK_N2)


def whole_tiles(config: GluonConfig, M: int, N: int, sms: int) -> int:
    """The tiles a launch runs whole before its split ones: the grid's whole waves where only the tail is split
    (SPLIT_TAIL) or streamed (STREAM_K), none where every tile is split, all where nothing is."""
    count = tiles(config, M, N)
    if not config.meets():
        return count
    return (count // sms) * sms if config.SPLIT_TAIL or config.STREAM_K else 0


def units(config: GluonConfig, M: int, N: int, K: int, sms: int) -> int:
    """Units of work of a launch: its whole tiles, and split_k's shares of each of the others (stream-K: each of
    their K steps, shared out among as many programs as there are SMs)."""
    count, whole = tiles(config, M, N), whole_tiles(config, M, N, sms)
    each = cdiv(K, config.BLOCK_K) if config.STREAM_K else split_k(config, K)[0]
    return whole + (count - whole) * each


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of ints: triton.cdiv is a jit function, whose call from Python costs microseconds, and a search
    space calls this millions of times."""
    return -(-a // b)


def split_k(config: GluonConfig, K: int) -> tuple[int, int]:
    """(splits, K steps each) of a launch of the config (split_shares)."""
    return split_shares(config.splits(), cdiv(K, config.BLOCK_K))


def split_shares(splits: int, steps: int) -> tuple[int, int]:
    """(splits, K steps each) of `splits` shares of `steps` K steps, ceil-sized, so the last may be shorter; shares
    that would be empty (splits near the steps) are not launched."""
    per = cdiv(steps, min(splits, steps))
    return cdiv(steps, per), per
