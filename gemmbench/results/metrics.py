"""The one FLOP / byte / roofline model of gemmbench: pure functions, no torch.

Every number a report shows (TFLOP/s, GB/s, % of roofline) comes from here, so that two kernels
measured on the same problem are always judged by the same yardstick.

Units: time in microseconds (µs), bandwidth in GB/s (1e9 bytes/s), throughput in TFLOP/s
(1e12 FLOP/s), sizes in bytes.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

import numpy as np

from gemmbench import dtypes
from gemmbench.shapes import Problem


def missing(v) -> bool:
    """Whether a row's value is absent: None, NaN (a loaded file's missing float) or pandas' NA (a DataFrame row's),
    told without importing pandas."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ == "NAType"


def flops(p: Problem, pairs: int | None = None) -> int:
    """Useful FLOPs of one GEMM call (a multiply-add counts 2).

    Dense: 2*M*N*K.  MoE (E > 1): M is the token count and only routed work counts,
    2*pairs*N*K; padding or dropped tokens of a particular kernel are not "useful".  `pairs`: the (token, expert)
    pairs this rank computes (GemmInputs.local_work).  Without expert parallelism every one of the M*topk pairs is
    (the default); with it (ep > 1) how many land on this rank's experts depends on the routing, so it is required.
    """
    if not p.is_moe:
        return 2 * p.M * p.N * p.K
    return 2 * _pairs(p, pairs) * p.N * p.K


def flops_bound(p: Problem) -> int:
    """The most FLOPs one call of `p` can do: every routed pair on this rank (exact without expert parallelism).
    For limits a cell must stay under, such as the CPU path's sizes."""
    return flops(p, p.M * p.topk if p.is_moe else None)


def _pairs(p: Problem, pairs: int | None) -> int:
    if pairs is None:
        if p.ep > 1:
            raise ValueError(f"{p.label}: pairs (the routed pairs on this rank) is required at ep > 1")
        return p.M * p.topk
    if not 0 <= pairs <= p.M * p.topk:
        raise ValueError(f"{p.label}: pairs={pairs} is outside 0..{p.M * p.topk}")
    return pairs


def bytes_min(
    p: Problem,
    experts_hit: int | None = None,
    fp8_scaling: str | None = None,
    pairs: int | None = None,
    tokens: int | None = None,
) -> int:
    """Minimum DRAM traffic of one call in bytes: every input read once, the output written once.

    Dense: A (M, K) + B (N, K) in the input dtype + C (M, N) in the output dtype (dtypes.DType.bytes, out_bytes).
    MoE: the weights of the experts actually hit (experts_hit * N * K; a decode step with few
    tokens touches few experts, so counting all E would flatter the kernel), the activations
    M * K once, and the outputs M * topk * N (one row per routed token, before the top-k sum).
    experts_hit is required for MoE (ValueError if None or outside 1..E); for a dense problem it
    may be None or 1.

    Expert parallelism (ep > 1) counts this rank's share (GemmInputs.local_work): its local experts hit (0 ..
    ceil(E/ep)), the activations of the `tokens` with a pair here (tokens * K) and the outputs of its `pairs` (pairs * N),
    both required.  A rank with no pair moves nothing: 0 bytes.

    A scaled dtype (fp8) adds its scales, as many as dtypes.SCALINGS[p.scaling] (fp8_scaling: another scaling's)
    lays out, each of its scale_bytes: "tensor": dense 2 scalars; "row": dense M + N; "block": M * ceil(K/128) +
    ceil(N/128) * ceil(K/128) of 4 bytes ("block-ue8m0": of 1 byte).  An MoE expert's weight carries one scale
    (tensor, row) or its blocks (inputs.make_inputs), so MoE adds experts_hit times those plus the activations' 1
    ("tensor"), M ("row") or M * ceil(K/128) (block; under EP the tokens read instead of M).
    """
    dt = dtypes.get(p.dtype)
    scaling = dtypes.scaling(fp8_scaling or p.scaling) if dt.scaled else None
    act, out = dt.bytes, dt.out_bytes
    if p.is_moe:
        if experts_hit is None:
            raise ValueError(f"{p.label}: experts_hit is required for an MoE problem")
    elif experts_hit is None:
        experts_hit = 1
    # a rank of an expert-parallel group may have no pair at all: 0 of its experts hit
    lowest = 0 if p.is_moe and p.ep > 1 else 1
    if not lowest <= experts_hit <= p.local_experts:
        raise ValueError(f"{p.label}: experts_hit={experts_hit} is outside {lowest}..{p.local_experts}")

    if p.is_moe:
        rows = _pairs(p, pairs)
        if tokens is None and p.ep > 1:
            raise ValueError(f"{p.label}: tokens (those with a pair on this rank) is required at ep > 1")
        tokens = p.M if tokens is None else tokens
        if not (tokens <= rows <= tokens * p.topk and (rows == 0) == (experts_hit == 0)):
            raise ValueError(f"{p.label}: {tokens} tokens, {rows} pairs and {experts_hit} experts hit do not agree")
        if rows == 0:
            return 0
        n = act * (experts_hit * p.N * p.K + tokens * p.K) + out * rows * p.N
        if scaling is not None:
            n += scaling.scale_bytes * (experts_hit * scaling.expert_scales(p.N, p.K) + scaling.act_scales(tokens, p.K))
        return n

    n = act * (p.M * p.K + p.N * p.K) + out * p.M * p.N
    if scaling is not None:
        n += scaling.scale_bytes * (scaling.act_scales(p.M, p.K) + scaling.weight_scales(p.N, p.K))
    return n


