"""The K loop both Triton GEMMs share: one output tile's fp32 sum over a range of K blocks.

Every load is masked: A's rows past M (a decode M of 1..15 in a 16-row tile) and the K tail always;
B's rows past N only when N is not a multiple of BLOCK_N (EVEN_N: the mask is then all true).
(Clamping A's rows onto row M-1 instead kept the loads in bounds without a mask, but measured on the
H100 made fp8 at M = 1 up to 50% slower than at M = 16: 16 rows loading one address.)

TMA=True: a_ptr and b_ptr are host-made tensor descriptors (Hopper's bulk tensor copy engine, which
the seed could not use: docs/SEEDS.md, TK-GEMM §3); the copy engine fills what lies past M, N and K with
zeros, so there are no masks and no address arithmetic in the loop.  tma_descriptors() says when a problem
allows them.

SCALE_BLOCK=128 (fp8 block scales, dtypes.SCALINGS "block"): the scales change every 128 columns of K, so they are
applied inside the loop, as DeepGEMM and vLLM's block-fp8 kernels do: each K step's dot goes into an fp32 tile of
its own, which is multiplied by its rows' activation scales (1 x 128 groups, (M, ceil(K/128))) and its columns'
weight scales (128 x 128 blocks, (ceil(N/128), ceil(K/128)): column n takes block row n // 128, so a BLOCK_N that is
not a multiple of 128 is right too) and added to the sum.  BLOCK_K must divide 128 (block_k_fits): one K step never
spans two scale blocks.  SCALE_BLOCK=0 compiles the loop exactly as before block scales existed.
"""

from dataclasses import replace

import torch
import triton
import triton.language as tl

