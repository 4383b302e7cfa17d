"""The clock as gemmbench found it: the host timer, CUDA events and synchronize, held at import (before any plugin is
loaded, since the worker imports the timer first), so that samples are read through them whatever a plugin replaces
later, and `patched` names what it replaced (the referee blames the plugin: gemmbench.measure.referee)."""

from __future__ import annotations

import sys
import time
from typing import Callable

import torch

now = time.perf_counter  # seconds
synchronize = torch.cuda.synchronize
Event = torch.cuda.Event
elapsed_ms = torch.cuda.Event.elapsed_time  # elapsed_ms(start, end)
CLOCK = ("time.perf_counter", "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record",
         "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize", "torch.cuda.CUDAGraph.replay")  # fmt: skip


def _resolve(path: str):
    root, *attrs = path.split(".")
    obj = sys.modules[root]
    for a in attrs:
        obj = getattr(obj, a)
    return obj


_CLOCK_AT_IMPORT = {path: _resolve(path) for path in CLOCK}


def patched() -> dict:
    """{dotted name: what it is now} for each function of CLOCK that is no longer the one found at import."""
    return {path: now for path in CLOCK if (now := _resolve(path)) is not _CLOCK_AT_IMPORT[path]}


def busy_after_call_us(fn: Callable) -> float:
    """µs a device synchronize waits once one eager call's end event has completed, beyond what a second one (the
    device idle for sure) costs: about 0, but where the call left work on a stream its caller's never waited for.
    The difference, not the first wait alone: one synchronize alone costs tens of µs on a virtual machine
    (docs/BENCHMARKS.md, "The referee")."""
    synchronize()
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    t0 = now()
    synchronize()
    t1 = now()
    synchronize()
    t2 = now()
    return ((t1 - t0) - (t2 - t1)) * 1e6
