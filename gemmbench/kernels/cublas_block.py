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
# first torch that runs them right where it runs them at all.
BLOCKWISE_TORCH = (2, 10)
# cuBLAS reads the weight's 128x128 scales in rows of ceil(K/128) rounded up to a multiple of 4 blocks (its documented
# scale layout, pytorch/pytorch#166752); torch's own check of the scales may refuse that padding (_k_blocks_probe).
_L4 = 4


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def block_scale_operands(a, a_scale, b_scale):
    """What torch._scaled_mm takes for block scales, in cuBLAS's layouts: the activations' (M_pad, ceil(K/128)) scales
    column-major over M padded to a multiple of 4 (the input factory lays them out so: inputs.act_block_scales), and
    the weight's (ceil(N/128), ceil(K/128)) scales transposed to (ceil(K/128), ceil(N/128)) over rows of
    round_up(ceil(K/128), 4).  Returns (a writer of the activations into what cuBLAS reads, the activations' scales,
    the weight's): M a multiple of 4 reads `a` itself; otherwise `a` is copied into M_pad rows whose padding is zero
    (scale 1), as a serving stack pads M per call.  Only the weight's are made here."""
    M, K = a.shape
    sa = act_scale_padded(a_scale)
    nN, nK = b_scale.shape
    sb = torch.zeros((nN, -(-nK // _L4) * _L4), dtype=torch.float32, device=a.device)
    sb[:, :nK] = b_scale
    if sa.shape[0] == M:
        return (lambda: a), sa, sb[:, :nK].t()
    a_pad = torch.zeros((sa.shape[0], K), dtype=a.dtype, device=a.device)

    def padded():
        a_pad[:M].copy_(a)
        return a_pad

    return padded, sa, sb[:, :nK].t()


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


def _probe_call(K: int) -> Optional[str]:
    """One tiny block-scaled call (M 4, N 256: two weight blocks along N) checked against its exact answer, or why it
    failed.  Every 128 x 128 weight block has its own scale, 1 + n + 2k, so a scale read from the wrong place changes
    the answer: all-ones operands give, in each column of block n, the sum over k of 128 * (1 + n + 2k)."""
    fp8 = dtypes.FP8
    M, N, nK = 4, 256, K // 128
    a = torch.ones((M, K), device="cuda").to(fp8.torch)
    b = torch.ones((N, K), device="cuda").to(fp8.torch)
    b_scale = 1.0 + torch.arange(2, device="cuda").view(2, 1) + 2.0 * torch.arange(nK, device="cuda").view(1, nK)
    a_at, sa, sb = block_scale_operands(a, act_block_scales(M, nK, "cuda"), b_scale)
    try:
        out = torch._scaled_mm(a_at(), b.t(), scale_a=sa, scale_b=sb, out_dtype=dtypes.get(fp8.out).torch)[:M]
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
        return f"refuses it: {str(exc).splitlines()[0][:160]}"
    want = [128.0 * sum(1 + n + 2 * k for k in range(nK)) for n in (0, 1)]
    got = [out[0, 0].item(), out[0, -1].item()]
    return None if got == want else f"reads the scales wrongly (a 4 x 256 x {K} probe gave {got}, expected {want})"


@functools.lru_cache(maxsize=None)
def _block_probe() -> Optional[str]:
    """Why this torch has no block-scaled fp8 on this GPU, or None: K 512, four blocks, where no padding is needed."""
    if _torch_version() < BLOCKWISE_TORCH:
        return (f"torch {torch.__version__} has no right block-scaled torch._scaled_mm: torch "
                f"{'.'.join(map(str, BLOCKWISE_TORCH))} (with CUDA 12.9+) has it")  # fmt: skip
    why = _probe_call(512)
    return f"torch {torch.__version__}'s block-scaled torch._scaled_mm {why}" if why else None


@functools.lru_cache(maxsize=None)
def _k_blocks_probe() -> Optional[str]:
    """Why this torch cannot run K of a number of 128-blocks that is not a multiple of 4, or None: K 384, three
    blocks, whose weight scales cuBLAS reads over rows padded to four (docs/GPU-FACTS.md §8: torch 2.11 refuses the
    padded rows and misreads unpadded ones; tests/test_gpu_block_scales.py holds the grid)."""
    why = _probe_call(384)
    return (f"torch {torch.__version__}'s block-scaled torch._scaled_mm runs only where ceil(K/128) is a multiple of 4 "
            f"(K % 512 == 0 for whole blocks): with K/128 = 3 it {why}") if why else None  # fmt: skip


def _block_supports(problem, device) -> Optional[str]:
    if problem.N % 16 or problem.K % 16:
        return f"torch._scaled_mm needs N and K divisible by 16 (N={problem.N}, K={problem.K})"
    rule = _block_rule(device.kind, tuple(device.capability) if device.kind == "cuda" else ())
    if rule:
        return rule
    odd_k = -(-problem.K // 128) % _L4 != 0  # weight scale rows cuBLAS reads padded: this torch may refuse them
    asked = "whether its torch has block-scaled _scaled_mm" + (" at this K" if odd_k else "")
    return on_the_gpu(device, asked) or _block_probe() or (_k_blocks_probe() if odd_k else None)


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
