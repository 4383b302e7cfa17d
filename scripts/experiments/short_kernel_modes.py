"""Probe (issue 21 item 3): why do the harness's cold medians and Nsight Compute disagree by -10% / +13% on the
~10 µs GEMMs of Llama3-70B at TP 8 (M 16, fp8), in opposite directions for cuBLAS and SplitK?

For each cell it times the same launch several ways, interleaved in one process, and prints one JSON line:
- `cold`: the harness's cold mode (L2 evicted by a read queued before the start event, events around the call,
  each batch queued behind a GPU spin that outlasts the host's queuing: gemmbench.launch_hold);
- `cold_unheld`: the same without the spin (the cold mode before launch_hold), to see the host's launch latency;
- `cold_idle`: the same, but the GPU idles IDLE_MS before each sample (as between ncu's replay passes), to see the
  clock state's share;
- `warm`: events around the call with no eviction and no spin (operands in L2, host launch latency in);
- from one CUPTI session of cold calls (the profiler's kernel records): each kernel's median duration, the median
  gap from the eviction kernel's end to the first kernel's start (the eviction's tail), the gaps between the call's
  kernels (launch latency, programmatic dependent launch), and the median first-to-last span.
ncu's durations for the same cells come from `gemmbench profile` in the same device call (docs/BENCHMARKS.md).
"""

import json
import statistics
import sys
import time

import torch

import gemmbench.kernels.cublas  # noqa: F401  (registers the variants)
import gemmbench.kernels.splitk  # noqa: F401
from gemmbench import kernel_trace, registry
from gemmbench.check import reference
from gemmbench.inputs import make_inputs
from gemmbench.shapes import Problem
from gemmbench.timing import Timer, evict_l2

IDLE_MS = 2.0
SAMPLES = 200


def median(xs):
    return round(statistics.median(xs), 2) if xs else None


def events_us(fn, n, evict, idle_ms=0.0):
    out = []
    for _ in range(n):
        if idle_ms:
            torch.cuda.synchronize()
            time.sleep(idle_ms / 1e3)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if evict:
            evict_l2()
        start.record()
        fn()
        end.record()
        if idle_ms:
            end.synchronize()
        out.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in out]


def cupti_breakdown(fn, n):
    def run():
        for _ in range(n):
            evict_l2()
            fn()

    records = kernel_trace.record(run)
    marker = kernel_trace.eviction_kernel_name()
    calls, tails = [], []
    current = None
    for r in records:
        if r.name == marker:
            current = {"evict_end": r.start_ns + r.duration_ns, "kernels": []}
            calls.append(current)
        elif current is not None:
            current["kernels"].append(r)
    per_kernel: dict = {}
    gaps: dict = {}
    spans = []
    for c in calls:
        ks = c["kernels"]
        if not ks:
            continue
        tails.append((ks[0].start_ns - c["evict_end"]) / 1e3)
        for i, k in enumerate(ks):
            per_kernel.setdefault(f"{i}:{k.name[:60]}", []).append(k.duration_ns / 1e3)
            if i:
                prev = ks[i - 1]
                gaps.setdefault(i, []).append((k.start_ns - prev.start_ns - prev.duration_ns) / 1e3)
        spans.append((ks[-1].start_ns + ks[-1].duration_ns - ks[0].start_ns) / 1e3)
    return {
        "kernel_us": {k: median(v) for k, v in per_kernel.items()},
        "gap_after_evict_us": median(tails),
        "gaps_between_kernels_us": {i: median(v) for i, v in gaps.items()},
        "span_us": median(spans),
        "sum_us": median([sum(k.duration_ns for k in c["kernels"]) / 1e3 for c in calls if c["kernels"]]),
    }


def probe(name, M, N, K, variants):
    p = Problem(name, name, M, N, K, "fp8")
    inputs = make_inputs(p, 1, "cuda")
    ref = reference(p, inputs)
    for v in variants:
        launch = registry.get(v).make(p, inputs)
        out = launch.fn()
        torch.cuda.synchronize()
        err = float((out.float() - ref).abs().max() / ref.abs().max())
        timer = Timer("cold", budget_s=0.5, target_noise=0.005)
        cold = timer.measure([launch.fn])
        row = {
            "cell": name,
            "variant": v,
            "M": M,
            "N": N,
            "K": K,
            "max_rel_err": round(err, 5),
            "config": str(launch.params) if launch.params else None,
            "cold_us": median(cold),
            "cold_idle_us": median(events_us(launch.fn, SAMPLES // 4, evict=True, idle_ms=IDLE_MS)),
            "warm_us": median(events_us(launch.fn, SAMPLES, evict=False)),
            "cold_unheld_us": median(events_us(launch.fn, SAMPLES, evict=True)),
        }
        row.update(cupti_breakdown(launch.fn, SAMPLES))
        print(json.dumps(row), flush=True)
    del inputs, ref
    torch.cuda.empty_cache()


if __name__ == "__main__":
    variants = sys.argv[1].split(",") if len(sys.argv) > 1 else ["cublas_fp8", "triton_splitk_atomic"]
    for name, M, N, K in [("tp8_qkv", 16, 1280, 8192), ("tp8_o", 16, 8192, 1024), ("tp8_down", 16, 8192, 3584),
                          ("tp1_o", 16, 8192, 8192)]:  # fmt: skip
        probe(name, M, N, K, variants)
