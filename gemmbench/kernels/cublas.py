"""cuBLAS baselines through PyTorch (on a CPU machine, the same calls run torch's CPU matmul).

cublas_bf16 / cublas_fp16: torch.mm(a, b.T) with the weight stored (N, K), as nn.Linear does.
cublas_fp8: torch._scaled_mm with per-tensor fp32 scales, bf16 out; cublas_fp8_rowwise: one scale
per activation row and per weight row (what fp8 serving stacks use); both run either fp8 accumulation contract
(Problem.fp8_accum "fast": use_fast_accum=True); cublas_fp8_block (block scales) is in
cublas_block.py.  Each is the speedup baseline of its dtype's and scaling's dense rows (Variant.baseline,
Variant.scalings).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from gemmbench import dtypes
from gemmbench.builtin_baselines import BASELINES
from gemmbench.measure.device import on_the_gpu
from gemmbench.registry import Launch, Variant, register


def _make_mm(problem, inputs) -> Launch:
    a, b = inputs.a, inputs.b
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=a.device)
    bt = b.t()  # a view: no copy, cuBLAS reads the (N, K) weight transposed
    return Launch(fn=lambda: torch.mm(a, bt, out=out), out=out)


def _make_scaled_mm(problem, inputs) -> Launch:
    a, bt, sa, sb = inputs.scaled_mm_operands()
    out_dtype = inputs.out_dtype
    fast = problem.fp8_accum == dtypes.FAST_FP8_ACCUM  # cuBLAS's fast accumulation: no fp32 promotion along K
    return Launch(fn=lambda: torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=out_dtype,
                                              use_fast_accum=fast))  # fmt: skip


@functools.lru_cache(maxsize=None)
def _scaled_mm_error(device_kind: str, scaling: str) -> Optional[str]:
    """Run a tiny _scaled_mm once: the only reliable way to know whether this torch/GPU has the path."""
    dev = "cuda" if device_kind == "cuda" else "cpu"
    fp8 = dtypes.FP8
    try:
        a = torch.ones((16, 32), device=dev).to(fp8.torch)
        b = torch.ones((16, 32), device=dev).to(fp8.torch)
        if scaling == "row":
            sa, sb = torch.ones((16, 1), device=dev), torch.ones((1, 16), device=dev)
        else:
            sa, sb = torch.ones((), device=dev), torch.ones((), device=dev)
        torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=dtypes.get(fp8.out).torch)
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
        return f"torch._scaled_mm ({scaling}-wise) is not available here: {str(exc).splitlines()[0][:160]}"


def fp8_supports(scaling: str):
    """supports() of a _scaled_mm at this scaling: N and K, the GPU, and whether this torch has the path."""

    def supports(problem, device) -> Optional[str]:
        if problem.N % 16 or problem.K % 16:
            return f"torch._scaled_mm needs N and K divisible by 16 (N={problem.N}, K={problem.K})"
        if device.kind == "cuda" and device.capability < ((9, 0) if scaling == "row" else (8, 9)):
            return f"cuBLAS fp8 ({scaling}-wise) needs a newer GPU than {device.name} {device.capability}"
        return on_the_gpu(device, f"whether its torch has _scaled_mm's {scaling}-wise path") or _scaled_mm_error(
            device.kind, scaling
        )

    return supports


register(Variant("cublas_bf16", "cublas", ("bf16",), "torch.mm, bf16 (cuBLAS on a GPU)", _make_mm,
                 baseline=BASELINES["cublas_bf16"].dtypes))  # fmt: skip
register(Variant("cublas_fp16", "cublas", ("fp16",), "torch.mm, fp16 (cuBLAS on a GPU)", _make_mm,
                 baseline=BASELINES["cublas_fp16"].dtypes))  # fmt: skip
register(
    Variant(
        "cublas_fp8",
        "cublas",
        ("fp8",),
        "torch._scaled_mm, fp8 e4m3, per-tensor scales, bf16 out",
        _make_scaled_mm,
        supports=fp8_supports("tensor"),
        baseline=BASELINES["cublas_fp8"].dtypes,
        scalings=BASELINES["cublas_fp8"].scalings,
        fp8_accums=dtypes.FP8_ACCUMS,
    )
)
register(
    Variant(
        "cublas_fp8_rowwise",
        "cublas",
        ("fp8",),
        "torch._scaled_mm, fp8 e4m3, row-wise scales, bf16 out",
        _make_scaled_mm,
        supports=fp8_supports("row"),
        baseline=BASELINES["cublas_fp8_rowwise"].dtypes,
        scalings=BASELINES["cublas_fp8_rowwise"].scalings,
        fp8_accums=dtypes.FP8_ACCUMS,
    )
)
