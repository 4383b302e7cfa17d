"""GPU test (marker `gpu`; skipped without CUDA) of telemetry per row: a row timed on a real GPU carries NVML's
clocks, power and temperature (nvidia-ml-py is on the GPU image), read from the GPU the row's gpu_uuid names.
No timing, clock or power value is asserted beyond its being physical."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from conftest import TaskContext

from gemmbench.engine.tasks import time_task
from gemmbench.measure import device, telemetry
from gemmbench.measure.timing import Timer
from gemmbench.shapes import Problem

pytestmark = pytest.mark.gpu


def test_a_gpu_row_has_clocks_power_and_temperature():
    uuid = device.provenance()["gpu_uuid"]
    pynvml = pytest.importorskip("pynvml")
    probe = telemetry.probe(uuid)
    assert probe is not None, f"NVML did not open the GPU {uuid}"
    # the probe's GPU is torch's device 0: the same name through NVML as through CUDA
    assert pynvml.nvmlDeviceGetName(probe.handle) == device.detect().name
    ctx = TaskContext("stream", "cuda", Timer("stream", budget_s=0.05))
    ctx.provenance = {"gpu_uuid": uuid}
    p = Problem("test", "g", 16, 4096, 4096, "bf16")
    time_task.work(ctx, {"task": "time", "items": ["cublas_bf16"], "problem": asdict(p), "seed": 1})
    [row] = ctx.rows["cublas_bf16"]
    assert row["status"] == "ok", row.get("reason")
    assert 0 < row["sm_clock_mhz_min"] <= row["sm_clock_mhz_median"] <= row["sm_clock_mhz_max"] < 5000
    assert 0 < row["mem_clock_mhz_median"] and 0 < row["power_w"] < 2000 and 0 < row["temp_c"] < 120
    assert 0 <= row["throttled_samples"] <= row["n_samples"] and isinstance(row["throttle"], str)
    # stream mode has no eviction in the energy; a Hopper GPU has the counter, but 0.05 s may not move it: if it did,
    # the energy per call is under the whole board's power limit (< 2000 W) times the call's median time
    if row["energy_j_per_call"] is not None:
        assert 0 < row["energy_j_per_call"] < 2000 * row["time_us_median"] * 1e-6 * 1.5
