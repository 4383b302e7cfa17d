"""The built-in variants that rows measure their speedup against, by dtype, kind (dense or MoE) and fp8 scaling.

The kernels register their Variant.baseline from this table, and the registry reads it where the kernels cannot be
imported (an install without torch or triton that only plots, reports and compares results)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Baseline:
    dtypes: tuple[str, ...]  # the rows' dtypes it is the baseline of (it may not run them: torch_moe_loop and fp8)
    moe: bool
    scalings: tuple[str, ...] = ("tensor",)  # the variant's fp8 scalings (registry.Variant.scalings)


BASELINES = {
    "cublas_bf16": Baseline(("bf16",), moe=False),
    "cublas_fp16": Baseline(("fp16",), moe=False),
    "cublas_fp8": Baseline(("fp8",), moe=False),
    "cublas_fp8_rowwise": Baseline(("fp8",), moe=False, scalings=("row",)),
    "cublas_fp8_block": Baseline(("fp8",), moe=False, scalings=("block", "block-ue8m0")),
    "torch_moe_loop": Baseline(("fp16", "bf16", "fp8"), moe=True),
}
