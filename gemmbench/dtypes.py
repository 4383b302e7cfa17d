"""What a dtype and an fp8 scaling mean to gemmbench, in one table that every module reads: the --dtype choices
(shapes), the operands and output the input factory makes (inputs), the check's tolerance (check), the bytes of the
FLOP/byte model (metrics), the measured peak that bounds a row (ceilings) and the datasheet peaks of the roofline
plot (plot.datasheet).  Which variant is the speedup reference is declared by the variants (registry.Variant.baseline).

No torch here: shapes, metrics and the plots import this module and stay light; `DType.torch` imports torch when a
tensor is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class DType:
    name: str  # the `dtype` column and --dtype value
    torch_name: str  # the torch.dtype by attribute name (DType.torch), so that no torch import is needed here
    bytes: int  # per element of the activations (A, M x K) and the weight (B, N x K)
    out: str  # the output's dtype, a name in ALL
    tolerance: float  # check.compare's budget on max|out - ref| / max|ref|: see the note above ALL
    peak: str  # the measured peak that bounds it: a key of ceilings.Ceilings.peak_tflops
    datasheet_tflops: dict[str, float]  # NVIDIA's dense tensor-core TFLOP/s by product (plot.datasheet.DATASHEET)
    scaled: bool = False  # its operands carry fp32 scales, laid out as one of SCALINGS
    max_value: Optional[float] = None  # largest finite value: where quantisation clamps

    @property
    def torch(self) -> Any:
        import torch  # heavy (seconds to import): only when a tensor is made

        return getattr(torch, self.torch_name)

    @property
    def out_bytes(self) -> int:
        return ALL[self.out].bytes


# Tolerances.  Error measure: max |out - ref| / max |ref| (a normwise max error: immune to the near-zero elements
# that make elementwise relative error meaningless).  With O(1) outputs the budget is the output rounding
# (bf16 2^-8 = 3.9e-3, fp16 2^-11 = 4.9e-4) plus fp32 accumulation-order noise; fp8 is compared against its own
# dequantised inputs, so only accumulation and bf16 output count.
# Peaks: the measured ones are one cuBLAS 8192³ GEMM each, bf16 (torch.mm) and fp8 (torch._scaled_mm); fp16 runs
# on the same tensor-core rate as bf16, so it shares bf16's.  Datasheet rates are dense: the datasheets' headline
# figures (1979 / 3958) count 2:4 sparsity, which no kernel here uses.
_SHEET_16 = {"H100 SXM": 989.0, "H200 SXM": 989.0}  # fp16 and bf16: one tensor-core rate
FP16 = DType("fp16", "float16", bytes=2, out="fp16", tolerance=2e-3, peak="bf16", datasheet_tflops=_SHEET_16)
BF16 = DType("bf16", "bfloat16", bytes=2, out="bf16", tolerance=1.6e-2, peak="bf16", datasheet_tflops=_SHEET_16)
# e4m3 with fp32 scales; writes bf16, as torch._scaled_mm with out_dtype=bf16 does
FP8 = DType(
    "fp8",
    "float8_e4m3fn",
    bytes=1,
    out="bf16",
    tolerance=1.6e-2,
    peak="fp8",
    datasheet_tflops={"H100 SXM": 1979.0, "H200 SXM": 1979.0},
    scaled=True,
    max_value=448.0,
)
ALL = {d.name: d for d in (FP16, BF16, FP8)}  # in --dtype's order
NAMES = tuple(ALL)


def get(name: str) -> DType:
    try:
        return ALL[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (expected one of {', '.join(ALL)})") from None


def _blocks(size: int, block: Optional[int]) -> int:
    return 1 if block is None else -(-size // block)  # a partial block at the edge carries its own scale


@dataclass(frozen=True)
class Scaling:
    """How scaled (fp8) operands carry their scales: the block of elements one scale covers in the activations
    (M, K) and in a weight (N, K); None spans the whole dimension.  MoE weights carry one scale per expert where the
    scaling has no blocks along K (tensor, row: the layout fused MoE kernels consume), and one per block of each
    expert where it has (block: (ceil(E/ep), ceil(N/128), ceil(K/128)))."""

    name: str  # the `scaling` column, --scaling, Problem.scaling and registry.Variant.scalings
    meaning: str
    act_block: tuple[Optional[int], Optional[int]]  # (rows, columns of K) one activation scale covers
    weight_block: tuple[Optional[int], Optional[int]]  # (rows of N, columns of K) one weight scale covers
    scale_bytes: int = 4  # fp32; ue8m0: 1 (an exponent byte, as DeepGEMM's recipe ships it)
    ue8m0: bool = False  # every scale rounded UP to a power of two (stored here as fp32 values that are powers of two)

    @property
    def k_block(self) -> Optional[int]:
        """Columns of K one scale covers (block scalings: 128), or None where a scale spans all of K: then the scales
        change inside a kernel's K loop, and are applied there."""
        return self.act_block[1]

    def act_scales(self, M: int, K: int) -> int:
        return _blocks(M, self.act_block[0]) * _blocks(K, self.act_block[1])

    def weight_scales(self, N: int, K: int) -> int:
        return _blocks(N, self.weight_block[0]) * _blocks(K, self.weight_block[1])

    def expert_scales(self, N: int, K: int) -> int:
        """Scales of one MoE expert's (N, K) weight: its blocks (block scalings), else one."""
        return self.weight_scales(N, K) if self.k_block else 1


