"""Gluon GEMM for Hopper, the host side: its configs, register and shared-memory budgets, search space, descriptors
and launch; the kernels are gluon_ws_device.py's (a ring of TMA-filled stages, wgmma consumers, a TMA-store
epilogue, the schedules it describes), their fp8 promotion gluon_ws_promote.py's.

out (M, N) = a (M, K) @ b (N, K)^T, as dense_dp.py.  Written in Gluon (triton.experimental.gluon), where the
kernel names its own warps, barriers and shared memory: what Triton's own compiler does not let a kernel say.

fp8: FP8_PROMOTE K summed in the tensor cores' reduced-precision accumulator before each fp32 promotion
(warpgroup_mma's max_num_imprecise_acc; tile_loop.FP8_PROMOTE, the contract of cuBLAS without fast accumulation),
or none (fast accumulation, except where promotes() says); PROMOTE_OVERLAP and PROMOTE_WAVES: promoted by the
kernel's own K loop instead.

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
from gemmbench.kernels import gluon_api, gluon_ws_device
from gemmbench.kernels.tile_loop import TRITON_SCALINGS, BlockScales, block_scaled, fp8_promote_every
from gemmbench.measure.device import on_the_gpu
from gemmbench.registry import Launch, Variant, register

# The Triton releases whose Gluon this kernel was written and tested against: Gluon is experimental and its API
# changes between releases (layouts computed by constexpr functions, accumulator tokens), so another release is
# refused rather than miscompiled.
GLUON_TRITON_RELEASES = ("3.6.",)
SCHEDULES = ("pipelined", "persistent", "ws", "pingpong", "halves")
WARP_SPECIALIZED = SCHEDULES[2:]
TWO_CONSUMERS = ("pingpong", "halves")  # two 4-warp consumer partitions: each its own tile, or half of one
SMEM_BYTES = 227 * 1024  # what one block may hold on the H100
PRODUCER_REGS = 40  # the producer warp holds addresses and counters only
CONSUMER_REGS = 232  # what each consumer thread may hold: ACC + fp8 promotion tile + scales, under 256
WARPGROUP = 4  # warps per warpgroup: registers are reallocated per warpgroup
BLOCK_WAVE_REGS = 32  # what block scales take of the accumulators' registers in the waves' K loop (fits)


def gluon_unsupported_reason() -> Optional[str]:
    """Why this Triton's Gluon is not the one the kernel was written for, or None."""
    if gluon_api.GLUON_IMPORT_ERROR is not None:
        return f"this Triton's Gluon lacks what the kernel uses ({gluon_api.GLUON_IMPORT_ERROR})"
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
    # fp8 promoted or block-scaled, warp-specialized schedules: the tile's rows in this many waves, each K step's sum
    # of a wave started afresh in one partial accumulator and added into that wave's fp32 tile
    # (gluon_ws_promote.k_loop_waves); 0: not this loop
    PROMOTE_WAVES: int = field(default=0, metadata={"choices": (0, 1, 2)})


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


def smem_bytes(config: GluonConfig, elem: int, out_elem: int = 2) -> int:
    """Shared memory of a config: its ring of A and B stages and each consumer's output tile (halves: half the
    tile's rows each)."""
    width = config.BLOCK_N + config.BLOCK_N2
    stages = config.num_stages * (config.BLOCK_M + width) * config.BLOCK_K * elem
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
        return 3 * regs  # the fp32 tile and two partial sums
    if fp8_precise and config.PROMOTE_WAVES:
        return regs + regs // config.PROMOTE_WAVES  # the fp32 tile and one wave's partial
    if fp8_precise:
        (_, n_warps), (_, n, _) = wgmma_layout_params(config.BLOCK_M, config.BLOCK_N, warps, 8)
        regs += 64 * n // (32 * WARPGROUP)
    return regs


