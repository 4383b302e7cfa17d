"""cuBLAS baselines through PyTorch (on a CPU machine, the same calls run torch's CPU matmul).

cublas_bf16 / cublas_fp16: torch.mm(a, b.T) with the weight stored (N, K), as nn.Linear does.
cublas_fp8: torch._scaled_mm with per-tensor fp32 scales, bf16 out; cublas_fp8_rowwise: one scale
per activation row and per weight row (what fp8 serving stacks use); cublas_fp8_block: block scales (activations
per 1x128 group, weights per 128x128 block: DeepSeek-V3's recipe) through cuBLAS's block-scaled GEMM (CUDA 12.9),
which torch._scaled_mm reaches on Hopper (sm90) from torch 2.10 (BLOCKWISE_TORCH).  Each is the speedup baseline of
its dtype's and scaling's dense rows (Variant.baseline, Variant.scalings).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from gemmbench import dtypes
from gemmbench.registry import Launch, Variant, register


def _make_mm(problem, inputs) -> Launch:
    a, b = inputs.a, inputs.b
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=a.device)
    bt = b.t()  # a view: no copy, cuBLAS reads the (N, K) weight transposed
    return Launch(fn=lambda: torch.mm(a, bt, out=out), out=out)


def _make_scaled_mm(problem, inputs) -> Launch:
    a, bt = inputs.a, inputs.b.t()  # _scaled_mm wants B column-major: the (N, K) weight's transpose
    sa = inputs.a_scale
    sb = inputs.b_scale.reshape(1, -1) if inputs.scaling == "row" else inputs.b_scale
    out_dtype = inputs.out_dtype
    return Launch(fn=lambda: torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=out_dtype))


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


def _fp8_supports(scaling: str):
    def supports(problem, device) -> Optional[str]:
        if problem.N % 16 or problem.K % 16:
            return f"torch._scaled_mm needs N and K divisible by 16 (N={problem.N}, K={problem.K})"
        if device.kind == "cuda" and device.capability < ((9, 0) if scaling == "row" else (8, 9)):
            return f"cuBLAS fp8 ({scaling}-wise) needs a newer GPU than {device.name} {device.capability}"
        return _scaled_mm_error(device.kind, scaling)

    return supports


# torch._scaled_mm took block scales in 2.9 (pytorch/pytorch#158037, cuBLAS 12.9's block-scaled GEMM), but laid
# the weight's scales out wrongly where ceil(K/128) is not a multiple of 4 (silently wrong results) until 2.10
# (pytorch/pytorch#166752): 2.10 is the first torch whose block-scaled _scaled_mm is right on every shape.
BLOCKWISE_TORCH = (2, 10)
_L4 = 4  # cuBLAS wants the weight scales' K extent padded to a multiple of 4 blocks (#166752)


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def block_scale_operands(a, a_scale, b_scale, M_pad: int):
    """What torch._scaled_mm takes for block scales (its cuBLAS layouts, pytorch/pytorch#166752): the activations
    padded to M_pad rows (cuBLAS wants M a multiple of 4: the scales' columns are M apart, 16-byte aligned), their
    (M_pad, ceil(K/128)) scales column-major (stride (1, M_pad)), and the weight's (ceil(N/128), ceil(K/128))
    scales transposed to (ceil(K/128), ceil(N/128)) over rows of round_up(ceil(K/128), 4).  Padded rows are zeros
    (scale 1): they add no work anyone reads."""
    M, K = a.shape
    a_pad = torch.zeros((M_pad, K), dtype=a.dtype, device=a.device)
    a_pad[:M] = a
    sa = torch.ones((a_scale.shape[1], M_pad), dtype=torch.float32, device=a.device)
    sa[:, :M] = a_scale.t()
    nN, nK = b_scale.shape
    sb = torch.zeros((nN, -(-nK // _L4) * _L4), dtype=torch.float32, device=a.device)
    sb[:, :nK] = b_scale
    return a_pad, sa.t(), sb[:, :nK].t()


def _make_block_scaled_mm(problem, inputs) -> Launch:
    M_pad = -(-problem.M // 4) * 4
    # made once here, outside the timed call: a serving stack (vLLM's torch _scaled_mm block kernel) pads M per call
    a, sa, sb = block_scale_operands(inputs.a, inputs.a_scale, inputs.b_scale, M_pad)
    bt, out_dtype, M = inputs.b.t(), inputs.out_dtype, problem.M
    return Launch(fn=lambda: torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=out_dtype)[:M])


@functools.lru_cache(maxsize=None)
def _block_error(device_kind: str, capability: tuple) -> Optional[str]:
    """Why cuBLAS block-scaled fp8 cannot run here, or None: one tiny call (M 4, N 128, K 256) where torch may have it."""
    if device_kind != "cuda":
        return "cuBLAS only: torch._scaled_mm with block scales runs on an NVIDIA GPU (Hopper, sm90), not the CPU"
    if capability != (9, 0):
        return f"torch._scaled_mm's block scales (DeepSeek recipe) run on Hopper (sm90) only, not sm{capability[0]}{capability[1]}"
    if _torch_version() < BLOCKWISE_TORCH:
        return (f"torch {torch.__version__} has no right block-scaled torch._scaled_mm: torch "
                f"{'.'.join(map(str, BLOCKWISE_TORCH))} (with CUDA 12.9+) has it")  # fmt: skip
    fp8 = dtypes.FP8
    try:
        a = torch.ones((4, 256), device="cuda").to(fp8.torch)
        b = torch.ones((128, 256), device="cuda").to(fp8.torch)
        a, sa, sb = block_scale_operands(a, torch.ones((4, 2), device="cuda"), torch.ones((1, 2), device="cuda"), 4)
        torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=dtypes.get(fp8.out).torch)
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
        return (f"torch {torch.__version__} refuses block-scaled torch._scaled_mm here (torch "
                f"{'.'.join(map(str, BLOCKWISE_TORCH))} with CUDA 12.9+ has it): {str(exc).splitlines()[0][:160]}")  # fmt: skip


def _block_supports(problem, device) -> Optional[str]:
    if problem.N % 16 or problem.K % 16:
        return f"torch._scaled_mm needs N and K divisible by 16 (N={problem.N}, K={problem.K})"
    return _block_error(device.kind, tuple(device.capability) if device.kind == "cuda" else ())


register(Variant("cublas_bf16", "cublas", ("bf16",), "torch.mm, bf16 (cuBLAS on a GPU)", _make_mm, baseline=("bf16",)))
register(Variant("cublas_fp16", "cublas", ("fp16",), "torch.mm, fp16 (cuBLAS on a GPU)", _make_mm, baseline=("fp16",)))
register(
    Variant(
        "cublas_fp8",
        "cublas",
        ("fp8",),
        "torch._scaled_mm, fp8 e4m3, per-tensor scales, bf16 out",
        _make_scaled_mm,
        supports=_fp8_supports("tensor"),
        baseline=("fp8",),
        scalings=("tensor",),
    )
)
register(
    Variant(
        "cublas_fp8_rowwise",
        "cublas",
        ("fp8",),
        "torch._scaled_mm, fp8 e4m3, row-wise scales, bf16 out",
        _make_scaled_mm,
        supports=_fp8_supports("row"),
        baseline=("fp8",),
        scalings=("row",),
    )
)
register(
    Variant(
        "cublas_fp8_block",
        "cublas",
        ("fp8",),
        "torch._scaled_mm, fp8 e4m3, block scales (activations 1x128, weights 128x128; cuBLAS, Hopper), bf16 out",
        _make_block_scaled_mm,
        supports=_block_supports,
        baseline=("fp8",),
        scalings=("block", "block-ue8m0"),
    )
)