def intensity(flops: float, nbytes: float) -> float:
    """Arithmetic intensity in FLOPs per byte."""
    if nbytes <= 0:
        raise ValueError(f"nbytes must be > 0, got {nbytes}")
    return flops / nbytes


def _check_time(time_us: float) -> None:
    if not time_us > 0:  # also rejects NaN
        raise ValueError(f"time_us must be > 0, got {time_us}")


def tflops(flops: float, time_us: float) -> float:
    """Throughput in TFLOP/s (1e12 FLOP/s) of `flops` done in `time_us` µs."""
    _check_time(time_us)
    return flops / (time_us * 1e6)  # flops / (t * 1e-6 s) / 1e12


def gbps(nbytes: float, time_us: float) -> float:
    """Bandwidth in GB/s (1e9 bytes/s) of `nbytes` moved in `time_us` µs."""
    _check_time(time_us)
    return nbytes / (time_us * 1e3)  # nbytes / (t * 1e-6 s) / 1e9


def bandwidth_at(ladder: Sequence[tuple[float, float]], nbytes: float) -> float:
    """Achievable DRAM bandwidth in GB/s for a transfer of `nbytes` bytes.

    `ladder` is [(bytes, GB/s), ...] from a streaming-read kernel at sizes 4 MiB .. 2 GiB.  A 6 µs
    kernel cannot reach the bandwidth of a 2 GiB copy (launch and ramp-up dominate), so the
    roofline of a small problem uses the bandwidth measured at its own size: linear interpolation
    in log2(bytes), clamped to the end values outside the ladder.  Order of the ladder is free.
    """
    if len(ladder) == 0:
        raise ValueError("empty bandwidth ladder")
    pts = sorted((float(b), float(bw)) for b, bw in ladder)
    if pts[0][0] <= 0:
        raise ValueError(f"ladder sizes must be > 0 bytes, got {pts[0][0]}")
    if nbytes <= pts[0][0]:  # also covers nbytes <= 0, where log2 is undefined
        return pts[0][1]
    xs = np.log2([b for b, _ in pts])
    ys = [bw for _, bw in pts]
    return float(np.interp(math.log2(nbytes), xs, ys))  # np.interp clamps at the right end


def roofline_bound_us(flops: float, nbytes: float, bandwidth_gbps: float, peak_tflops: float) -> float:
    """Lower bound on the time in µs: max(bytes / bandwidth, flops / peak)."""
    if bandwidth_gbps <= 0 or peak_tflops <= 0:
        raise ValueError(f"bandwidth and peak must be > 0, got {bandwidth_gbps} GB/s, {peak_tflops} TFLOP/s")
    memory_us = nbytes / (bandwidth_gbps * 1e3)  # bytes / (GB/s * 1e9) s * 1e6 µs
    compute_us = flops / (peak_tflops * 1e6)  # flops / (TFLOP/s * 1e12) s * 1e6 µs
    return max(memory_us, compute_us)


def pct_of_roofline(time_us: float, bound_us: float) -> float:
    """How close a measured time is to its bound, in percent (100 = at the roofline)."""
    _check_time(time_us)
    return 100.0 * bound_us / time_us


# A cell whose 80th-percentile sample is more than NOISY_SPREAD times its 20th is too noisy to rank: cold GPU timing
# spreads by a few percent, a loaded CPU machine by orders of magnitude (docs/BENCHMARKS.md).  Such a row is marked
# `noisy`, shown so in the table and never starred fastest.
NOISY_SPREAD = 1.5


def noisy(p20: float, p80: float) -> bool:
    return bool(p20 > 0 and p80 / p20 > NOISY_SPREAD)


def spread_pct(p20: float, p80: float, median: float) -> float:
    """Half the p20-p80 range as a percent of the median: the table's `±` column (p20 9.9, p80 10.3, median 10.0
    µs -> ±2.0%)."""
    _check_time(median)
    return 50.0 * (p80 - p20) / median


# A row above 100% of its roofline beat a ceiling that was measured: the ceiling is wrong for this row, the kernel did
# not beat the hardware.  Memory-bound rows: the streaming-read ladder measures DRAM, a row whose inputs were served
# from L2 (they fit in it, or stream timing reused them) or whose bytes_min overcounts what the kernel must
# read goes above it.  Compute-bound rows: the peak is the best cuBLAS median over a ladder of large GEMMs of zeros
# (gemmbench.measure.compute_ladder), cached per GPU and clock state; a row passes it when the GPU ran at higher clocks than
# when the ladder was measured (a cache from a cooler or hotter GPU at the same clock settings, or NVML missing, so
# no clocks in the cache key) or a shape peaks above every rung.  Before the ladder one 8192^3 GEMM set the peak: fp8
# ceiling 1460.7 TFLOP/s while cuBLAS ran Llama3-405B's M 2048 GEMMs at 1473-1549 (docs/GPU-FACTS.md).
ABOVE_MEMORY = (
    "above the measured memory ceiling: inputs served from L2 (they fit in it, or stream timing reused them) or "
    "bytes_min above what the kernel reads"
)
ABOVE_COMPUTE = (
    "above the measured compute ceiling (the best cuBLAS median over a ladder of GEMM sizes): the GPU ran at higher "
    "clocks than when it was measured (`gemmbench ceilings --remeasure`), or this shape peaks above every rung"
)


