"""The K loop both Triton GEMMs share: one output tile's fp32 sum over a range of K blocks.

Every load is masked: A's rows past M (a decode M of 1..15 in a 16-row tile) and the K tail always;
B's rows past N only when N is not a multiple of BLOCK_N (EVEN_N: the mask is then all true).
(Clamping A's rows onto row M-1 instead kept the loads in bounds without a mask, but measured on the
H100 made fp8 at M = 1 up to 50% slower than at M = 16: 16 rows loading one address.)

TMA=True: a_ptr and b_ptr are host-made tensor descriptors (Hopper's bulk tensor copy engine, which
the seed could not use: docs/SEEDS.md, TK-GEMM §3); the copy engine fills what lies past M, N and K with
zeros, so there are no masks and no address arithmetic in the loop.  tma_descriptors() says when a problem
allows them.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def accumulate_tile(
    a_ptr,
    b_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    pid_m,
    pid_n,
    kb_start,
    kb_end,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    PRECISE_ACC: tl.constexpr,
    TMA: tl.constexpr = False,
):
    """sum over K blocks [kb_start, kb_end) of A tile @ B tile^T, fp32 (a, b as in out = a @ b^T).
    Returns it with the tile's row and column indices and their in-bounds copies (rows_a, rows_b:
    for addresses only, e.g. row-wise scales)."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows_a = tl.where(offs_m < M, offs_m, M - 1)
    rows_b = tl.where(offs_n < N, offs_n, N - 1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TMA:
        for kb in range(kb_start, kb_end):
            a = a_ptr.load([pid_m * BLOCK_M, kb * BLOCK_K])
            b = b_ptr.load([pid_n * BLOCK_N, kb * BLOCK_K])
            acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=PRECISE_ACC)
    else:
        m_ok = offs_m < M
        n_ok = offs_n < N
        a_ptrs = a_ptr + rows_a[:, None] * stride_am + (kb_start * BLOCK_K + offs_k)[None, :] * stride_ak
        b_ptrs = b_ptr + rows_b[None, :] * stride_bn + (kb_start * BLOCK_K + offs_k)[:, None] * stride_bk
        for kb in range(kb_start, kb_end):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=m_ok[:, None], other=0.0)
                if EVEN_N:
                    b = tl.load(b_ptrs)
                else:
                    b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
            else:
                k_left = K - kb * BLOCK_K  # the K tail: masked, zeros contribute nothing
                a = tl.load(a_ptrs, mask=m_ok[:, None] & (offs_k[None, :] < k_left), other=0.0)
                b = tl.load(b_ptrs, mask=n_ok[None, :] & (offs_k[:, None] < k_left), other=0.0)
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=PRECISE_ACC)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    return acc, offs_m, offs_n, rows_a, rows_b


def tma_descriptors(a: torch.Tensor, b: torch.Tensor, config):
    """(a, b) as tensor descriptors for the config's tiles (a config with TMA: dense_dp.DenseConfig,
    splitk.SplitKConfig), or None where the config asks for pointers or the copy engine cannot take them:
    a GPU older than Hopper, or a row stride or base address that is not 16-byte aligned."""
    if not config.TMA or a.is_cuda and torch.cuda.get_device_capability(a.device)[0] < 9:
        return None
    if any(t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16 for t in (a, b)):
        return None
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = config.BLOCK_M, config.BLOCK_N, config.BLOCK_K
    return TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk])


# What a config's FP8_PROMOTE stands for when it is not set (None: no key in the config's JSON, as before
# configs were typed).  Measured on the H100 (2026-11-22): 128 gives the same max and mean error against
# the fp32 reference as cuBLAS fp8 (torch._scaled_mm, no fast accumulation) on every shape probed, and it
# is up to 1.5x faster than promoting every 32 on prefill shapes.
FP8_PROMOTE = 128


def fp8_promote_every(a: torch.Tensor, config):
    """tl.dot's max_num_imprecise_acc: how many K an fp8 wgmma chain may sum in its reduced-precision
    accumulator before Triton adds it into the fp32 one (config.FP8_PROMOTE, else FP8_PROMOTE, at most
    one K tile).  None for 16-bit dtypes (fp32 throughout)."""
    if a.dtype != torch.float8_e4m3fn:
        return None
    return min(FP8_PROMOTE if config.FP8_PROMOTE is None else config.FP8_PROMOTE, config.BLOCK_K)
