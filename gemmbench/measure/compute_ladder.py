"""The compute ceiling of each dtype: the best cuBLAS rate over a ladder of large, well-shaped GEMMs.

One 8192³ GEMM was not the peak: on an H100 cuBLAS fp8 ran Llama3-405B's GEMMs at M 2048 at 1473-1549 TFLOP/s against
a ceiling of 1460.7 measured at 8192³ (docs/GPU-FACTS.md), so rows showed 101-106% of their roofline.  The ladder times cuBLAS
(torch.mm; torch._scaled_mm for fp8, per-tensor scales, bf16 out: the cublas_* variants' calls) at each rung and
takes, per dtype, the best rung's rate at its fastest tenth of samples (the 10th percentile of its times).

Why not the median: the ladder's 405B rungs are the very shapes a sweep times, with the same kernel, so a median
ceiling would put those rows at 100% +- their noise and call half of them "above the ceiling".  The fast tenth is a
rate the GPU reached on that kernel in this clock state.

The operands are zeros.  A GEMM's rate depends on its data only through power: random operands draw more, and a
rung's 0.7 s of sustained calls can take a 700 W H100 to its power cap and lower clocks (Llama3-70B's lm_head at
M 4096, random bf16, ran at 1275-1695 MHz under sw_power_cap; docs/BENCHMARKS.md).  Zeros keep the power low and the
clocks at their maximum: the rate of the tensor cores at this clock state, which real data reaches in bursts short
enough to stay under the cap, and no higher.  One ladder of random operands read a bf16 ceiling of 753.6 TFLOP/s
while cuBLAS ran mlp_down at M 4096 at 837 in a short cell (111%); that session may also have shared the GPU with a
crashed profiler's processes, which was not separated.  Rungs that would not fit in 80% of the free GPU memory are
skipped, and say so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from gemmbench import dtypes
from gemmbench.results import metrics

# (M, N, K).  The squares show where the GPU's rate levels off with size; the two 405B-like rungs are the shapes that
# passed the 8192³ ceiling (M 2048 and K 16384: Llama3-405B's hidden size, N 53248 its MLP width, N 106496 its fused
# gate_up).  The largest, 2048 x 106496 x 16384 in fp8, holds (2048 + 106496) * 16384 * 3 + 2048 * 106496 * 2 bytes
# = 5.8 GB (fp8 operands are cast from bf16 ones: 3 bytes an element while both exist; bf16 out): every rung fits an
# H100's 80 GB.
RUNGS: tuple[tuple[int, int, int], ...] = (
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 16384, 16384),
    (2048, 53248, 16384),
    (2048, 106496, 16384),
)
DTYPES = ("fp8", "bf16", "fp16")
FAST_PERCENTILE = 10  # the ceiling's rate: this percentile of a rung's times (module docstring)
MEMORY_SHARE = 0.8  # of the free GPU memory a rung may take: the rest is left to the allocator and other tensors


@dataclass
class Rung:
    dtype: str
    m: int
    n: int
    k: int
    median_us: Optional[float] = None
    fast_us: Optional[float] = None  # the 10th percentile of the samples (FAST_PERCENTILE)
    tflops: Optional[float] = None  # at fast_us
    skipped: Optional[str] = None  # why this rung was not timed (memory; no fp8 path)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def rung_bytes(dtype: str, m: int, n: int, k: int) -> int:
    """GPU memory a rung holds at once: A (M x K), B (N x K), the output (M x N); fp8 operands are cast from bf16
    ones, which exist alongside them while they are made."""
    d = dtypes.get(dtype)
    operand = d.bytes + (2 if d.scaled else 0)
    return (m * k + n * k) * operand + m * n * dtypes.get(d.out).bytes


def climb(
    samples_us: Callable[[str, int, int, int], Sequence[float]],
    free_bytes: int,
    which: Sequence[str] = DTYPES,
    rungs: Sequence[tuple[int, int, int]] = RUNGS,
) -> list[Rung]:
    """Time every rung of every dtype with `samples_us(dtype, m, n, k)` (the samples of one GEMM, in µs; raises
    RuntimeError where the GPU or torch has no path for the dtype).  Rungs over MEMORY_SHARE of free_bytes are
    skipped, as is the rest of a dtype once one rung found no path."""
    out = []
    for dtype in which:
        no_path: Optional[str] = None
        for m, n, k in rungs:
            rung = Rung(dtype, m, n, k)
            need = rung_bytes(dtype, m, n, k)
            if no_path:
                rung.skipped = no_path
            elif need > MEMORY_SHARE * free_bytes:
                rung.skipped = (
                    f"needs {need / 1e9:.1f} GB, over {MEMORY_SHARE:.0%} of the {free_bytes / 1e9:.1f} GB free"
                )
            else:
                try:
                    samples = samples_us(dtype, m, n, k)
                    rung.median_us = float(np.median(samples))
                    rung.fast_us = float(np.percentile(samples, FAST_PERCENTILE))
                    rung.tflops = metrics.tflops(rung.flops, rung.fast_us)
                except RuntimeError as exc:
                    no_path = rung.skipped = f"no {dtype} path: {str(exc).splitlines()[0][:120]}"
            out.append(rung)
    return out


def best(rungs: Sequence[Rung]) -> dict[str, float]:
    """dtype -> the highest TFLOP/s (at the fast tenth) over its timed rungs (dtypes with none timed are left out)."""
    peaks: dict[str, float] = {}
    for r in rungs:
        if r.tflops is not None and r.tflops > peaks.get(r.dtype, 0.0):
            peaks[r.dtype] = r.tflops
    return peaks


def as_rows(rungs: Sequence[Rung]) -> list[dict]:
    return [asdict(r) for r in rungs]


def from_rows(rows: Sequence[dict]) -> list[Rung]:
    return [Rung(**r) for r in rows]


def cuda_samples(dtype: str, m: int, n: int, k: int) -> list:
    """The cold-L2 samples (µs) of one cuBLAS GEMM of zeros on this GPU (gemmbench.measure.timing: the sweep's own timer)."""
    import torch  # heavy

    from gemmbench.measure.timing import Timer

    # warm-up 200 ms: the GPU reaches its clocks under load before the first sample (the sweep's default is 25 ms)
    timer = Timer("cold", warmup_ms=200.0, min_samples=10, budget_s=0.5)
    try:
        return timer.measure([_cublas_gemm(dtype, m, n, k)], graph_safe=True)
    finally:
        torch.cuda.empty_cache()  # the operands went with the closure: the next rung needs the memory


def _cublas_gemm(dtype: str, m: int, n: int, k: int) -> Callable[[], object]:
    """The call the cublas_* variants make (gemmbench/kernels/cublas.py) on zero operands of this dtype: A (M x K) @ B^T."""
    import torch  # heavy

    d = dtypes.get(dtype)
    a = torch.zeros((m, k), device="cuda", dtype=torch.bfloat16).to(d.torch)
    b = torch.zeros((n, k), device="cuda", dtype=torch.bfloat16).to(d.torch)
    if not d.scaled:
        return lambda: a @ b.t()
    one = torch.ones((), device="cuda")  # fp32 per-tensor scales
    out = dtypes.get(d.out).torch
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=out)
