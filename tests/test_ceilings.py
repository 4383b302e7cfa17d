"""The compute ceiling: the ladder's best median, its cache key (GPU, clock state, torch), and the
flag on a row above it.  No GPU: the timings are injected, the GPU and NVML faked."""

import json
import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from gemmbench.measure import ceilings, compute_ladder
from gemmbench.measure.ceilings import Ceilings
from gemmbench.measure.device import DeviceInfo
from gemmbench.results import metrics

H100 = "NVIDIA H100 80GB HBM3"
CLOCKS = {"sm_max_mhz": 1980, "sm_app_mhz": 1755}


# ---------------------------------------------------------------- the ladder


def test_the_rate_is_the_fast_tenth_not_the_best_sample_nor_the_median():
    # rung 1: 2 * 1000³ = 2e9 FLOPs; 11 samples 2.0, 2.1, ..., 3.0 µs: the 10th percentile (numpy's linear rule:
    # index 0.1 * 10 = 1) is 2.1 µs -> 2e9 / 2.1e6 = 952.4 TFLOP/s; the median 2.5 µs would give 800.
    # rung 2: 4e9 FLOPs; one 1 µs outlier among ten 5 µs: the 10th percentile is 5 µs -> 800 TFLOP/s, though the
    # outlier alone would be 4000.
    fast = [2.0 + i / 10 for i in range(11)]
    samples = {(1000, 1000, 1000): fast, (2000, 1000, 1000): [1.0] + [5.0] * 10}
    rungs = compute_ladder.climb(lambda d, m, n, k: samples[(m, n, k)], 10**12, ["bf16"], list(samples))
    got = [(r.m, round(r.median_us, 6), round(r.fast_us, 6), round(r.tflops, 1)) for r in rungs]
    assert got == [(1000, 2.5, 2.1, 952.4), (2000, 5.0, 5.0, 800.0)]
    assert compute_ladder.best(rungs) == {"bf16": rungs[0].tflops}


def test_a_rung_that_does_not_fit_is_skipped_and_says_so():
    # bf16 1000³: A and B 2e6 elements x 2 bytes + the 1e6-element bf16 output x 2 = 6e6 bytes;
    # 2000 x 1000 x 1000: (2e6 + 1e6) x 2 + 2e6 x 2 = 10e6 bytes.  Free 10e6: 80% is 8e6, so only the first fits.
    assert compute_ladder.rung_bytes("bf16", 1000, 1000, 1000) == 6_000_000
    assert compute_ladder.rung_bytes("bf16", 2000, 1000, 1000) == 10_000_000
    # fp8: 1 byte each plus the bf16 operands they are cast from (2), bf16 output: 2e6 x 3 + 1e6 x 2
    assert compute_ladder.rung_bytes("fp8", 1000, 1000, 1000) == 8_000_000
    timed = []
    rungs = compute_ladder.climb(lambda *a: timed.append(a) or [4.0], 10_000_000, ["bf16"],
                                 [(1000, 1000, 1000), (2000, 1000, 1000)])  # fmt: skip
    assert timed == [("bf16", 1000, 1000, 1000)]
    assert rungs[1].tflops is None and "needs 0.0 GB" in rungs[1].skipped and "80%" in rungs[1].skipped
    assert compute_ladder.best(rungs) == {"bf16": 2e9 / 4e6}  # 500 TFLOP/s: the rung that was timed


def test_a_dtype_without_a_path_is_skipped_for_every_rung():
    calls = []

    def samples(dtype, m, n, k):
        calls.append(dtype)
        if dtype == "fp8":
            raise RuntimeError(
                "torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0\nmore"
            )
        return [10.0]

    rungs = compute_ladder.climb(samples, 10**12, ["fp8", "bf16"], [(1000, 1000, 1000), (2000, 1000, 1000)])
    assert calls == ["fp8", "bf16", "bf16"]  # fp8 tried once, then its other rung skipped without a call
    assert [r.skipped is not None for r in rungs] == [True, True, False, False]
    assert rungs[1].skipped.startswith("no fp8 path: torch._scaled_mm") and "more" not in rungs[1].skipped
    assert compute_ladder.best(rungs) == {"bf16": 2e9 / 10e6 * 2}  # 2000 x 1000 x 1000: 4e9 / 10e6 = 400


