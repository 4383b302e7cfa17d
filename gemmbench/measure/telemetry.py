"""The GPU's state while a cell was timed, through NVML (nvidia-ml-py): clocks, power, temperature, the clock-event
(throttle) reasons seen, and energy per call.  Without NVML (a CPU, pynvml not installed, NVML that does not start,
a GPU it cannot find) there is no probe and the row's telemetry columns stay empty; nothing else changes.

When it reads: halfway through each timed batch in cold and stream mode (Timer.rounds takes a variant's samples in
batches of 10): the host waits for the middle sample's end event, reads, and the GPU runs the other half meanwhile.
Every launch of the batch has been queued by then (in cold mode behind the launch hold, gemmbench.measure.launch_hold), so
the reading's host time falls inside no CUDA event interval.  In the other modes (graph, cupti, wall), right after
the batch's synchronise.  One reading is 7 NVML calls (energy before and after, SM and memory clock, power,
temperature, reasons), each tens of microseconds of host time.  Not a background thread at a fixed interval: its
Python wrapper around each NVML call holds the GIL, and a switch to it in the middle of queuing a batch would stall
the host.  Why halfway, not after (measured on the H100, docs/BENCHMARKS.md): read after
the batch, with the GPU just gone idle, NVML said 1965-1980 MHz for GEMMs that Nsight Compute measured at 1494-1719
MHz (its sm__cycles_elapsed.avg.per_second over the kernel) at the same durations within 4.5%: the clock had already
risen back.  A reading stands for its batch's samples (a sample counts as throttled when its batch's reading shows a
reason).

Energy per call is the difference of nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded) around each
of the cell's timed batches, summed, over the calls those batches ran.  In cold and graph mode a call is preceded by
the L2 eviction read (>= 256 MiB, timing.evict_l2), which the counter sees too: there J/call is an upper bound; in
stream mode it is the calls alone.  Wall mode's calls per sample are chosen per sample, and cupti mode's batches
hold the profiler's host time with the GPU idle: no J/call in either (timing_modes.Mode.energy_per_call).  The counter
advances in steps: on the H100 (docs/BENCHMARKS.md keeps the figures) cells whose batches spanned tens of ms read
kilowatts (one step of the counter landing in a short window) or nothing at all, while batches spanning seconds read
the GPU's power cap.  So J/call is given only for cells whose batches span MIN_ENERGY_WINDOW_S together.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from gemmbench.measure import timing_modes

# nvml.h's nvmlClocksEventReason* bits (nvmlClocksThrottleReason* before driver 535) -> the names rows carry.  Left
# out: GpuIdle (0x1: the GPU had nothing to run, as it has right after a batch's synchronise) and
# ApplicationsClocksSetting (0x2: clocks pinned by the user, `nvidia-smi -ac`, which is a setting, not a slowdown).
REASONS = (
    (0x4, "sw_power_cap"),  # the driver lowers clocks to stay under the power limit
    (0x8, "hw_slowdown"),  # hardware slowdown: temperature, power brake or a failing power supply
    (0x10, "sync_boost"),  # held to the clocks of the other GPUs of a sync-boost group
    (0x20, "sw_thermal"),  # the driver lowers clocks to keep the GPU or memory below its temperature limit
    (0x40, "hw_thermal"),  # hardware thermal slowdown (the GPU is too hot)
    (0x80, "hw_power_brake"),  # the external power brake assertion
    (0x100, "display_clock"),  # held to the display clock's setting
)


def reason_names(bits: int) -> list[str]:
    """The names of the reasons set in `bits` that slow a kernel down (REASONS), in REASONS' order."""
    return [name for bit, name in REASONS if bits & bit]


def nvml_uuid(uuid: str) -> str:
    """NVML's name of a device from torch's (`GPU-` then the UUID; torch's properties print the UUID alone)."""
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


@dataclass(frozen=True)
class Reading:
    """One NVML reading; a quantity the GPU does not report is None."""

    sm_mhz: Optional[float]
    mem_mhz: Optional[float]
    power_w: Optional[float]
    temp_c: Optional[float]
    reasons: int  # the clock-event bits (0 when NVML does not say)


class Probe:
    """One GPU's NVML handle; every read answers None for what the GPU or driver does not support."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml, self.handle = nvml, handle

    def _ask(self, fn: Callable, *args: Any) -> Any:
        try:
            return fn(self.handle, *args)
        except self.nvml.NVMLError:  # NotSupported (energy before Volta, clocks of a MIG slice), a lost GPU
            return None

    def read(self) -> Reading:
        nv = self.nvml
        power_mw = self._ask(nv.nvmlDeviceGetPowerUsage)
        return Reading(
            sm_mhz=self._ask(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
            mem_mhz=self._ask(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
            power_w=None if power_mw is None else power_mw / 1e3,
            temp_c=self._ask(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
            reasons=self._ask(nv.nvmlDeviceGetCurrentClocksEventReasons) or 0,  # nvidia-ml-py >= 12.535 (pyproject)
        )

    def energy_mj(self) -> Optional[int]:
        return self._ask(self.nvml.nvmlDeviceGetTotalEnergyConsumption)

    def clock_limits(self) -> Optional[dict]:
        """{"sm_max_mhz", "sm_app_mhz"}: the SM clock's maximum (it moves with nvidia-smi -lgc) and the application
        clock (nvidia-smi -ac); None where NVML reports either not (gemmbench.measure.ceilings keys its cache by them)."""
        nv = self.nvml
        most, app = (
            self._ask(nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM),
            self._ask(nv.nvmlDeviceGetApplicationsClock, nv.NVML_CLOCK_SM),
        )
        return None if most is None or app is None else {"sm_max_mhz": int(most), "sm_app_mhz": int(app)}


@functools.lru_cache(maxsize=None)
def probe(uuid: Optional[str]) -> Optional[Probe]:
    """The NVML probe of the GPU with this UUID (device.provenance's gpu_uuid: the physical GPU whatever
    CUDA_VISIBLE_DEVICES's order), or None without NVML.  NVML is initialised once per process."""
    if not uuid:
        return None
    try:
        import pynvml  # optional at run time: a CPU machine, or an install without nvidia-ml-py, has no telemetry
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        return Probe(pynvml, pynvml.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid)))
    except pynvml.NVMLError:  # no driver library, no such GPU, insufficient permissions
        return None


