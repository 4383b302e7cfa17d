"""Gluon GEMM for Hopper, the host side: which problems it refuses, its descriptors, layouts, grid and launch, and the
variants it registers; its configs and their budgets are gluon_ws_config.py's, its search space gluon_ws_space.py's,
the kernels gluon_ws_device.py's (a ring of TMA-filled stages, wgmma consumers, a TMA-store epilogue, the schedules
it describes), their fp8 promotion gluon_ws_promote.py's and split-K's meeting gluon_ws_split.py's.

out (M, N) = a (M, K) @ b (N, K)^T, as dense_dp.py.  Written in Gluon (triton.experimental.gluon), where the
kernel names its own warps, barriers and shared memory: what Triton's own compiler does not let a kernel say.

fp8: FP8_PROMOTE K summed in the tensor cores' reduced-precision accumulator before each fp32 promotion
(warpgroup_mma's max_num_imprecise_acc; tile_loop.FP8_PROMOTE, the contract of cuBLAS without fast accumulation),
or none (fast accumulation, except where promotes() says); PROMOTE_OVERLAP, PROMOTE_WAVES and PROMOTE_LAG: promoted
by the kernel's own K loop instead.

Triton 3.6's gluon.jit ignores TRITON_INTERPRET: the host side (configs, layouts, grid, register budgets,
descriptors) is tested on the CPU, the kernel on the GPU.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from gemmbench import dtypes
from gemmbench.configs import tuning
from gemmbench.kernels import gluon_api, gluon_ws_device
from gemmbench.kernels.gluon_ws_config import (
    CONSUMER_REGS,
    PRODUCER_REGS,
    TWO_CONSUMERS,
    WARP_SPECIALIZED,
    WARPGROUP,
    GluonConfig,
    max_registers,
    partition_warps,
    split_k,
    tiles,
    units,
    wgmma_layout_params,
    whole_tiles,
)
from gemmbench.kernels.gluon_ws_space import (
    fitted_configs,
    launched,
    promotes,
    schedules_space,
)
from gemmbench.kernels.tile_loop import TRITON_SCALINGS, BlockScales, fp8_promote_every
from gemmbench.measure.device import on_the_gpu
from gemmbench.registry import Launch, Variant, register

# The Triton releases whose Gluon this kernel was written and tested against: Gluon is experimental and its API
# changes between releases (layouts computed by constexpr functions, accumulator tokens), so another release is
# refused rather than miscompiled.
GLUON_TRITON_RELEASES = ("3.6.",)


def gluon_unsupported_reason() -> Optional[str]:
    """Why this Triton's Gluon is not the one the kernel was written for, or None."""
    if gluon_api.GLUON_IMPORT_ERROR is not None:
        return f"this Triton's Gluon lacks what the kernel uses ({gluon_api.GLUON_IMPORT_ERROR})"
    if not triton.__version__.startswith(GLUON_TRITON_RELEASES):
        written = ", ".join(r + "x" for r in GLUON_TRITON_RELEASES)
        return f"written for Gluon in Triton {written}; this is Triton {triton.__version__} (Gluon's API changes)"
    return None


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
    row wave's of each (PROMOTE_WAVES; the first where it is 0)."""
    warps = WARPGROUP if config.SCHEDULE in TWO_CONSUMERS else config.num_warps
    rows = config.BLOCK_M // 2 if config.SCHEDULE == "halves" else config.BLOCK_M

    def layout(bm: int, bn: int):
        warps_per_cta, instr = wgmma_layout_params(bm, bn, warps, elem_bits)
        return gluon_api.gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=warps_per_cta, instr_shape=instr)

    first = layout(rows, config.BLOCK_N)
    second = layout(rows, config.BLOCK_N2) if config.BLOCK_N2 else first
    waves = config.PROMOTE_WAVES
    if not waves:
        return first, second, first, first
    wave = layout(rows // waves, config.BLOCK_N)
    return first, second, wave, layout(rows // waves, config.BLOCK_N2) if config.BLOCK_N2 else wave


def promotion(config: GluonConfig, promote: int, scale: str) -> tuple[bool, int]:
    """(OVERLAP, WAVES) of a warp-specialized launch: the K loop that promotes, where one does (promote > 0: fp8
    promoted; block scales scale each step's own sum, so they always take one).  Without PROMOTE_WAVES or
    PROMOTE_OVERLAP block scales take the overlapped loop; where nothing is promoted, Triton's plain K loop, except
    for the halves of a promoted config, whose consumers run its loop (one read for the fast contract: promoting
    is exact)."""
    if config.SCHEDULE == "halves" and (config.PROMOTE_WAVES or config.PROMOTE_OVERLAP):
        return not config.PROMOTE_WAVES, config.PROMOTE_WAVES
    if promote <= 0 and scale != "block":
        return False, 0
    if config.PROMOTE_WAVES:
        return False, config.PROMOTE_WAVES
    return config.PROMOTE_OVERLAP or scale == "block", 0


def programs(config: GluonConfig, M: int, N: int, K: int, sms: int) -> int:
    """Grid size: one program per tile ("pipelined"), else one per SM at most (persistent schedules), over the
    units of split-K."""
    count = units(config, M, N, K, sms)
    return count if config.SCHEDULE == "pipelined" else max(1, min(count, sms))


class GluonGemm:
    """The descriptors, layout and grid of one (problem, inputs, config), and a closure that launches it once."""

    def __init__(self, a, b, out, a_scale, b_scale, scale: str, config: GluonConfig, promote: int,
                 blocks: Optional[BlockScales] = None):  # fmt: skip
        M, K = a.shape
        N = b.shape[0]
        if config.SCHEDULE in WARP_SPECIALIZED and config.num_stages < 2:
            # a consumer waits for a stage while it still holds the one before (its wgmma in flight, or the block
            # scales' lag): a ring of one would hang
            raise ValueError(f"{config.SCHEDULE}: num_stages={config.num_stages}: the ring needs 2 stages or more")
        self.config, self.out, self.shape = config, out, (M, N, K)
        self.descs = descriptors(a, b, out, config)
        self.scales = (a_scale, b_scale) if scale in ("tensor", "row") else (out, out)
        self.scale, self.promote = scale, promote
        on = blocks is not None and blocks.on  # (M, K/128) and (N/128, K/128) fp32 scales, with their strides
        self.blocks = (blocks.a, blocks.b, *blocks.strides) if on else (out, out, 0, 0, 0, 0)
        self.layouts = accumulator_layouts(config, 8 * a.element_size())
        self.splits, self.k_per = split_k(config, K)
        sms, count = tuning.sm_count(), tiles(config, M, N)
        # stream-K where the tiles leave a last wave partial (otherwise every tile runs whole)
        self.streamed = bool(config.STREAM_K) and count % sms > 0
        self.whole = whole_tiles(config, M, N, sms) if self.splits > 1 or self.streamed else count
        # split-K: each split tile's fp32 partials, a whole tile per split (its slices adjacent), or by atomics (as
        # stream-K's pieces meet) one slice per tile, zero between calls (the last unit of a tile leaves it so), and
        # a counter per tile and consumer (likewise zero); one element each, never read, where no tile is split
        split_tiles = count - self.whole
        self.atomic = (bool(config.SPLIT_ATOMIC) and self.splits > 1) or self.streamed
        slices = split_tiles * (1 if self.atomic else self.splits) * config.BLOCK_M * config.BLOCK_N
        assert slices < 2**31, "the workspace's offsets are int32"
        made = torch.zeros if self.atomic else torch.empty
        self.workspace = made(max(slices, 1), dtype=torch.float32, device=out.device)
        self.counters = torch.zeros(2 * count if split_tiles else 1, dtype=torch.int32, device=out.device)
        self.programs = programs(config, M, N, K, sms)
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
                a_desc, b_desc, b2_desc, c_desc, c2_desc, *self.scales, *self.blocks[:2], self.workspace,
                self.counters, *self.blocks[2:], M, N, K, self.k_per, self.whole, **common,
                SPLITS=0 if self.streamed else self.splits,
                ATOMIC=self.atomic, layout2=self.layouts[1],
                BN2=cfg.BLOCK_N2, CONSUMERS=2 if cfg.SCHEDULE in TWO_CONSUMERS else 1, HALVES=cfg.SCHEDULE == "halves",
                OVERLAP=overlap, TURNS=cfg.takes_turns(self.scale), LAG=(cfg.PROMOTE_LAG or 0) if waves == 1 else 0,
                CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, WAVES=waves, wave_layout=self.layouts[2],
                wave_layout2=self.layouts[3],
                num_warps=partition_warps(cfg)[0], maxnreg=max_registers(cfg),
            )  # fmt: skip
        return self.out


def _build(problem, inputs, config: GluonConfig) -> Launch:
    config = launched(problem, config)
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
    ran = config if gemm.streamed else config.split(gemm.splits)
    return Launch(fn=gemm, params=ran, out=out, resources=gemm.resources)


def _register(name: str, schedules: tuple[str, ...], what: str, scalings: tuple[str, ...]) -> None:
    def space(problem, on_gpu: bool, full: bool = True) -> list[GluonConfig]:
        return schedules_space(problem, full, schedules)

    def fitted(problem) -> list[GluonConfig]:
        return fitted_configs(problem, schedules)

    tunable = tuning.Tunable(name, space, _build, GluonConfig, promotion_in_config=True, fitted=fitted,
                             launched=launched)  # fmt: skip
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