from gemmbench import dtypes


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
    TMA: tl.constexpr,
    a_scale_ptr,  # SCALE_BLOCK: (M, ceil(K/128)) fp32; otherwise not read
    b_scale_ptr,  # SCALE_BLOCK: (ceil(N/128), ceil(K/128)) fp32; otherwise not read
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    SCALE_BLOCK: tl.constexpr,
):
    """sum over K blocks [kb_start, kb_end) of A tile @ B tile^T, fp32 (a, b as in out = a @ b^T), with the block
    scales applied per K step where SCALE_BLOCK (see the module's docstring).  Returns it with the tile's row and
    column indices and their in-bounds copies (rows_a, rows_b: for addresses only, e.g. row-wise scales)."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows_a = tl.where(offs_m < M, offs_m, M - 1)
    rows_b = tl.where(offs_n < N, offs_n, N - 1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SCALE_BLOCK:
        a_s_ptrs = a_scale_ptr + rows_a * stride_asm  # (BLOCK_M,): this tile's rows' group scales
        b_s_ptrs = weight_scale_ptrs(b_scale_ptr, rows_b, pid_n, stride_bsn, BLOCK_N, SCALE_BLOCK)
    if TMA:
        for kb in range(kb_start, kb_end):
            a = a_ptr.load([pid_m * BLOCK_M, kb * BLOCK_K])
            b = b_ptr.load([pid_n * BLOCK_N, kb * BLOCK_K])
            if SCALE_BLOCK:
                acc = add_scaled(acc, tl.dot(a, b.T, max_num_imprecise_acc=PRECISE_ACC), a_s_ptrs, b_s_ptrs,
                                  (kb * BLOCK_K) // SCALE_BLOCK, stride_ask, stride_bsk, BLOCK_N, SCALE_BLOCK)  # fmt: skip
            else:
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
            if SCALE_BLOCK:
                acc = add_scaled(acc, tl.dot(a, b, max_num_imprecise_acc=PRECISE_ACC), a_s_ptrs, b_s_ptrs,
                                  (kb * BLOCK_K) // SCALE_BLOCK, stride_ask, stride_bsk, BLOCK_N, SCALE_BLOCK)  # fmt: skip
            else:
                acc = tl.dot(a, b, acc, max_num_imprecise_acc=PRECISE_ACC)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    return acc, offs_m, offs_n, rows_a, rows_b


@triton.jit
def weight_scale_ptrs(b_scale_ptr, rows_b, pid_n, stride_bsn, BLOCK_N: tl.constexpr, SCALE_BLOCK: tl.constexpr):
    """Where a tile's columns find their weight block scales (one K block's column of them; add_scaled steps along K).
    A BLOCK_N that divides 128 puts the whole tile inside one 128-row block of the weight (tiles start at multiples of
    BLOCK_N): one address, so each K step scales by one (BLOCK_M,) vector (a_s * b_s) instead of an outer product,
    one multiply-add per accumulator element instead of two multiplies and an add.  Otherwise one address per column
    (its block row n // 128)."""
    if SCALE_BLOCK % BLOCK_N == 0:
        return b_scale_ptr + ((pid_n * BLOCK_N) // SCALE_BLOCK) * stride_bsn
    else:
        return b_scale_ptr + (rows_b // SCALE_BLOCK) * stride_bsn


@triton.jit
def add_scaled(
    acc, part, a_s_ptrs, b_s_ptrs, kk, stride_ask, stride_bsk, BLOCK_N: tl.constexpr, SCALE_BLOCK: tl.constexpr
):
    """acc + part (one K step's fp32 dot) times its rows' and columns' scales of scale block kk along K (b_s_ptrs as
    weight_scale_ptrs makes them: one scale for the tile, or one per column)."""
    a_s = tl.load(a_s_ptrs + kk * stride_ask)
    b_s = tl.load(b_s_ptrs + kk * stride_bsk)
    if SCALE_BLOCK % BLOCK_N == 0:
        return acc + part * (a_s * b_s)[:, None]
    else:
        return acc + part * (a_s[:, None] * b_s[None, :])


@triton.jit
def scale_tile(acc, a_scale_ptr, b_scale_ptr, rows_a, rows_b, SCALE: tl.constexpr):
    """A tile's fp32 sum times its fp8 scales, applied once after the K loop: "tensor", one scalar each; "row", one
    per row of A and one per row of B (rows_a, rows_b: in-bounds indices, as accumulate_tile returns them).  "block"
    (applied in the K loop) and "none": the sum as it is."""
    if SCALE == "tensor":
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr))
    elif SCALE == "row":
        acc = acc * tl.load(a_scale_ptr + rows_a)[:, None] * tl.load(b_scale_ptr + rows_b)[None, :]
    return acc


# The K columns one block scale covers (kernels take it as SCALE_BLOCK).
SCALE_BLOCK = dtypes.BLOCK
# The fp8 scalings the Triton GEMMs (dense_dp, splitk, fused_moe) run: per tensor, and the block scales
TRITON_SCALINGS = ("tensor", "block", "block-ue8m0")
# The fp8 accumulation contracts every Triton GEMM runs (fp8_promote_every: precise promotes, fast does not)
TRITON_FP8_ACCUMS = ("precise", "fast")


def block_k_fits(block_k: int) -> bool:
    """A BLOCK_K the block-scaled loop can take: it divides 128, so a K step lies within one scale block."""
    return SCALE_BLOCK % block_k == 0


def block_scaled(problem) -> bool:
    """Whether a problem's fp8 scales are blocks along K (dtypes.Scaling.k_block): its configs need block_k_fits."""
    sc = dtypes.SCALINGS.get(problem.scaling)
    return sc is not None and sc.k_block is not None


def fit_block_k(configs: list, block_scaled: bool) -> list:
    """A search space for block scales: BLOCK_K above 128 becomes 128 (block_k_fits), duplicates dropped, order
    kept; without block scales the space as it is."""
    if not block_scaled:
        return configs
    fitted = [c if block_k_fits(c.BLOCK_K) else replace(c, BLOCK_K=SCALE_BLOCK) for c in configs]
    return list(dict.fromkeys(fitted))


class BlockScales:
    """The block scales of a launch as kernel arguments: (a_scale, b_scale, stride_asm, stride_ask, stride_bsn,
    stride_bsk, SCALE_BLOCK), or placeholders that are never read (SCALE_BLOCK 0) where the inputs have none."""

    def __init__(self, inputs, b_scale=None):
        self.on = inputs.k_block is not None
        if self.on:
            assert inputs.k_block == SCALE_BLOCK, inputs.k_block
            b_scale = inputs.b_scale if b_scale is None else b_scale
            self.a, self.b = inputs.a_scale, b_scale
            self.strides = (*inputs.a_scale.stride(), *b_scale.stride()[-2:])
        else:
            self.a = self.b = inputs.a
            self.strides = (0, 0, 0, 0)

    def check(self, block_k: int) -> None:
        if self.on and not block_k_fits(block_k):
            raise ValueError(f"BLOCK_K={block_k} does not divide the block scales' {SCALE_BLOCK} columns of K")

    @property
    def args(self) -> tuple:
        return (self.a, self.b, *self.strides)

    @property
    def block(self) -> int:
        return SCALE_BLOCK if self.on else 0


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
# configs were typed).  Measured on the H100 (docs/BENCHMARKS.md): 128 gives the same max and mean error against
# the fp32 reference as cuBLAS fp8 (torch._scaled_mm, no fast accumulation) on every shape probed, and it
# is up to 1.5x faster than promoting every 32 on prefill shapes.
FP8_PROMOTE = 128


def fp8_promote_every(a: torch.Tensor, config, fp8_accum: str):
    """tl.dot's max_num_imprecise_acc: how many K an fp8 wgmma chain may sum in its reduced-precision
    accumulator before Triton adds it into the fp32 one (config.FP8_PROMOTE, else FP8_PROMOTE, at most
    one K tile): the "precise" contract (dtypes.FP8_ACCUMS).  None for "fast" (Triton's sm90 default then sums all
    of K in the reduced-precision accumulator, as cuBLAS use_fast_accum does) and for 16-bit dtypes (fp32
    throughout)."""
    if a.dtype != torch.float8_e4m3fn or fp8_accum == dtypes.FAST_FP8_ACCUM:
        return None
    return min(FP8_PROMOTE if config.FP8_PROMOTE is None else config.FP8_PROMOTE, config.BLOCK_K)
