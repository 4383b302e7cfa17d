"""GPU tests of fp8 block scales (marker `gpu`, skipped without CUDA): every block-scaled variant against
the fp32 reference on shapes with partial scale blocks, cuBLAS's block-scaled GEMM where this torch has it, the
planted neighbouring-block kernel caught on the GPU too, and the fused MoE's K tail (GPT-OSS's K = 2880 is not a
multiple of BLOCK_K 128).  No timing is asserted."""

from __future__ import annotations

import pytest
import torch

from gemmbench import registry
from gemmbench.measure.check import check_cell
from gemmbench.measure.device import detect
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

pytestmark = pytest.mark.gpu

# (M, N, K): decode and prefill rows, N and K with partial 128-blocks (200 = 128 + 72, 320 = 2 x 128 + 64), and
# DeepSeek-V3's kv_a (576 = 4.5 blocks of N) and o (K 16384 / TP 8 = 2048)
DENSE = [(1, 576, 7168), (16, 200, 320), (33, 1536, 2048), (512, 7168, 2048)]
DENSE_VARIANTS = ["triton_dp_grouped", "triton_dp_col", "triton_splitk_atomic", "triton_splitk_reduce",
                  "cublas_fp8_block"]  # fmt: skip
# (tokens, N, K, E, topk): DeepSeek-V3's routed w2 at EP 8 (32 local experts of 256), a small one with tails
MOE = [(8, 7168, 2048, 256, 8, 8), (33, 200, 320, 8, 2, 1), (300, 256, 384, 16, 4, 2)]
MOE_VARIANTS = [
    "triton_moe_col",
    "triton_moe_grouped",
    "triton_moe_splitk",
    "triton_moe_persistent",
    "triton_moe_permuted",
]


def _ok(p: Problem, name: str) -> None:
    v = registry.get(name)
    reason = v.unsupported_reason(p, detect())
    if reason:  # only cuBLAS's block GEMM may be missing (an older torch): never a Triton variant
        assert name == "cublas_fp8_block" and "torch" in reason, reason
        return
    result = check_cell(p, v, make_inputs(p, 11, "cuda")).result
    assert result.ok, f"{name} {p.label}: {result.detail}"


@pytest.mark.parametrize("scaling", ["block", "block-ue8m0"])
@pytest.mark.parametrize("name", DENSE_VARIANTS)
@pytest.mark.parametrize("M,N,K", DENSE)
def test_dense_block_variants_on_gpu(name, scaling, M, N, K):
    _ok(Problem("test", "g", M, N, K, "fp8", scaling=scaling), name)


@pytest.mark.parametrize("name", MOE_VARIANTS)
@pytest.mark.parametrize("M,N,K,E,topk,ep", MOE)
def test_fused_moe_block_on_gpu(name, M, N, K, E, topk, ep):
    _ok(Problem("test", "moe", M, N, K, "fp8", E=E, topk=topk, ep=ep, scaling="block"), name)


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
@pytest.mark.parametrize("name", MOE_VARIANTS)
def test_fused_moe_k_tail_on_gpu(name, dtype):
    """GPT-OSS-120B's w2 (N 2880, K 2880, 128 experts top-4) at 16 tokens: K = 22.5 blocks of 128, so the kernel's
    unmasked full blocks and its masked tail block must add up to the reference."""
    _ok(Problem("test", "moe", 16, 2880, 2880, dtype, E=128, topk=4), name)


def test_cublas_block_is_there_on_this_torch():
    """torch 2.10+ on Hopper has the block-scaled scaled-mm (the variant says which version where not): the lent
    H100 runs torch 2.11, so the baseline of every block row must not be skipped there."""
    p = Problem("test", "g", 16, 1536, 7168, "fp8", scaling="block")
    reason = registry.get("cublas_fp8_block").unsupported_reason(p, detect())
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) >= (2, 10) and torch.cuda.get_device_capability() == (9, 0):
        assert reason is None, reason
    else:
        assert reason and "2.10" in reason


@pytest.mark.parametrize("N", [512, 7168])
@pytest.mark.parametrize("K", range(256, 3072 + 1, 128))
def test_cublas_block_runs_right_or_says_its_k_rule(K, N):
    """The grid of docs/GPU-FACTS.md §8 at M 16 (DeepSeek-V3 at TP 8 has K 2304 and 256: 18 and 2 blocks): where
    this torch runs the block-scaled GEMM the variant says nothing and matches the fp32 reference; where it does not,
    the variant skips with the K rule, and only where ceil(K/128) is not a multiple of 4 (cuBLAS's padded scale
    rows).  Never an error row."""
    p = Problem("test", "g", 16, N, K, "fp8", scaling="block")
    v = registry.get("cublas_fp8_block")
    reason = v.unsupported_reason(p, detect())
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 10) or torch.cuda.get_device_capability() != (9, 0):
        assert reason and "torch" in reason, reason
        return
    if reason is not None:
        assert "multiple of 4" in reason and -(-K // 128) % 4 != 0, reason
        return
    result = check_cell(p, v, make_inputs(p, 11, "cuda")).result
    assert result.ok, f"cublas_fp8_block {p.label}: {result.detail}"
