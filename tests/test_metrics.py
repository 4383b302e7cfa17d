"""The FLOP/byte model and the roofline arithmetic, checked against numbers worked out by hand."""

import math

import pytest

from gemmbench.results import metrics as m
from gemmbench.shapes import Problem

MiB, GiB = 2**20, 2**30


def dense(dtype, M=16, N=8192, K=8192):
    return Problem(shape_set="t", gemm="g", M=M, N=N, K=K, dtype=dtype)


def test_dense_fp8_flops_and_bytes():
    p = dense("fp8")
    assert m.flops(p) == 2 * 16 * 8192 * 8192 == 2_147_483_648
    # A fp8 + B fp8 + C bf16 + two fp32 tensor scales
    assert m.bytes_min(p) == 16 * 8192 + 8192 * 8192 + 16 * 8192 * 2 + 8 == 67_502_088
    assert m.bytes_min(p, fp8_scaling="row") == 16 * 8192 + 8192 * 8192 + 16 * 8192 * 2 + (16 + 8192) * 4


def test_dense_bf16_flops_and_bytes():
    p = dense("bf16", M=128, N=4096, K=14336)
    assert m.flops(p) == 2 * 128 * 4096 * 14336
    assert m.bytes_min(p) == 2 * 128 * 14336 + 2 * 4096 * 14336 + 2 * 128 * 4096
    # scaling only concerns fp8; experts_hit=1 is accepted for dense
    assert m.bytes_min(p, experts_hit=1, fp8_scaling="row") == m.bytes_min(p)


def test_moe_flops_and_bytes():
    p = Problem(shape_set="t", gemm="experts_up", M=4, N=1536, K=4096, dtype="fp8", E=128, topk=8)
    assert m.flops(p) == 2 * 4 * 8 * 1536 * 4096  # routed tokens only
    # 20 experts' weights + activations once + one bf16 output row per routed token
    # + 20 expert scales + 1 activation scale (fp32)
    assert m.bytes_min(p, experts_hit=20) == 20 * 1536 * 4096 + 4 * 4096 + 4 * 8 * 1536 * 2 + 21 * 4
    assert m.bytes_min(p, experts_hit=20, fp8_scaling="row") == (
        20 * 1536 * 4096 + 4 * 4096 + 4 * 8 * 1536 * 2 + (20 + 4) * 4  # per-expert weight scales, per-row activations
    )
    pb = p.with_(dtype="bf16")
    assert m.bytes_min(pb, experts_hit=128) == 2 * (128 * 1536 * 4096 + 4 * 4096) + 2 * 4 * 8 * 1536


def test_bytes_min_errors():
    p = Problem(shape_set="t", gemm="e", M=4, N=64, K=64, dtype="bf16", E=8, topk=2)
    with pytest.raises(ValueError, match="experts_hit is required"):
        m.bytes_min(p)
    with pytest.raises(ValueError, match="outside 1..8"):
        m.bytes_min(p, experts_hit=9)
    with pytest.raises(ValueError, match="outside 1..8"):
        m.bytes_min(p, experts_hit=0)
    with pytest.raises(ValueError, match="outside 1..1"):
        m.bytes_min(dense("bf16"), experts_hit=2)
    with pytest.raises(ValueError, match="unknown dtype 'fp4'"):
        m.bytes_min(dense("fp4"))
    with pytest.raises(ValueError, match="unknown scaling 'blocky'"):
        m.bytes_min(dense("fp8"), fp8_scaling="blocky")


def test_rates():
    assert m.intensity(2e12, 1e9) == 2000.0
    assert m.tflops(2e12, 1000.0) == pytest.approx(2000.0)  # 2e12 FLOP in 1 ms
    assert m.gbps(1e9, 1000.0) == pytest.approx(1000.0)  # 1 GB in 1 ms
    with pytest.raises(ValueError):
        m.tflops(1.0, 0.0)
    with pytest.raises(ValueError):
        m.gbps(1.0, -1.0)
    with pytest.raises(ValueError):
        m.intensity(1.0, 0)


LADDER = [(4 * MiB, 1000.0), (16 * MiB, 2000.0), (2 * GiB, 3000.0)]


def test_bandwidth_exact_at_ladder_points():
    for nbytes, bw in LADDER:
        assert m.bandwidth_at(LADDER, nbytes) == bw


def test_bandwidth_interpolates_in_log2_space():
    assert m.bandwidth_at(LADDER, 8 * MiB) == pytest.approx(1500.0)  # log2 midpoint of 4 and 16 MiB
    assert m.bandwidth_at(LADDER, 2**27.5) == pytest.approx(2500.0)  # midpoint of 2^24 and 2^31
    # not linear in bytes: 10 MiB is past the log midpoint
    assert m.bandwidth_at(LADDER, 10 * MiB) == pytest.approx(1000.0 + 1000.0 * (math.log2(10) - 2) / 2)
    assert m.bandwidth_at(list(reversed(LADDER)), 8 * MiB) == pytest.approx(1500.0)  # order is free


def test_bandwidth_clamped_both_ends():
    assert m.bandwidth_at(LADDER, 64 * 1024) == 1000.0
    assert m.bandwidth_at(LADDER, 0) == 1000.0
    assert m.bandwidth_at(LADDER, 8 * GiB) == 3000.0


def test_bandwidth_errors():
    with pytest.raises(ValueError, match="empty"):
        m.bandwidth_at([], 1 * MiB)
    with pytest.raises(ValueError, match="> 0 bytes"):
        m.bandwidth_at([(0, 10.0), (4 * MiB, 20.0)], 1 * MiB)


def test_roofline_bound_picks_larger_term():
    # 1e9 bytes at 250 GB/s = 4000 us; 1e12 FLOP at 1000 TFLOP/s = 1000 us -> memory bound
    assert m.roofline_bound_us(1e12, 1e9, 250.0, 1000.0) == pytest.approx(4000.0)
    # 1e9 bytes at 1000 GB/s = 1000 us; 1e12 FLOP at 500 TFLOP/s = 2000 us -> compute bound
    assert m.roofline_bound_us(1e12, 1e9, 1000.0, 500.0) == pytest.approx(2000.0)
    with pytest.raises(ValueError):
        m.roofline_bound_us(1e12, 1e9, 0.0, 500.0)


def test_pct_of_roofline():
    assert m.pct_of_roofline(8.0, 6.0) == 75.0
    with pytest.raises(ValueError):
        m.pct_of_roofline(0.0, 6.0)


def test_summarize():
    s = m.summarize([7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0])
    # numpy linear: p20 at rank 1.8 -> 2.8, median 5.5, p80 at rank 7.2 -> 8.2
    assert s == {
        "time_us_median": pytest.approx(5.5),
        "time_us_p20": pytest.approx(2.8),
        "time_us_p80": pytest.approx(8.2),
        "n_samples": 10,
        "noisy": True,  # p80/p20 = 2.9 > NOISY_SPREAD
    }
    assert type(s["n_samples"]) is int and type(s["time_us_median"]) is float
    assert m.summarize([3.0]) == {
        "time_us_median": 3.0, "time_us_p20": 3.0, "time_us_p80": 3.0, "n_samples": 1, "noisy": False,
    }  # fmt: skip
    assert not m.noisy(10.0, 15.0) and m.noisy(10.0, 15.1) and not m.noisy(0.0, 1.0)
    with pytest.raises(ValueError, match="no timing samples"):
        m.summarize([])


def test_metrics_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, gemmbench.results.metrics; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
