"""GPU telemetry per row with a fake pynvml: the aggregates over a cell's batches, energy per call,
the throttle flag and the table's mark; no NVML (a CPU, pynvml missing, NVML that fails) leaves the columns empty."""

from __future__ import annotations

import itertools
import sys
from dataclasses import asdict

import pytest
from conftest import TIMESTAMP, TaskContext
from rich.console import Console

from gemmbench.engine.tasks import time_task
from gemmbench.measure import telemetry
from gemmbench.measure.timing import Prepared, Timer
from gemmbench.results import tables
from gemmbench.results.run_schema import TELEMETRY_COLUMNS
from gemmbench.results.store import normalize_row
from gemmbench.shapes import Problem


class FakeNVML:
    """pynvml as gemmbench calls it.  `batches`: one dict per reading (sm, mem, mw, temp, reasons, each None for
    NotSupported); `energy`: the counter's successive values in mJ (None: NotSupported)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        pass

    def __init__(self, batches=(), energy=None, init_fails=False):
        self.batches, self.energy = list(batches), None if energy is None else list(energy)
        self.init_fails, self.opened = init_fails, []
        self.current: dict = {}
        self.energy_reads = 0

    def nvmlInit(self):
        if self.init_fails:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.opened.append(uuid)
        return "handle"

    def _value(self, key):
        v = self.current.get(key)
        if v is None:
            raise self.NVMLError("Not Supported")
        return v

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return self._value("sm" if clock == self.NVML_CLOCK_SM else "mem")

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._value("mw")

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._value("temp")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._value("reasons")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy_reads += 1
        if self.energy_reads % 2 == 0:  # the counter is read before and after a batch, then the batch's reading
            self.current = self.batches.pop(0)
        if self.energy is None:
            raise self.NVMLError("Not Supported")
        return self.energy.pop(0)


def batch(sm, mw, temp, reasons, mem=2619):
    return dict(sm=sm, mem=mem, mw=mw, temp=temp, reasons=reasons)


def take(n):
    return [10.0] * n


def test_a_cells_readings_become_its_rows_columns():
    # three batches of 10, 10 and 5 samples; 0x1 (GPU idle) alone is no throttle, 0x4 is sw_power_cap,
    # 0x20 | 0x40 are sw_thermal and hw_thermal (nvml.h's nvmlClocksEventReason* bits)
    nv = FakeNVML(
        [batch(1980, 650_000, 60, 0x1), batch(1755, 700_000, 71, 0x4 | 0x1), batch(1500, 690_000, 75, 0x20 | 0x40)],
        # the counter around each batch; between batches other variants ran (1000 -> 2000 mJ is not this cell's)
        energy=[1_000_000, 1_000_500, 1_002_000, 1_002_700, 1_003_000, 1_003_300],
    )
    seconds = itertools.count(0.0, 0.25)  # each batch spans 0.25 s: 0.75 s in all, under MIN_ENERGY_WINDOW_S...
    rec = telemetry.CellRecorder(telemetry.Probe(nv, "handle"), telemetry.calls_per_sample("stream", 4),
                                 clock=lambda: next(seconds))  # fmt: skip
    wrapped = rec.wrap(take)
    assert [len(wrapped(n)) for n in (10, 10, 5)] == [10, 10, 5]
    flops = 2 * 4096 * 8192 * 8192  # 549_755_813_888 FLOPs per call
    assert rec.columns(flops)["energy_j_per_call"] is None  # ...so the counter's steps could dominate: no J/call
    rec.energy_window_s = 1.5  # as if each batch had spanned 0.5 s
    cols = rec.columns(flops)
    assert tuple(cols) == tuple(TELEMETRY_COLUMNS)
    # per sample the SM clock is 1500 x5, 1755 x10, 1980 x10 (sorted): the 13th of 25 is 1755
    assert (cols["sm_clock_mhz_min"], cols["sm_clock_mhz_median"], cols["sm_clock_mhz_max"]) == (1500, 1755, 1980)
    assert cols["mem_clock_mhz_median"] == 2619
    # power per sample 650 W x10, 690 x5, 700 x10: the 13th of 25 is 690 W (mW / 1000)
    assert cols["power_w"] == 690.0 and cols["temp_c"] == 75
    # batches 2 and 3 had a reason other than idle: 10 + 5 samples; names in telemetry.REASONS' order
    assert cols["throttled_samples"] == 15 and cols["throttle"] == "sw_power_cap,sw_thermal,hw_thermal"
    # energy: (500 + 700 + 300) mJ = 1.5 J over 25 samples x 4 calls (stream mode over 4 copies) = 0.015 J/call;
    # 0.549755813888 TFLOP / 0.015 J = 36.650387... TFLOP/J
    assert cols["energy_j_per_call"] == pytest.approx(0.015)
    assert cols["tflop_per_j"] == pytest.approx(36.6503875925)


def test_what_the_gpu_does_not_report_is_empty_not_an_error():
    # no energy counter, no clocks (a MIG slice), no reasons: the power and temperature remain
    nv = FakeNVML([dict(mw=300_000, temp=40)], energy=None)
    rec = telemetry.CellRecorder(telemetry.Probe(nv, "handle"), 1)
    rec.wrap(take)(10)
    cols = rec.columns(1000)
    assert cols["sm_clock_mhz_median"] is None and cols["mem_clock_mhz_median"] is None
    assert cols["energy_j_per_call"] is None and cols["tflop_per_j"] is None
    assert (cols["power_w"], cols["temp_c"], cols["throttled_samples"], cols["throttle"]) == (300.0, 40, 0, "")
    assert telemetry.CellRecorder(telemetry.Probe(nv, "handle"), 1).columns(1000) == {}  # no batch: no reading


def test_wall_mode_and_a_counter_that_did_not_move_have_no_energy_per_call():
    assert [telemetry.calls_per_sample(m, 8) for m in ("cold", "graph", "stream", "wall")] == [1, 1, 8, None]
    for calls, energy in ((None, [0, 500]), (1, [700, 700])):
        seconds = itertools.count(0.0, 2.0)  # a 2 s batch: long enough, so only the mode or the counter says no
        probe = telemetry.Probe(FakeNVML([batch(1980, 1, 1, 0)], energy), "h")
        rec = telemetry.CellRecorder(probe, calls, clock=seconds.__next__)
        rec.wrap(take)(10)
        assert rec.columns(1000)["energy_j_per_call"] is None


def test_reasons_idle_and_application_clocks_are_not_throttling():
    assert telemetry.reason_names(0x1 | 0x2) == []
    assert telemetry.reason_names(0x8 | 0x10) == ["hw_slowdown", "sync_boost"]


def test_the_gpu_is_found_by_its_uuid_and_no_nvml_is_no_probe(monkeypatch, fresh_probe):
    nv = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    assert telemetry.probe("58fc6b5b-0c39-4e5a") is not None and nv.opened == ["GPU-58fc6b5b-0c39-4e5a"]
    assert telemetry.probe(None) is None  # a CPU: no UUID
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(init_fails=True))
    assert telemetry.probe("other") is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import raises ImportError
    assert telemetry.probe("third") is None


class ColdOnCpu(Timer):
    """A cold-mode Timer for the CPU: each batch of 2 samples is 5 µs a sample (nothing here is a measurement)."""

    def __init__(self):
        super().__init__("wall", warmup_ms=0, min_samples=2, max_samples=2, batch=2, warmup_calls=1)
        self.mode = "cold"

    def prepare(self, fns, graph_safe=True, cell=None):
        return Prepared(take=lambda n: [5.0] * n, keep=list(fns), cell=cell)


def test_a_timed_row_carries_its_telemetry(monkeypatch, fresh_probe):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([batch(1410, 500_000, 55, 0x4)], energy=[5_000, 6_000]))
    monkeypatch.setattr(telemetry, "MIN_ENERGY_WINDOW_S", 0.0)  # a CPU batch of 2 samples spans microseconds
    ctx = TaskContext("cold", "cpu", ColdOnCpu())
    ctx.provenance = {"gpu_uuid": "GPU-1234"}
    p = Problem("test", "g", 4, 32, 16, "fp16")
    time_task.work(ctx, {"task": "time", "items": ["cublas_fp16"], "problem": asdict(p), "seed": 1})
    [row] = ctx.rows["cublas_fp16"]
    normalize_row(dict(row, run_id="r", process=0, timestamp=TIMESTAMP))  # the run schema takes it, with the sink's
    # one batch of 2 cold samples (1 call each): 1000 mJ / 2 calls = 0.5 J/call; 2*4*32*16 = 4096 FLOPs a call
    assert row["energy_j_per_call"] == 0.5 and row["tflop_per_j"] == pytest.approx(4096e-12 / 0.5)
    assert (row["sm_clock_mhz_median"], row["throttled_samples"], row["throttle"]) == (1410, 2, "sw_power_cap")


def _row(variant, **kw):
    r = dict(gemm="g", M=16, N=64, K=64, E=1, topk=1, tp=1, ep=1, dtype="fp16", scaling="none", variant=variant,
             status="ok", reason=None, time_us_median=10.0, time_us_p20=9.9, time_us_p80=10.1, n_samples=25,
             flops=2 * 16 * 64 * 64, timing_mode="cold", l2_state="cold")  # fmt: skip
    return dict(r, **kw)


def _printed(rows) -> str:
    console = Console(record=True, width=500, color_system=None)
    for t in tables.gemm_tables(rows):
        console.print(t)
    return console.export_text()


def test_the_table_marks_throttled_rows_and_shows_the_clocks():
    hot = _row("hot", sm_clock_mhz_min=1500.0, sm_clock_mhz_median=1755.0, sm_clock_mhz_max=1980.0, power_w=690.0,
               temp_c=75.0, throttled_samples=15, throttle="sw_power_cap,hw_thermal")  # fmt: skip
    cool = _row("cool", time_us_median=12.0, time_us_p20=11.9, time_us_p80=12.1, sm_clock_mhz_min=1980.0, sm_clock_mhz_median=1980.0,
                sm_clock_mhz_max=1980.0, power_w=500.0, temp_c=50.0, throttled_samples=0, throttle="")  # fmt: skip
    text = _printed([hot, cool])
    lines = {ln.split("│")[3].strip(): [c.strip() for c in ln.split("│")] for ln in text.splitlines() if "│" in ln}
    [head] = [ln for ln in text.splitlines() if "┃ variant ┃" in ln]
    header = [c.strip() for c in head.split("┃")]
    at = {c: header.index(c) for c in ("µs", "SM MHz", "W", "°C", "status")}
    hot_cells, cool_cells = lines["* hot"], lines["cool"]
    assert hot_cells[at["µs"]] == "10.00†" and cool_cells[at["µs"]] == "12.00"
    assert [hot_cells[at[c]] for c in ("SM MHz", "W", "°C")] == ["1755 (1500-1980)", "690", "75"]
    assert cool_cells[at["SM MHz"]] == "1980"
    assert "throttled 15/25 samples: sw_power_cap,hw_thermal" in hot_cells[at["status"]]
    assert "throttled" not in cool_cells[at["status"]]
    legend = " ".join(text.split())
    assert (
        "† = samples taken while the GPU throttled its clocks" in legend and "SM MHz: the SM clock's median" in legend
    )


def test_a_table_without_telemetry_has_no_clock_columns():
    text = _printed([_row("a"), _row("b", time_us_median=float("nan"), status="error", reason="x")])
    assert "SM MHz" not in text and "†" not in text


def test_the_reading_is_taken_halfway_when_the_timer_offers_it():
    """Cold and stream mode: the timer calls `midway` while the GPU still runs half the batch; that reading, not one
    after the batch (the GPU idle, its clock back up), is the batch's.  The hook is cleared after each batch."""

    class FakeTimer:
        midway = None

    timer = FakeTimer()
    # while the batch runs NVML answers 1650 MHz with sw_power_cap; once it is done (the counter's second read),
    # 1980 MHz and idle
    nv = FakeNVML([batch(1980, 120_000, 60, 0x1)], energy=[0, 10])
    nv.current = batch(1650, 690_000, 70, 0x4)

    def take_with_midway(n):
        timer.midway()
        return [1.0] * n

    rec = telemetry.CellRecorder(telemetry.Probe(nv, "handle"), 1)
    rec.wrap(take_with_midway, timer)(10)
    cols = rec.columns(1000)
    assert cols["sm_clock_mhz_median"] == 1650 and cols["throttle"] == "sw_power_cap"
    assert timer.midway is None
