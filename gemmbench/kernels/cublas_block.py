"""cublas_fp8_block: fp8 with block scales (activations per 1x128 group along K, weights per 128x128 block:
DeepSeek-V3's recipe) through cuBLAS's block-scaled GEMM (CUDA 12.9), which torch._scaled_mm reaches on Hopper (sm90)
from torch 2.10 (BLOCKWISE_TORCH); the speedup baseline of dense block-scaled fp8 rows.  Elsewhere (the CPU, another
GPU, an older torch) it is skipped with the reason.

Registered after the Triton variants (gemmbench/kernels/__init__.py) so that the built-ins listed before it keep their colours.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from gemmbench import dtypes
from gemmbench.builtin_baselines import BASELINES
from gemmbench.measure.device import on_the_gpu
from gemmbench.measure.inputs import act_block_scales, act_scale_padded
from gemmbench.registry import Launch, Variant, register

# torch._scaled_mm took block scales in 2.9 (pytorch/pytorch#158037, cuBLAS 12.9's block-scaled GEMM); 2.10 is the
# first torch whose block-scaled _scaled_mm is right on every shape, so older ones are refused.
BLOCKWISE_TORCH = (2, 10)


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def block_scale_operands(a, a_scale, b_scale):
    """What torch._scaled_mm takes for block scales, in the layouts its own check names (ScaledBlas.cpp,
    is_blockwise_1x128_scaling / is_blockwise_128x128_scaling): the activations' (M_pad, ceil(K/128)) scales
    column-major over M padded to a multiple of 4 (the input factory lays them out so: inputs.act_block_scales), and
    the weight's (ceil(N/128), ceil(K/128)) scales row-major, handed over transposed.  Padding the weight's rows to a
    multiple of 4 blocks (cuBLAS's own layout) is torch's job: a padded row stride is refused wherever ceil(K/128) is
    not a multiple of 4.  Returns (a writer of the activations into what cuBLAS reads, the activations' scales, the
    weight's): M a multiple of 4 reads `a` itself; otherwise `a` is copied into M_pad rows whose padding is zero
    (scale 1), as a serving stack pads M per call."""
    M, K = a.shape
    sa = act_scale_padded(a_scale)
    sb = b_scale.contiguous().t()
    if sa.shape[0] == M:
        return (lambda: a), sa, sb
    a_pad = torch.zeros((sa.shape[0], K), dtype=a.dtype, device=a.device)

    def padded():
        a_pad[:M].copy_(a)
        return a_pad

    return padded, sa, sb


def _make_block_scaled_mm(problem, inputs) -> Launch:
    # nothing is made here from the activations: a launch reads them, and their scales, as they are at each call
    a, sa, sb = block_scale_operands(inputs.a, inputs.a_scale, inputs.b_scale)
    bt, out_dtype, M = inputs.b.t(), inputs.out_dtype, problem.M
    return Launch(fn=lambda: torch._scaled_mm(a(), bt, scale_a=sa, scale_b=sb, out_dtype=out_dtype)[:M])


def _block_rule(device_kind: str, capability: tuple) -> Optional[str]:
    """Why cuBLAS block-scaled fp8 cannot run on this kind of device, by its compute capability alone, or None."""
    if device_kind != "cuda":
        return "cuBLAS only: torch._scaled_mm with block scales runs on an NVIDIA GPU (Hopper, sm90), not the CPU"
    if capability != (9, 0):
        return f"torch._scaled_mm's block scales (DeepSeek recipe) run on Hopper (sm90) only, not sm{capability[0]}{capability[1]}"
    return None


@functools.lru_cache(maxsize=None)
def _block_probe() -> Optional[str]:
    """Why this torch refuses block-scaled fp8 on this GPU, or None: one tiny call (M 4, N 256, K 384: two weight
    blocks along N and three along K, the case a mislaid scale layout refuses or gets wrong), checked against its
    exact answer (all ones times scales that differ per block)."""
    if _torch_version() < BLOCKWISE_TORCH:
        return (f"torch {torch.__version__} has no right block-scaled torch._scaled_mm: torch "
                f"{'.'.join(map(str, BLOCKWISE_TORCH))} (with CUDA 12.9+) has it")  # fmt: skip
    fp8 = dtypes.FP8
    try:
        M, N, K = 4, 256, 384
        a = torch.ones((M, K), device="cuda").to(fp8.torch)
        b = torch.ones((N, K), device="cuda").to(fp8.torch)
        # weight block (n, k) scaled by 1 + n + 2k: every 128 x 128 block's scale differs, so a transposed or
        # padded read of the scales changes the answer; a column of block n sums 128 * (1 + n + 2k) over k = 0, 1, 2
        b_scale = 1.0 + torch.arange(2, device="cuda").view(2, 1) + 2.0 * torch.arange(3, device="cuda").view(1, 3)
        a, sa, sb = block_scale_operands(a, act_block_scales(M, 3, "cuda"), b_scale)
        out = torch._scaled_mm(a(), b.t(), scale_a=sa, scale_b=sb, out_dtype=dtypes.get(fp8.out).torch)[:M]
        per_block = torch.tensor([128.0 * (3 * (1 + n) + 2 * (0 + 1 + 2)) for n in (0, 1)], device="cuda")
        want = per_block.repeat_interleave(128)
        if not torch.equal(out.float(), want.expand(M, N)):
            return (f"torch {torch.__version__}'s block-scaled torch._scaled_mm reads the scales wrongly here (a "
                    f"4 x 256 x 384 probe gave {out[0, 0].item():g} and {out[0, -1].item():g}, expected "
                    f"{want[0].item():g} and {want[-1].item():g})")  # fmt: skip
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
        return (f"torch {torch.__version__} refuses block-scaled torch._scaled_mm here (torch "
                f"{'.'.join(map(str, BLOCKWISE_TORCH))} with CUDA 12.9+ has it): {str(exc).splitlines()[0][:160]}")  # fmt: skip


def _block_supports(problem, device) -> Optional[str]:
    if problem.N % 16 or problem.K % 16:
        return f"torch._scaled_mm needs N and K divisible by 16 (N={problem.N}, K={problem.K})"
    rule = _block_rule(device.kind, tuple(device.capability) if device.kind == "cuda" else ())
    return rule or on_the_gpu(device, "whether its torch has block-scaled _scaled_mm") or _block_probe()


register(
    Variant(
        "cublas_fp8_block",
        "cublas",
        ("fp8",),
        "torch._scaled_mm, fp8 e4m3, block scales (activations 1x128, weights 128x128; cuBLAS, Hopper), bf16 out",
        _make_block_scaled_mm,
        supports=_block_supports,
        baseline=BASELINES["cublas_fp8_block"].dtypes,
        scalings=BASELINES["cublas_fp8_block"].scalings,
    )
)