def fits(config: GluonConfig, elem: int, fp8_precise: bool, block: bool = False) -> bool:
    """A config the SM can hold: its shared memory within SMEM_BYTES, its accumulators within the consumer's
    registers with room for addresses and scales, BLOCK_M whole warpgroup wgmmas (64 rows each)."""
    if config.BLOCK_M % 64 or config.num_stages < 2:
        return False
    waves = config.PROMOTE_WAVES
    halves = config.SCHEDULE == "halves"
    if config.BLOCK_N2 and (config.SCHEDULE not in ("ws", "pingpong") or config.PROMOTE_OVERLAP or waves or block):
        return False  # only the warp-specialized K loop of Triton's promotion has the second accumulator
    if waves and (config.SCHEDULE not in WARP_SPECIALIZED or config.PROMOTE_OVERLAP or not (fp8_precise or block)):
        return False  # the waves are a promotion of the warp-specialized consumers
    if halves and (not waves or config.num_warps != WARPGROUP):
        return False  # the halves take turns at the waves' wgmma, one warpgroup each
    if waves and config.SCHEDULE == "pingpong":
        return False  # ping-pong's consumers take turns per tile, each its own: the waves' turns are the halves'

    if waves and config.BLOCK_M % (64 * waves * (2 if halves else 1)):
        return False  # each wave a whole number of 64-row warpgroup wgmmas
    if block and (config.SCHEDULE not in WARP_SPECIALIZED or not (config.PROMOTE_OVERLAP or waves)):
        return False  # block scales multiply each K step's own sum: the overlapped loop's partials, or a wave's
    if block and waves and 128 % config.BLOCK_N:
        return False  # the waves scale a tile by one weight block's scale: its columns within one 128-column block
    # registers left for addresses, barriers' phases and scales: 40 under the consumers' CONSUMER_REGS; one
    # partition, 255 a thread, keeps 192 for accumulators (docs/BENCHMARKS.md, "The Gluon kernel": what spilled)
    budget = CONSUMER_REGS - 40 if config.SCHEDULE in WARP_SPECIALIZED else 192
    if block and waves:
        # each wave's row scales and their addresses: ptxas spilled 256 x 128 in two waves with them (192 registers
        # of accumulators), and not without (docs/BENCHMARKS.md, "Promoted fp8: the waves and the halves")
        budget -= BLOCK_WAVE_REGS
    return smem_bytes(config, elem) <= SMEM_BYTES and accumulator_registers(config, fp8_precise or block) <= budget


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
    return _space(problem, full, WARP_SPECIALIZED)


# The quick candidates are each contract's fastest (docs/BENCHMARKS.md: "The Gluon kernel, step by step", on the
# H100; "Promoted fp8: the waves and the halves", on the H200): 16-bit and fp8 fast, cooperative 128 x 256 (8 warps,
# 3 stages) and ping-pong 128 x 128; fp8 promoted and block scales, the halves (two one-warpgroup consumers on a
# tile's row halves, taking turns at the waves' wgmma) of 256 x 128 in two waves and of 128 x 128 in one; and for
# every contract but block scales the 128 + 32 = 160 wide cooperative tile, which fills the 132 SMs where N is 1280
# (8 tiles across).
# 128 x 256 with Triton's promotion needs 256 registers a thread (it spills: fits() keeps it out); four-warp
# cooperative tiles were slower than the eight-warp ones and stay out of the quick list.
_WIDE = {"BLOCK_N2": 32}
_QUICK = {
    "16-bit": (("ws", 128, 256, 8, 3, {}), ("pingpong", 128, 128, 4, 5, {}), ("ws", 128, 128, 8, 4, _WIDE)),
    "fast": (("ws", 128, 256, 8, 3, {}), ("pingpong", 128, 128, 4, 4, {}), ("ws", 128, 128, 8, 4, _WIDE)),
    "precise": (
        ("halves", 256, 128, 4, 3, {"PROMOTE_WAVES": 2}),
        ("halves", 128, 128, 4, 6, {"PROMOTE_WAVES": 1}),
        ("ws", 128, 128, 8, 4, _WIDE),
    ),
    # block scales scale each K step's own sum: a wave's partial (the tile's columns in one 128-column weight block)
    "block": (("halves", 128, 128, 4, 4, {"PROMOTE_WAVES": 1}), ("ws", 128, 128, 8, 4, {"PROMOTE_WAVES": 1})),
}
# the ways a warp-specialized consumer promotes (PROMOTE_OVERLAP, PROMOTE_WAVES): Triton's wgmma lowering, the
# overlapped partials, the tile in one or two row waves
_PROMOTIONS = ((False, 0), (True, 0), (False, 1), (False, 2))
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
        tile(bm, bn, bk, warps, stages, SCHEDULE=schedule, PROMOTE_OVERLAP=overlap, BLOCK_N2=bn2, PROMOTE_WAVES=waves)
        for schedule in schedules
        for bm in (64, 128, 256)
        for bn in (64, 128, 256)
        for bn2 in ((0, 32) if bn == 128 and schedule in ("ws", "pingpong") else (0,))
        for warps in ((4,) if schedule in TWO_CONSUMERS else (4, 8))
        for stages in (3, 4, 5, 6)
        for overlap, waves in (_PROMOTIONS if (precise or block) and schedule in WARP_SPECIALIZED else ((False, 0),))
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
    return {
        torch.bfloat16: gluon_api.gl.bfloat16,
        torch.float16: gluon_api.gl.float16,
        torch.float8_e4m3fn: gluon_api.gl.float8e4nv,
    }[t.dtype]


def descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: GluonConfig) -> tuple:
    """TMA descriptors of A ([BLOCK_M, BLOCK_K] blocks), B ([BLOCK_N, BLOCK_K]), B's next BLOCK_N2 rows, the output
    ([BLOCK_M, BLOCK_N]; halves: each consumer's half of the rows) and its next BLOCK_N2 columns, each in the
    shared-memory layout with the widest swizzle its rows allow; without BLOCK_N2 the second B and output
    descriptors are the first ones (never read)."""
    bm, bn, bk, bn2 = config.BLOCK_M, config.BLOCK_N, config.BLOCK_K, config.BLOCK_N2
    out_rows = bm // 2 if config.SCHEDULE == "halves" else bm

    def made(t: torch.Tensor, block: list[int]):
        return gluon_api.TensorDescriptor.from_tensor(
            t, block, gluon_api.gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(t))
        )

    da, db, dc = made(a, [bm, bk]), made(b, [bn, bk]), made(out, [out_rows, bn])
    return da, db, made(b, [bn2, bk]) if bn2 else db, dc, made(out, [out_rows, bn2]) if bn2 else dc


def accumulator_layouts(config: GluonConfig, elem_bits: int) -> tuple:
    """The wgmma layouts of the consumer's accumulators: BLOCK_N's, BLOCK_N2's (the first where it is 0), and one
    row wave's (PROMOTE_WAVES; the first where it is 0)."""
    warps = WARPGROUP if config.SCHEDULE in TWO_CONSUMERS else config.num_warps
    rows = config.BLOCK_M // 2 if config.SCHEDULE == "halves" else config.BLOCK_M

    def layout(bm: int, bn: int):
        warps_per_cta, instr = wgmma_layout_params(bm, bn, warps, elem_bits)
        return gluon_api.gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=warps_per_cta, instr_shape=instr)

    first = layout(rows, config.BLOCK_N)
    second = layout(rows, config.BLOCK_N2) if config.BLOCK_N2 else first
    waves = config.PROMOTE_WAVES
    return first, second, layout(rows // waves, config.BLOCK_N) if waves else first


def promotion(config: GluonConfig, promote: int, scale: str) -> tuple[bool, int]:
    """(OVERLAP, WAVES) of a warp-specialized launch: the K loop that promotes, where one does (promote > 0: fp8
    promoted; block scales scale each step's own sum, so they always take one).  Without PROMOTE_WAVES or
    PROMOTE_OVERLAP block scales take the overlapped loop; where nothing is promoted, Triton's plain K loop, except
    for the halves, whose turns are the waves' (a promoted config read for the fast contract: promoting is exact)."""
    if config.SCHEDULE == "halves":
        return False, config.PROMOTE_WAVES
    if promote <= 0 and scale != "block":
        return False, 0
    if config.PROMOTE_WAVES:
        return False, config.PROMOTE_WAVES
    return config.PROMOTE_OVERLAP or scale == "block", 0


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
            self.compiled = gluon_ws_device.single_partition_kernel[(self.programs,)](
                a_desc, b_desc, c_desc, *self.scales, M, N, K, **common, num_warps=cfg.num_warps
            )
        else:
            overlap, waves = promotion(cfg, self.promote, self.scale)
            self.compiled = gluon_ws_device.warp_specialized_kernel[(self.programs,)](
                a_desc, b_desc, b2_desc, c_desc, c2_desc, *self.scales, *self.blocks, M, N, K, **common,
                layout2=self.layouts[1],
                BN2=cfg.BLOCK_N2, CONSUMERS=2 if cfg.SCHEDULE in TWO_CONSUMERS else 1, HALVES=cfg.SCHEDULE == "halves",
                OVERLAP=overlap,
                CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, WAVES=waves, wave_layout=self.layouts[2],
                num_warps=partition_warps(cfg)[0], maxnreg=max_registers(cfg),
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
    WARP_SPECIALIZED,
    "persistent, a producer warp and ping-pong or cooperative consumers",
    TRITON_SCALINGS + ("row",),
)
_register(
    "gluon_persistent", ("persistent",), "persistent, one partition, pipelined TMA loads (a step)", ("tensor", "row")
)
_register("gluon_pipelined", ("pipelined",), "one program per tile, pipelined TMA loads (a step)", ("tensor", "row"))