def test_the_default_ladder_has_the_405b_shapes_and_fits_an_h100():
    assert (2048, 106496, 16384) in compute_ladder.RUNGS and (2048, 53248, 16384) in compute_ladder.RUNGS
    # largest: fp8 2048 x 106496 x 16384, its operands in fp8 (1 byte) and the bf16 they are cast from (2), its
    # output bf16: (2048 + 106496) x 16384 x 3 + 2048 x 106496 x 2 bytes = 5.8 GB, under 80% of an H100's 80 GB
    biggest = max(compute_ladder.rung_bytes(d, *r) for d in compute_ladder.DTYPES for r in compute_ladder.RUNGS)
    assert biggest == (2048 + 106496) * 16384 * 3 + 2048 * 106496 * 2 == 5_771_362_304 < 0.8 * 80e9


# ---------------------------------------------------------------- the cache key


def test_the_cache_key_names_the_gpu_its_clocks_and_torch(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMMBENCH_CACHE", str(tmp_path))
    key = ceilings.cache_key_parts(H100, "abc-1", CLOCKS, "cold", "2.13.0")
    assert key == {"gpu": H100, "uuid": "abc-1", "sm_max_mhz": 1980, "sm_app_mhz": 1755, "mode": "cold",
                   "torch": "2.13.0"}  # fmt: skip
    path = ceilings.cache_path(key)
    assert path.parent == tmp_path / "ceilings" and "abc-1" in path.name and "1755" in path.name
    others = [
        ceilings.cache_key_parts(H100, "abc-2", CLOCKS, "cold", "2.13.0"),  # another physical GPU
        ceilings.cache_key_parts(H100, "abc-1", {**CLOCKS, "sm_app_mhz": 1590}, "cold", "2.13.0"),  # pinned lower
        ceilings.cache_key_parts(H100, "abc-1", {**CLOCKS, "sm_max_mhz": 1755}, "cold", "2.13.0"),  # -lgc limit
        ceilings.cache_key_parts(H100, "abc-1", CLOCKS, "stream", "2.13.0"),
        ceilings.cache_key_parts(H100, "abc-1", CLOCKS, "cold", "2.14.0"),
    ]
    assert len({path, *(ceilings.cache_path(k) for k in others)}) == 6
    # no NVML: no clocks; no uuid from torch: the name alone
    assert ceilings.cache_key_parts(H100, None, None, "cold", "2.13.0") == {"gpu": H100, "mode": "cold",
                                                                             "torch": "2.13.0"}  # fmt: skip


def test_clock_state_without_nvml_is_none(monkeypatch, fresh_probe):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert ceilings.clock_state("abc-1") is None
    assert ceilings.clock_state(None) is None


def test_clock_state_reads_the_max_and_application_sm_clocks_by_uuid(monkeypatch, fresh_probe):
    asked = []
    fake = SimpleNamespace(
        NVMLError=RuntimeError, NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda u: asked.append(u) or "h",
        nvmlDeviceGetMaxClockInfo=lambda h, c: 1980 if (h, c) == ("h", 1) else 0,
        nvmlDeviceGetApplicationsClock=lambda h, c: 1755 if (h, c) == ("h", 1) else 0,
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert ceilings.clock_state("abc-1") == CLOCKS
    assert ceilings.clock_state("GPU-abc-1") == CLOCKS
    assert asked == ["GPU-abc-1", "GPU-abc-1"]  # torch's uuid has no "GPU-" prefix; NVML's has


def _fake_gpu(monkeypatch, tmp_path, clocks):
    """ceilings() on a faked H100 whose measurement is counted, not run; returns the list of measurements."""
    monkeypatch.setenv("GEMMBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(ceilings, "detect", lambda: DeviceInfo(kind="cuda", name=H100, uuid="abc-1"))
    monkeypatch.setattr(ceilings, "clock_state", lambda uuid: clocks[0])
    measured = []

    def measure(mode, key):
        measured.append(dict(key))
        rungs = [compute_ladder.Rung("bf16", 1000, 1000, 1000, median_us=2.0, fast_us=2.0, tflops=1000.0)]
        return Ceilings(mode, [[1 << 20, 3000.0]], {"bf16": 1000.0, "fp8": 1000.0}, compute_ladder.as_rows(rungs), key)

    monkeypatch.setattr(ceilings, "_measure", measure)
    return measured


def test_a_cached_ceiling_is_reused_only_at_the_same_clocks(monkeypatch, tmp_path):
    clocks = [dict(CLOCKS)]
    measured = _fake_gpu(monkeypatch, tmp_path, clocks)
    first = ceilings.ceilings("cold")
    assert len(measured) == 1 and first.peak_tflops["bf16"] == 1000.0
    again = ceilings.ceilings("graph")  # graph shares the cold ladder: from the cache
    assert len(measured) == 1 and again.compute_ladder == first.compute_ladder and again.key == first.key
    clocks[0] = {**CLOCKS, "sm_app_mhz": 1590}  # the application clock pinned lower: measured again
    ceilings.ceilings("cold")
    assert [k["sm_app_mhz"] for k in measured] == [1755, 1590]
    ceilings.ceilings("cold", remeasure=True)
    assert len(measured) == 3


def test_an_older_or_damaged_cache_file_is_measured_again(monkeypatch, tmp_path):
    clocks = [dict(CLOCKS)]
    measured = _fake_gpu(monkeypatch, tmp_path, clocks)
    path = ceilings.cache_path(ceilings.cache_key_parts(H100, "abc-1", CLOCKS, "cold", ceilings.torch.__version__))
    path.parent.mkdir(parents=True)
    # a file of the one-GEMM ceiling (no compute_ladder): it was the peak that rows passed, so it is not reused
    path.write_text(json.dumps({"mode": "cold", "bandwidth_ladder": [], "peak_tflops": {"bf16": 1.0, "fp8": 1.0}}))
    assert ceilings.ceilings("cold").peak_tflops["bf16"] == 1000.0 and len(measured) == 1
    path.write_text("{not json")
    ceilings.ceilings("cold")
    assert len(measured) == 2


# ---------------------------------------------------------------- the ceiling a row is held to, and the flag


def test_fp16_is_held_to_its_own_rung_and_falls_back_to_bf16s():
    c = Ceilings("cold", [], {"bf16": 700.0, "fp16": 720.0, "fp8": 1300.0})
    assert [c.peak_for(d) for d in ("fp16", "bf16", "fp8")] == [720.0, 700.0, 1300.0]
    assert Ceilings("cold", [], {"bf16": 700.0, "fp8": 1300.0}).peak_for("fp16") == 700.0


def test_a_row_above_its_compute_ceiling_is_flagged_in_its_row():
    from gemmbench import registry
    from gemmbench.engine.tasks.time_task import _throughput
    from gemmbench.shapes import Problem

    # fp16 128³: 2 x 128³ = 4,194,304 FLOPs; bytes A + B + out = 3 x 128 x 128 x 2 = 98,304.
    # At 1000 GB/s the memory bound is 98,304 / 1e6 = 0.098 µs; at the fp16 peak 10 TFLOP/s the compute bound is
    # 4,194,304 / 1e7 = 0.419 µs: compute-bound.  A 0.2 µs row is at 0.419 / 0.2 = 209.7% of it; a 1 µs row 41.9%.
    ctx = SimpleNamespace(ceilings=Ceilings("cold", [[1 << 10, 1000.0], [1 << 30, 1000.0]],
                                            {"bf16": 99.0, "fp16": 10.0, "fp8": 99.0}))  # fmt: skip
    p = Problem("t", "g", 128, 128, 128, "fp16")
    work = [{"experts_hit": 1, "pairs": None, "tokens": 128}]
    fast = _throughput(ctx, p, registry.get("cublas_fp16"), work, 0.2)
    assert (fast["flops"], fast["bytes_min"]) == (4_194_304, 98_304)
    assert fast["ceiling_tflops"] == 10.0 and fast["pct_of_roofline"] == pytest.approx(209.7152)
    assert fast["roofline_note"] == metrics.ABOVE_COMPUTE
    slow = _throughput(ctx, p, registry.get("cublas_fp16"), work, 1.0)
    assert slow["pct_of_roofline"] == pytest.approx(41.94304) and slow["roofline_note"] is None


def test_ceilings_on_the_cpu_is_one_line_and_exit_2():
    import torch

    from gemmbench.cli import app

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: tests/test_gpu_ceilings.py measures")
    got = CliRunner().invoke(app, ["ceilings"])
    assert got.exit_code == 2 and "no CUDA GPU here" in got.output and "Traceback" not in got.output
