"""Kernel activity records on a CPU: hand-made records in the shape of torch's _KinetoEvent, split per call at the
eviction kernel, summed, named; the cupti sampler's glue with its profiler faked; the `kernels` column in the store."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from conftest import run_row

from gemmbench.measure import kernel_trace
from gemmbench.measure.kernel_activity import (
    ActivityError,
    KernelRecord,
    call_times_us,
    joined,
    kernel_records,
    kernel_time_us,
    names,
    split_calls,
)
from gemmbench.measure.timing import Prepared, Timer, TimingError
from gemmbench.results import store

EVICT = "read_kernel"
GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
REDUCE = "cublasLt::splitKreduce_kernel"


@dataclass
class FakeEvent:
    """What kernel_records reads of a torch _KinetoEvent (methods, as torch has them)."""

    n: str
    kind: str
    t: int
    d: int
    c: int

    def name(self):
        return self.n

    def device_type(self):  # torch's DeviceType enum prints as "DeviceType.CUDA" / "DeviceType.CPU"
        return f"DeviceType.{self.kind}"

    def start_ns(self):
        return self.t

    def duration_ns(self):
        return self.d

    def correlation_id(self):
        return self.c


def rec(name, start_us, dur_us, corr=0):
    return KernelRecord(name, int(start_us * 1000), int(dur_us * 1000), corr)


# Two calls of a split-K cuBLAS launch (GEMM then its reduce), each after an eviction of 100 µs, device times in µs:
#   0 evict [0, 100)   110 GEMM [110, 140)   150 REDUCE [150, 155)       (a 10 µs gap between GEMM and REDUCE)
#   200 evict [200, 300)   305 GEMM [305, 337)   340 REDUCE [340, 344)
TWO_CALLS = [
    rec(EVICT, 0, 100, 1),
    rec(GEMM, 110, 30, 2),
    rec(REDUCE, 150, 5, 2),
    rec(EVICT, 200, 100, 3),
    rec(GEMM, 305, 32, 4),
    rec(REDUCE, 340, 4, 4),
]


def test_only_kernel_records_are_kept_in_device_order():
    events = [
        FakeEvent(GEMM, "CUDA", 500, 30, 7),
        FakeEvent("Memset (Device)", "CUDA", 100, 2, 5),
        FakeEvent("Memcpy DtoD (Device -> Device)", "CUDA", 120, 2, 5),
        FakeEvent("cudaLaunchKernel", "CPU", 50, 4, 6),
        FakeEvent(EVICT, "CUDA", 200, 100, 6),
    ]
    assert kernel_records(events) == [KernelRecord(EVICT, 200, 100, 6), KernelRecord(GEMM, 500, 30, 7)]


def test_a_call_is_the_sum_of_its_kernels_without_gaps_or_the_eviction():
    # call 0: 30 + 5 = 35 µs (not 155 - 110 = 45 µs with the gap, nor 135 with the eviction); call 1: 32 + 4 = 36 µs
    shuffled = [TWO_CALLS[i] for i in (4, 0, 5, 2, 3, 1)]  # records need not come in device order
    assert call_times_us(shuffled, EVICT, 2) == [35.0, 36.0]
    calls = split_calls(shuffled, EVICT, 2)
    assert [[r.name for r in c] for c in calls] == [[GEMM, REDUCE], [GEMM, REDUCE]]
    assert kernel_time_us(calls[1]) == 36.0


def test_kernels_before_the_first_eviction_belong_to_no_call():
    stray = rec("warmup_kernel", -50, 20)  # queued before the session's first call: not a sample
    assert call_times_us([stray, *TWO_CALLS], EVICT, 2) == [35.0, 36.0]


@pytest.mark.parametrize("calls", [1, 3])
def test_another_number_of_evictions_than_calls_is_an_error(calls):
    with pytest.raises(ActivityError, match=f"recorded 2 eviction kernels for {calls} calls"):
        split_calls(TWO_CALLS, EVICT, calls)


def test_a_call_without_a_kernel_is_an_error():
    lost = [r for r in TWO_CALLS if r.start_ns < 200_000 or r.name == EVICT]  # call 1's kernels dropped
    with pytest.raises(ActivityError, match="no kernel for call 1 of 2"):
        split_calls(lost, EVICT, 2)


def test_names_are_distinct_in_launch_order_without_the_eviction():
    assert names(list(reversed(TWO_CALLS)), exclude=EVICT) == [GEMM, REDUCE]
    assert joined(names(TWO_CALLS, exclude=EVICT)) == f"{GEMM};{REDUCE}"
    assert joined([]) == ""


def test_cupti_samples_profile_one_session_and_split_it(monkeypatch):
    """kernel_trace's glue with the profiler faked: the batch's n calls are evict, fn, evict, fn."""
    launched = []
    monkeypatch.setattr(kernel_trace, "eviction_kernel_name", lambda: EVICT)

    def fake_record(run):
        run()
        return TWO_CALLS

    monkeypatch.setattr(kernel_trace, "record", fake_record)
    samples, seen = kernel_trace.cupti_samples(lambda: launched.append("fn"), lambda: launched.append("evict"), 2)
    assert launched == ["evict", "fn", "evict", "fn"]
    assert samples == [35.0, 36.0] and seen == [GEMM, REDUCE]


def test_the_cupti_timer_keeps_the_names_and_turns_lost_records_into_a_timing_error(monkeypatch):
    timer = Timer("wall").in_mode("cupti")  # Timer("cupti") needs a GPU; the sampler itself does not
    monkeypatch.setattr(kernel_trace, "cupti_samples", lambda fn, evict, n: ([35.0] * n, [GEMM, REDUCE]))
    p = timer.prepare([lambda: None])
    assert p.take(3) == [35.0, 35.0, 35.0] and p.take(1) == [35.0]
    assert p.kernel_names == f"{GEMM};{REDUCE}"  # once each, however many batches saw them

    def lost(fn, evict, n):
        raise ActivityError("the profiler recorded 0 eviction kernels for 10 calls (records dropped or merged)")

    monkeypatch.setattr(kernel_trace, "cupti_samples", lost)
    with pytest.raises(TimingError, match="--timing cupti: the profiler recorded 0 eviction kernels"):
        p.take(10)


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a CPU records")
def test_no_kernel_names_on_a_cpu():
    with pytest.raises(TimingError, match="--timing cupti needs a CUDA GPU"):
        Timer("cupti")
    timer = Timer("wall")
    p = timer.prepare([lambda: None])
    timer.capture_kernels(p)
    assert p.kernels == [] and p.kernel_names is None


def test_kernel_names_round_trip(tmp_path):
    base = run_row(run_id="r", shape_set="s", gemm="attn_o", M=16, N=64, K=64, E=1, topk=1, tp=1, ep=1, dtype="fp8",
                scaling="tensor", variant="cublas_fp8", status="ok")  # fmt: skip
    path = tmp_path / "run.parquet"
    store.write_rows(path, [dict(base, kernels=f"{GEMM};{REDUCE}")])
    assert store.load([path])["kernels"].tolist() == [f"{GEMM};{REDUCE}"]


def test_prepared_without_names_has_no_kernels_column_value():
    assert Prepared(take=lambda n: []).kernel_names is None
