"""Test plugin for the perf gate's proof: `planted_slow_bf16` is cublas_bf16 plus a GPU-side spin
(torch.cuda._sleep) of GEMMBENCH_PLANTED_SLOWDOWN times the GEMM's own cold time, queued on the same stream
right after it, so that a run with 0.05 or 0.20 is a real 5% or 20% slower kernel sequence and nothing else
changes.  With the variable unset or 0 it is exactly cublas_bf16.  (On a CPU the spin is skipped.)"""

import functools
import os

import torch

from gemmbench.registry import Launch, Variant, register

ENV = "GEMMBENCH_PLANTED_SLOWDOWN"


@functools.lru_cache(maxsize=1)
def _cycles_per_us() -> float:
    """The spin's rate on this GPU: cycles of torch.cuda._sleep per µs, timed with events."""
    torch.cuda._sleep(1_000_000)  # warm up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    return 20_000_000 / (start.elapsed_time(end) * 1e3)


def _make(problem, inputs):
    from gemmbench.measure.timing import quick_median_us

    a, bt = inputs.a, inputs.b.t()
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=a.device)
    mm = lambda: torch.mm(a, bt, out=out)  # noqa: E731
    fraction = float(os.environ.get(ENV, "0") or 0)
    if fraction <= 0 or not a.is_cuda:
        return Launch(fn=mm, out=out)
    cycles = int(fraction * quick_median_us(mm) * _cycles_per_us())

    def slowed():
        result = mm()
        torch.cuda._sleep(cycles)
        return result

    # no config: a planted regression must look like a code change, not a new kernel config (`compare` calls a cell
    # whose config changed `config-changed`, never slower)
    return Launch(fn=slowed, out=out)


register(
    Variant(
        "planted_slow_bf16",
        "test",
        ("bf16", "fp16"),
        f"cublas mm, then a GPU spin of ${ENV} x its cold time (the perf gate's planted regression)",
        _make,
        source=__file__,
    )
)
