"""The torch profiler (CUPTI underneath: ProfilerActivity.CUDA) around launches on the GPU: the kernel-only samples of
`--timing cupti`, and the kernel names a timed row records (its `kernels` column).  Reading the records is
gemmbench.measure.kernel_activity's job (pure, tested on a CPU); this module only collects them.

A profiler session costs milliseconds to start and stop, so `cupti_samples` profiles a whole batch of calls in one
session, each after its own L2 eviction (the cold mode's read), and splits the records per call at the eviction
kernels, which it finds by their name (eviction_kernel_name) and leaves out.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch

from gemmbench.measure import kernel_activity as activity


@functools.lru_cache(maxsize=1)
def eviction_kernel_name() -> str:
    """The name the profiler gives the eviction's read kernel: the @triton.jit function's own name."""
    from gemmbench.measure.streamread import read_kernel  # triton: only on a GPU

    return str(read_kernel.fn.__name__)


def record(run: Callable[[], object], copies: bool = False) -> list[activity.KernelRecord]:
    """The kernel records of everything `run` queues on the GPU, in device-start order; with `copies`, the copies'
    and fills' records too."""
    from torch.profiler import ProfilerActivity, profile  # heavy, and only on a GPU

    torch.cuda.synchronize()  # work queued before the session is not in it
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()  # every kernel finished, so its record is flushed with the session
    results = prof.profiler.kineto_results
    events = results.events() if results is not None else []
    return activity.device_records(events) if copies else activity.kernel_records(events)


@functools.lru_cache(maxsize=1)
def _marker_copy() -> Callable[[], None]:
    """Queues activity.MARKER on the current stream: one float copied from pinned host memory."""
    src = torch.zeros(1, pin_memory=True)
    dst = torch.zeros(1, device="cuda")
    return lambda: dst.copy_(src, non_blocking=True)


def cupti_samples(fn: Callable[[], object], evict: Callable[[], object], n: int) -> tuple[list[float], list[str]]:
    """n kernel-only samples of fn, each after evict(), in one profiler session; and the kernel names they ran."""

    def run() -> None:
        for _ in range(n):
            evict()
            fn()

    records = record(run)
    marker = eviction_kernel_name()
    return activity.call_times_us(records, marker, n), activity.names(records, exclude=marker)


def launch_names(replay: Callable[[], object]) -> list[str]:
    """The kernels one replay of a sample's launch runs (an eager call, or a CUDA graph with its eviction left out)."""
    return activity.names(record(replay), exclude=eviction_kernel_name())


def names_and_late(fn: Callable[[], object]) -> tuple[list[str], Optional[list]]:
    """One eager call of fn, then a marker copy on the caller's stream (kernel_activity.MARKER): the kernels the call
    ran, and those still running when the marker started (kernel_activity.after_marker: work left on another
    stream), from one profiler session; None for the second where the profiler recorded no marker."""
    mark = _marker_copy()
    mark()  # its first copy (pinned buffers, a lazy set-up) outside the session

    def run() -> None:
        fn()
        mark()

    records = record(run, copies=True)
    kernels = [r for r in records if not r.name.startswith(activity.NOT_KERNELS)]
    try:
        return activity.names(kernels), activity.after_marker(records)
    except activity.ActivityError:
        return activity.names(kernels), None