def roofline_note(pct: Optional[float], flops: float, nbytes: float, bandwidth_gbps: float, peak_tflops: float
                  ) -> Optional[str]:  # fmt: skip
    """Why a row is above 100% of its roofline (ABOVE_MEMORY or ABOVE_COMPUTE, after which of its two bounds is
    the larger, as roofline_bound_us takes it), or None for a row at or below it or with no roofline."""
    if pct is None or not pct > 100.0 or not bandwidth_gbps or not peak_tflops:  # NaN: no roofline
        return None
    memory_us = nbytes / (bandwidth_gbps * 1e3)
    compute_us = flops / (peak_tflops * 1e6)
    return ABOVE_MEMORY if memory_us >= compute_us else ABOVE_COMPUTE


# A row faster than its bound by more than this factor did not do the work it is credited with: status `impossible`
# (docs/RESULTS.md, "The referee").  Honest rows pass their bound a little, for the reasons ABOVE_MEMORY and
# ABOVE_COMPUTE give; the margin sits above the most any honest row reached (docs/BENCHMARKS.md, "The referee").
IMPOSSIBLE_MARGIN = 1.25
WARM = "warm"  # the l2_state of rows whose inputs were in L2 when timed: no DRAM bound applies to them


def impossible_reason(time_us: float, flops: float, nbytes: float, bandwidth_gbps: Optional[float],
                      peak_tflops: Optional[float], l2_state: str) -> Optional[str]:  # fmt: skip
    """Why a row cannot be right, or None: its time under its bound / IMPOSSIBLE_MARGIN.  The bound is the FLOPs
    at the measured peak and, for rows whose inputs were read from DRAM (any l2_state but WARM), the bytes at the
    measured bandwidth for that size; None where a ceiling is missing (a CPU)."""
    if not bandwidth_gbps or not peak_tflops or missing(time_us) or time_us <= 0:
        return None
    compute_us = flops / (peak_tflops * 1e6)
    memory_us = 0.0 if l2_state == WARM else nbytes / (bandwidth_gbps * 1e3)
    bound = max(compute_us, memory_us)
    if time_us * IMPOSSIBLE_MARGIN >= bound:
        return None
    what = (f"{nbytes / 1e6:.4g} MB at the measured {bandwidth_gbps:,.0f} GB/s" if memory_us >= compute_us
            else f"{flops / 1e12:.4g} TFLOP at the measured {peak_tflops:,.0f} TFLOP/s")  # fmt: skip
    return (
        f"faster than this GPU can go: {time_us:.4g} µs against a bound of {bound:.4g} µs ({what}), "
        f"{bound / time_us:.1f}x under it where {IMPOSSIBLE_MARGIN:g}x is allowed"
    )


# A layer's launch gap ((eager or graph time - kernel sum) / steps, gemmbench.engine.layer) below zero is no launch cost: the
# layer took less than its kernels took one by one.  The two are different measurements (the whole layer; each kernel
# alone, cold L2), and on the CPU both are wall times that scheduling moves by milliseconds (seen: -5226.6 µs a step),
# so the difference is noise.  Such a gap is kept in the file, marked (gap_note), and shown as N/A.
GAP_NOISE = "{mode} < kernel sum: timing noise"


def gap_below_zero(gap_us: Optional[float]) -> bool:
    """True for a measured gap below zero (None or NaN: no gap was measured)."""
    return isinstance(gap_us, (int, float)) and gap_us < 0


def gap_note(gaps: Mapping[str, Optional[float]]) -> Optional[str]:
    """{"eager": gap_us, "graph": graph_gap_us} -> why a gap is not shown ("eager < kernel sum: timing noise"), or
    None when every measured gap is a real one."""
    return "; ".join(GAP_NOISE.format(mode=m) for m, g in gaps.items() if gap_below_zero(g)) or None


def summarize(samples_us: Sequence[float]) -> dict:
    """Median, 20th and 80th percentile (numpy, linear) of timing samples in µs, their count, and whether the spread
    passes NOISY_SPREAD.

    p20/p80 rather than min/max: one preempted or lucky sample should not move the spread.
    """
    a = np.asarray(samples_us, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no timing samples")
    p20, med, p80 = np.percentile(a, [20, 50, 80], method="linear")
    return {
        "time_us_median": float(med),
        "time_us_p20": float(p20),
        "time_us_p80": float(p80),
        "n_samples": int(a.size),
        "noisy": noisy(float(p20), float(p80)),
    }
