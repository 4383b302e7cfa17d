"""What a dtype and an fp8 scaling mean to gemmbench, in one table that every module reads: the --dtype choices
(shapes), the operands and output the input factory makes (inputs), the check's tolerance (check), the bytes of the
FLOP/byte model (metrics), the measured peak that bounds a row (ceilings) and the datasheet peaks of the roofline
plot (plot.roofline).  Which variant is the speedup reference is declared by the variants (registry.Variant.baseline).

No torch here: shapes, metrics and the plots import this module and stay light; `DType.torch` imports torch when a
tensor is made.
"""

from __future__ import annotations

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
    datasheet_tflops: dict[str, float]  # NVIDIA's dense tensor-core TFLOP/s by product (plot.roofline.DATASHEET)
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
    (M, K) and in a weight (N, K); None spans the whole dimension.  MoE weights always carry one scale per expert,
    whatever the scaling (inputs.make_inputs: the layout fused MoE kernels consume)."""

    name: str  # registry.Variant.fp8_scaling and inputs.make_inputs' `scaling`
    meaning: str
    act_block: tuple[Optional[int], Optional[int]]  # (rows, columns of K) one activation scale covers
    weight_block: tuple[Optional[int], Optional[int]]  # (rows of N, columns of K) one weight scale covers
    scale_bytes: int = 4  # fp32

    def act_scales(self, M: int, K: int) -> int:
        return _blocks(M, self.act_block[0]) * _blocks(K, self.act_block[1])

    def weight_scales(self, N: int, K: int) -> int:
        return _blocks(N, self.weight_block[0]) * _blocks(K, self.weight_block[1])


# Block scalings (activations 1x128, weights 128x128; ue8m0: power-of-two scales of 1 byte) are rows of this table:
# act_block (1, 128), weight_block (128, 128), scale_bytes 4 or 1.
SCALINGS = {
    s.name: s
    for s in (
        Scaling("tensor", "one scale per operand: (1,) and (1,)", (None, None), (None, None)),
        Scaling("row", "one scale per activation row and per weight row: (M, 1) and (N, 1)", (1, None), (1, None)),
    )
}
# What rows of a scaling with no baseline of its own, and a baseline's own rows, are measured against
# (tables.baseline_for): cuBLAS's plain fp8 GEMM takes per-tensor scales.
REFERENCE_SCALING = "tensor"


def scaling(name: str) -> Scaling:
    try:
        return SCALINGS[name]
    except KeyError:
        raise ValueError(f"unknown fp8_scaling {name!r} (expected {' or '.join(SCALINGS)})") from None


def row_scaling(dtype: str, fp8_scaling: str) -> str:
    """The scaling a row's bytes are counted with: the variant's own for a scaled (fp8) dtype, else none to count."""
    return fp8_scaling if get(dtype).scaled else REFERENCE_SCALING
