"""Kernel activity records (CUPTI, through the torch profiler) -> per-call kernel time and the kernels' names.  Pure
Python: gemmbench.measure.kernel_trace collects the records on the GPU, this module only reads them (tested on a CPU with
hand-made records).

How calls are told apart: every call of `--timing cupti` is preceded by the L2 eviction (gemmbench.measure.streamread's read
kernel), launched on the same stream, so in device-start order the records read

    evict, kernels of call 0, evict, kernels of call 1, ...

Each eviction kernel, found by its name, opens a call and is itself left out; a call's time is the sum of its
kernels' durations, so the gaps between them (launch latency, a reduce kernel waiting for its split-K partials) are
not in it.  Only kernel records count: memcpy and memset records, runtime-API calls and annotations are dropped, as
ncu (which profiles kernels) would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

# The device's records that are not kernels, by kineto's names ("Memcpy DtoD (Device -> Device)", "Memset (Device)")
NOT_KERNELS = ("Memcpy", "Memset")
NAME_SEPARATOR = ";"  # the `kernels` column: a launch's kernel names in order of first launch, joined by this


class ActivityError(RuntimeError):
    """The records do not split into the calls that were made (the profiler dropped or merged records)."""


@dataclass(frozen=True)
class KernelRecord:
    """One kernel as the device ran it."""

    name: str
    start_ns: int  # device timestamp of its start
    duration_ns: int
    correlation: int  # CUPTI's id linking the kernel to the launch (or graph launch) that queued it


def device_records(events: Iterable) -> list[KernelRecord]:
    """The records among profiler events (torch's _KinetoEvent: name(), device_type(), start_ns(), duration_ns(),
    correlation_id()) that ran on the GPU (device_type CUDA; the runtime calls and annotations are the CPU's), copies
    and fills included, in device-start order.  By the device type and the name, not activity_type(): torch 2.11's
    _KinetoEvent has no activity_type."""
    out = [
        KernelRecord(e.name(), e.start_ns(), e.duration_ns(), e.correlation_id())
        for e in events
        if str(e.device_type()).rsplit(".", 1)[-1] == "CUDA"
    ]
    return sorted(out, key=lambda r: r.start_ns)


def kernel_records(events: Iterable) -> list[KernelRecord]:
    """The kernel records among profiler events (device_records less copies and fills), in device-start order."""
    return [r for r in device_records(events) if not r.name.startswith(NOT_KERNELS)]


def split_calls(records: Sequence[KernelRecord], marker: str, calls: int) -> list[list[KernelRecord]]:
    """The kernels of each of `calls` calls, each call opened by one `marker` kernel (the eviction, not kept).
    Kernels before the first marker belong to no call and are dropped (none are launched there).  Raises
    ActivityError when the records hold another number of markers, or a call with no kernel."""
    ordered = sorted(records, key=lambda r: r.start_ns)
    groups: list[list[KernelRecord]] = []
    for r in ordered:
        if r.name == marker:
            groups.append([])
        elif groups:
            groups[-1].append(r)
    if len(groups) != calls:
        raise ActivityError(
            f"the profiler recorded {len(groups)} eviction kernels for {calls} calls (records dropped or merged)"
        )
    empty = [i for i, g in enumerate(groups) if not g]
    if empty:
        raise ActivityError(f"the profiler recorded no kernel for call {empty[0]} of {calls}")
    return groups


def kernel_time_us(call: Sequence[KernelRecord]) -> float:
    """A call's kernel-only time: the sum of its kernels' durations (gaps between them excluded), in µs."""
    return sum(r.duration_ns for r in call) / 1e3


def call_times_us(records: Sequence[KernelRecord], marker: str, calls: int) -> list[float]:
    """One kernel-only sample per call (split_calls, then kernel_time_us)."""
    return [kernel_time_us(c) for c in split_calls(records, marker, calls)]


def names(records: Iterable[KernelRecord], exclude: str = "") -> list[str]:
    """The distinct kernel names, in order of first start, without `exclude` (the eviction kernel's name)."""
    ordered = sorted(records, key=lambda r: r.start_ns)
    return list(dict.fromkeys(r.name for r in ordered if r.name != exclude))


def joined(kernel_names: Iterable[str]) -> str:
    """The `kernels` column's text: names joined by NAME_SEPARATOR."""
    return NAME_SEPARATOR.join(kernel_names)


# The marker queued on the caller's stream right after a call: a host-to-device copy, which the copy engine runs as
# soon as the stream reaches it (a marker kernel would wait for free SMs while the call's own left-over work holds them)
MARKER = "Memcpy HtoD"  # the start of kineto's name for it ("Memcpy HtoD (Pinned -> Device)")


def after_marker(records: Sequence[KernelRecord], marker: str = MARKER) -> list[KernelRecord]:
    """The kernels still running when the last record named `marker...` started: a call followed by a marker queued
    on the caller's stream has all its work done before the marker starts, unless it left work on another stream
    that its caller's stream never waited for.  Copies and fills are not kernels and are not judged.  No marker
    recorded: ActivityError."""
    starts = [r.start_ns for r in records if r.name.startswith(marker)]
    if not starts:
        raise ActivityError("the profiler recorded no marker after the call")
    return [r for r in records if not r.name.startswith(NOT_KERNELS) and r.start_ns + r.duration_ns > starts[-1]]