BLOCK = 128  # DeepSeek-V3's recipe: activations 1 x 128 along K, weights 128 x 128
SCALINGS = {
    s.name: s
    for s in (
        Scaling("tensor", "one scale per operand: (1,) and (1,)", (None, None), (None, None)),
        Scaling("row", "one scale per activation row and per weight row: (M, 1) and (N, 1)", (1, None), (1, None)),
        Scaling(
            "block",
            "activations per 1x128 group along K, weights per 128x128 block: fp32 (M, ceil(K/128)) and "
            "(ceil(N/128), ceil(K/128))",
            (1, BLOCK),
            (BLOCK, BLOCK),
        ),
        Scaling(
            "block-ue8m0",
            "the blocks of `block`, every scale rounded up to a power of two (1-byte ue8m0, DeepGEMM's recipe)",
            (1, BLOCK),
            (BLOCK, BLOCK),
            scale_bytes=1,
            ue8m0=True,
        ),
    )
}
NAMES_SCALING = tuple(SCALINGS)  # in --scaling's order
UNSCALED = "none"  # Problem.scaling of a 16-bit dtype: nothing is scaled
# The scaling a problem has when none is asked (--scaling's default)
REFERENCE_SCALING = "tensor"
# How an fp8 GEMM's tensor-core sums reach fp32 (--fp8-accum, Problem.fp8_accum, registry.Variant.fp8_accums, the
# `fp8_accum` column): "precise" promotes them to fp32 every few K steps, "fast" lets the wgmma chain sum all of K in
# its reduced precision.  Each contract's engine counterpart, written once (the option's help and docs/USAGE.md):
FP8_ACCUM_ENGINES = {
    "precise": "cuBLAS/CUTLASS without fast accumulation, DeepGEMM/block-scaled kernels (promote per 128 K)",
    "fast": "cuBLAS use_fast_accum=True, vLLM's CUTLASS fp8 kernels (per tensor and per token/channel), vLLM's and "
    "SGLang's Triton fused-MoE kernel (per tensor)",
}
FP8_ACCUMS = tuple(FP8_ACCUM_ENGINES)  # ("precise", "fast"), in --fp8-accum's order
REFERENCE_FP8_ACCUM = "precise"  # the contract a problem has when none is asked (--fp8-accum's default)
FAST_FP8_ACCUM = "fast"
# Block-scaled fp8 promotes every 128-K group by construction (each group's sum is scaled on its own): no fast form
NO_FAST_FOR_BLOCKS = "block-scaled fp8 has no fast accumulation: its kernels promote the sum to fp32 every 128-K group"


def fp8_accum(dtype: str) -> str:
    """The accumulation contract of a problem of `dtype`: the reference one for fp8, UNSCALED for 16-bit dtypes."""
    dt = ALL.get(dtype)
    return REFERENCE_FP8_ACCUM if dt is not None and dt.scaled else UNSCALED


def fp8_accum_excluded(scaling: str, fp8_accum: str) -> Optional[str]:
    """Why no kernel runs an fp8 problem of this scaling under this accumulation contract (block scales and fast
    accumulation), else None."""
    sc = SCALINGS.get(scaling)
    return NO_FAST_FOR_BLOCKS if fp8_accum == FAST_FP8_ACCUM and sc is not None and sc.k_block else None


# A fast-accumulation row is judged against what cuBLAS's own fast accumulation does to the same inputs: at most
# this many times its error, and never less than the dtype's tolerance
FAST_ACCUM_ERR_FACTOR = 2.0


def tolerance(dtype: str, fp8_accum: str = UNSCALED, cublas_fast_err: Optional[float] = None) -> float:
    """The check's budget on max_rel_err: the dtype's, or for fast fp8 accumulation max(the dtype's,
    FAST_ACCUM_ERR_FACTOR x cuBLAS fast's own max_rel_err on the same inputs); None (not measured: no CUDA, or a
    layout cuBLAS fast has no call for) leaves the dtype's."""
    tol = get(dtype).tolerance
    if fp8_accum != FAST_FP8_ACCUM or cublas_fast_err is None or not math.isfinite(cublas_fast_err):
        return tol  # an inf or NaN measured error would admit any output
    return max(tol, FAST_ACCUM_ERR_FACTOR * cublas_fast_err)


def scaling(name: str) -> Scaling:
    try:
        return SCALINGS[name]
    except KeyError:
        raise ValueError(f"unknown scaling {name!r} (expected one of {', '.join(SCALINGS)})") from None


def problem_scaling(dtype: str, name: str) -> str:
    """The scaling a problem of `dtype` has when `name` is asked: a 16-bit dtype's "tensor" (the default) is
    UNSCALED; its other scalings stay, so that its rows say why they were skipped (fp8 only)."""
    dt = ALL.get(dtype)
    return UNSCALED if name == REFERENCE_SCALING and dt is not None and not dt.scaled else name


def label(dtype: str, scaling: Optional[str], fp8_accum: Optional[str] = None) -> str:
    """A dtype as tables, titles and cell names show it: 'fp8' (per tensor; a 16-bit dtype), 'fp8 row', 'fp8 block',
    and 'fp8 fast', 'fp8 row fast' under fast accumulation (precise, the reference, is not named)."""
    text = dtype if scaling in (None, "", UNSCALED, REFERENCE_SCALING) else f"{dtype} {scaling}"
    return f"{text} {FAST_FP8_ACCUM}" if fp8_accum == FAST_FP8_ACCUM else text


def problem_fp8_accum(dtype: str, name: str) -> str:
    """The accumulation contract a problem of `dtype` has when `name` is asked: a 16-bit dtype's is UNSCALED (it
    accumulates in fp32 throughout); an fp8 one's `name`."""
    dt = ALL.get(dtype)
    return UNSCALED if dt is not None and not dt.scaled else name