def calls_per_sample(mode: str, copies: int) -> Optional[int]:
    """Calls one timing sample runs, for J/call (timing_modes.Mode.calls: stream mode replays a graph of one call per
    copy, cold and graph mode run one); None where J/call is not given: wall mode's calls are chosen inside the
    sampler, cupti mode's batches hold the profiler's host time with the GPU idle."""
    spec = timing_modes.get(mode)
    return spec.calls_per_sample(copies) if spec.energy_per_call else None


MIN_ENERGY_WINDOW_S = 1.0  # the timed batches' total span below which J/call is not given (module docstring)


class CellRecorder:
    """One variant's telemetry over its timed batches: wrap() its sampler, then columns() for its row."""

    def __init__(self, probe: Probe, calls_per_sample: Optional[int], clock: Callable[[], float] = time.perf_counter):
        self.probe, self.calls_per_sample, self.clock = probe, calls_per_sample, clock
        self.energy_window_s = 0.0  # the batches' host time between the counter's readings, summed
        self.readings: list[tuple[Reading, int]] = []  # each batch's closing reading and its number of samples
        self.energy_mj = 0
        self.energy_samples = 0
        self.energy_known = True

    def wrap(self, take: Callable[[int], list], timer: Any = None) -> Callable[[int], list]:
        """The sampler `take` (n -> n samples), with the energy counter read around it and a reading of the clocks,
        power, temperature and reasons: halfway through the batch where the timer calls its `midway` (cold and
        stream mode: timing.Timer._elapsed_us), else after it."""

        def recorded(n: int) -> list:
            midway: list[Reading] = []
            if timer is not None:
                timer.midway = lambda: midway.append(self.probe.read())
            before, t0 = self.probe.energy_mj(), self.clock()
            try:
                samples = take(n)  # ends with a synchronise: the GPU is idle from here
            finally:
                if timer is not None:
                    timer.midway = None
            after, t1 = self.probe.energy_mj(), self.clock()
            self.energy_window_s += t1 - t0
            self.readings.append((midway[0] if midway else self.probe.read(), len(samples)))
            if before is None or after is None or after < before:  # not supported, or the counter restarted
                self.energy_known = False
            else:
                self.energy_mj += after - before
                self.energy_samples += len(samples)
            return samples

        return recorded

    def columns(self, flops: Optional[int]) -> dict:
        """The row's telemetry columns (run_schema.TELEMETRY_COLUMNS); flops: its FLOPs per call, for TFLOP/J.
        {} before any batch (no reading)."""
        if not self.readings:
            return {}
        counts = [n for _, n in self.readings]

        def per_sample(values: list) -> Optional[np.ndarray]:
            """A batch's value once per sample of the batch, batches without the value left out."""
            kept = [(v, n) for v, n in zip(values, counts, strict=True) if v is not None]
            return np.repeat([v for v, _ in kept], [n for _, n in kept]) if kept else None

        sm = per_sample([r.sm_mhz for r, _ in self.readings])
        mem = per_sample([r.mem_mhz for r, _ in self.readings])
        power = per_sample([r.power_w for r, _ in self.readings])
        temps = [r.temp_c for r, _ in self.readings if r.temp_c is not None]
        seen = {name for r, _ in self.readings for name in reason_names(r.reasons)}
        joules = self.joules_per_call()
        return {
            "sm_clock_mhz_min": None if sm is None else float(sm.min()),
            "sm_clock_mhz_median": None if sm is None else float(np.median(sm)),
            "sm_clock_mhz_max": None if sm is None else float(sm.max()),
            "mem_clock_mhz_median": None if mem is None else float(np.median(mem)),
            "power_w": None if power is None else float(np.median(power)),
            "temp_c": float(max(temps)) if temps else None,
            "energy_j_per_call": joules,
            "tflop_per_j": flops / 1e12 / joules if flops and joules else None,
            "throttled_samples": sum(n for r, n in self.readings if reason_names(r.reasons)),
            "throttle": ",".join(name for _, name in REASONS if name in seen),  # "": NVML saw no reason
        }

    def joules_per_call(self) -> Optional[float]:
        """The counter's mJ over the batches' calls; None where the GPU has no counter, the calls per sample are
        not known (wall mode), or the batches spanned less than MIN_ENERGY_WINDOW_S (the counter's steps)."""
        if not (self.energy_known and self.calls_per_sample and self.energy_samples and self.energy_mj > 0):
            return None
        if self.energy_window_s < MIN_ENERGY_WINDOW_S:
            return None
        return self.energy_mj / 1e3 / (self.energy_samples * self.calls_per_sample)
