"""The only timing primitive.  Modes (docs/GPU-FACTS.md §1 explains why the first matters so much):

  cold   (default) before every sample L2 is emptied by *reading* a buffer (>= 2x L2, >= 256 MiB) -
         zero-filling it would leave dirty lines whose write-back lands inside the timed kernel.
         CUDA events per sample; each batch of samples is queued behind a GPU spin that outlasts the host's
         queuing (gemmbench.measure.launch_hold), so host launch latency stays out.  L2 state: cold.
  stream a CUDA graph of consecutive calls over distinct input copies (>= 4x L2 and >= 512 MiB in
         all, at most 1024 copies, as many as free memory holds: plan_copies), time per call: what a
         model sees layer after layer.  L2: streaming.  Inputs too big for two copies: timed cold.  Not
         held (launch_hold): a replay streams >= 512 MiB, hundreds of µs, and a graph launch queued behind
         a spin blocked the host for milliseconds on a few H100 cells (docs/BENCHMARKS.md).
  graph  a CUDA graph of [eviction, start event, call, end event] replayed per sample.  L2: cold.
  wall   host wall time per call of eager launches, synchronised: what eager Python code pays
         (launch overhead included).  L2: warm.  The only mode on a CPU.
  cupti  kernel-only: per call, the sum of the durations of the kernels it ran, from the torch profiler's CUDA
         activity records (CUPTI), each call after the cold mode's eviction (kept out by the kernel's name);
         launch latency and the gaps between a call's kernels are not in it (gemmbench.measure.kernel_trace).  L2: cold.

Every GPU row also records the names of the kernels its launch ran (Prepared.kernels, capture_kernels).

Every sample is kept.  Warm-up >= 25 ms; >= 10 samples; then sampling stops once the median is
known to `target_noise` ((p80 - p20) / median / sqrt(n)) or the per-cell budget is spent.

What the referee (gemmbench.measure.referee) needs from here: `Timer.rerun` takes one more sample in the cell's own
mode and returns the outputs it wrote (a graph's, as captured); after every GPU batch the persisting-L2 guard
(gemmbench.measure.persisting_l2) clears what a launch set aside and flags its variant (`Prepared.l2_flag`); and the
timer reads the clock through the functions gemmbench.measure.clock held at import, so a plugin that replaces them
neither moves a sample nor goes unseen.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from gemmbench.measure import clock, device, kernel_trace, persisting_l2, timing_modes
from gemmbench.measure.kernel_activity import ActivityError, joined
from gemmbench.measure.launch_hold import LaunchHold, cuda_hold
from gemmbench.measure.nvtx_ranges import annotate, range_name
from gemmbench.measure.timing_modes import L2_STATE, MODES  # noqa: F401 - read from here by the engine and tests
from gemmbench.results import metrics

STREAM_MIN_BYTES = 512 << 20  # docs/GPU-FACTS.md §1 "D": >= 512 MiB of distinct copies per graph
# A graph of more launches only costs capture time; below STREAM_MIN_BYTES / MAX_COPIES (0.5 MiB) per
# copy the total falls short of the floor, and the row's l2_state says "streaming" all the same.
MAX_COPIES = 1024
# What stream mode's copies leave free (plan_copies): the eviction buffer (256 MiB), cuBLAS's and Triton's
# workspaces, the graph's private memory pool, and the caching allocator's fragmentation.
COPY_HEADROOM_BYTES = 2 << 30
# Samples queued behind one launch hold (_held): a cold sample is 4 entries of the GPU's queue of pending work
# (eviction, start event, call, end event), well inside it at 64.
HELD_SAMPLES = 64


class TimingError(RuntimeError):
    pass


# (take: n -> n samples in µs, replay: what one sample launches, or None)
Sampler = tuple[Callable[[int], list], Optional[Callable]]


@dataclass(frozen=True)
class CopyPlan:
    """How many distinct input copies to time over, in which mode, and what the row says when that is not what the
    mode asked for (None: it is)."""

    copies: int
    mode: str
    note: Optional[str] = None


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def plan_copies(mode: str, wanted: int, per_copy: int, free: int) -> CopyPlan:
    """Copies that fit: `wanted` (Timer.copies_needed) of `per_copy` bytes each (its inputs and the outputs its
    launches write), the first already made, with `free` bytes still free beside it (memory.free_bytes), of which
    COPY_HEADROOM_BYTES stay free.  Stream mode with fewer than `wanted` copies says so; with room for one copy
    only (a 15 GiB MoE weight on an 80 GiB GPU holds a few, a larger one may not) it falls back to cold timing:
    the read eviction before each call, one copy."""
    if not timing_modes.get(mode).over_copies or wanted <= 1:
        return CopyPlan(1, mode)
    fit = 1 + max(0, free - COPY_HEADROOM_BYTES) // max(1, per_copy)
    if fit >= wanted:
        return CopyPlan(wanted, mode)
    if fit >= 2:
        return CopyPlan(fit, mode, f"stream mode over {fit} copies of {_gib(per_copy)}, the most that fit "
                                   f"({wanted} wanted for {_gib(STREAM_MIN_BYTES)} in all)")  # fmt: skip
    return CopyPlan(1, timing_modes.COLD.name, f"stream mode fell back to read-evict (cold): one copy of {_gib(per_copy)} fits "
                               f"({_gib(free)} free beside it, two needed)")  # fmt: skip


@functools.lru_cache(maxsize=1)
def _evictor():
    """One eviction buffer per process (>= 2x L2 and >= 256 MiB), shared by every Timer."""
    from gemmbench.measure.streamread import StreamReader  # triton, a @triton.jit kernel: only to empty L2 (GPU)

    l2 = device.detect().l2_bytes or (50 << 20)
    return StreamReader(max(2 * l2, 256 << 20))


def evict_l2() -> None:
    """Queue a read of the eviction buffer: L2 holds none of what ran before once it has run."""
    _evictor()()


def sync() -> None:
    if torch.cuda.is_available():
        clock.synchronize()


WALL_SAMPLE_S = 1e-3  # a wall sample repeats a fast call for about this long: the host clock's noise stays small


def _calls_per_wall_sample(call_s: float) -> int:
    return max(1, min(1000, int(WALL_SAMPLE_S / max(call_s, 1e-7))))


@dataclass
class Prepared:
    """One variant's state between rounds: how to take a sample, and what it has so far."""

    take: Callable[[int], list]  # n -> n samples in µs
    # The launches (and through their closures every tensor they touch).  A captured CUDA graph
    # replays raw addresses: if these were freed, the allocator would hand their memory to the next
    # variant while the graph still writes there (seen: illegal-address faults in stream mode).
    keep: Sequence[Callable] = ()
    samples: list = field(default_factory=list)
    spent_s: float = 0.0
    cell: Optional[str] = None  # nvtx_ranges.cell_name: its samples are taken inside "time <cell>" ranges
    # what one sample launches (the call, or the mode's graph), for capture_kernels; None where the sampler records
    # the kernel names itself (cupti) or none are wanted
    replay: Optional[Callable] = None
    kernels: list = field(default_factory=list)  # the kernel names it ran, in order of first launch
    # the outputs a graph mode's capture returned, one per copy (the graph rewrites them at each replay); [] eager
    captured: list = field(default_factory=list)
    sample_once: Optional[Callable[[], float]] = None  # one more sample as the sampler takes it (no telemetry)
    held: bool = True  # its eager samples are queued behind a launch hold (launch_hold): not for a launch that syncs
    l2_flag: Optional[str] = None  # what a batch of it left set in persisting L2 (persisting_l2.what_was_set)
    # the kernels of its profiled eager call still running after its caller's stream moved on (capture_kernels);
    # None where no eager call was profiled (a graph mode, whose capture refuses unjoined work; cupti; a CPU)
    late: Optional[list] = None

    @property
    def kernel_names(self) -> Optional[str]:
        """The row's `kernels` column: the names joined by ';', None where none were recorded (a CPU)."""
        return joined(self.kernels) or None


class Timer:
    def __init__(
        self,
        mode: str = "cold",
        *,
        warmup_ms: float = 25.0,
        min_samples: int = 10,
        max_samples: int = 2000,
        budget_s: float = 0.5,
        target_noise: float = 0.005,
        batch: int = 10,
        warmup_calls: int = 3,
    ):
        try:
            spec = timing_modes.get(mode)
        except ValueError as exc:
            raise TimingError(str(exc)) from None
        if spec.gpu and not torch.cuda.is_available():
            raise TimingError(f"--timing {mode} needs a CUDA GPU; on a CPU only 'wall' timing exists")
        self.mode = mode
        self.warmup_ms, self.min_samples, self.max_samples = warmup_ms, min_samples, max_samples
        self.budget_s, self.target_noise, self.batch = budget_s, target_noise, batch
        self.warmup_calls = warmup_calls
        self._hold: Optional[LaunchHold] = None  # made on the first held batch (a GPU's)
        self._l2_guard: Optional[persisting_l2.Guard] = None  # made at the first look (persisting_flag), on a GPU
        # called halfway through each cold or stream batch (_elapsed_us): telemetry.CellRecorder sets it
        self.midway: Optional[Callable[[], None]] = None

    @property
    def spec(self) -> timing_modes.Mode:
        return timing_modes.get(self.mode)

    @property
    def l2_state(self) -> str:
        return self.spec.l2_state

    def in_mode(self, mode: str) -> "Timer":
        """This timer with another mode and the same sampling settings (a stream plan's cold fallback)."""
        other = copy.copy(self)
        other.mode = mode
        return other

    # -- eviction ---------------------------------------------------------------------------
    def _evict(self) -> None:
        evict_l2()

    def l2_state_over(self, copies: int, input_bytes: int) -> str:
        """The L2 state of rows timed over `copies` input copies of `input_bytes` each: the mode's, except stream
        copies that all fit in L2 together (a tiny problem at MAX_COPIES), which it serves warm."""
        if self.spec.over_copies and copies > 1 and copies * input_bytes <= (device.detect().l2_bytes or 0):
            return metrics.WARM
        return self.l2_state

    def copies_needed(self, nbytes_per_copy: int) -> int:
        """Distinct input copies a stream-mode graph cycles through (1 in the other modes)."""
        if not self.spec.over_copies:
            return 1
        floor = max(STREAM_MIN_BYTES, 4 * (device.detect().l2_bytes or (50 << 20)))
        return int(min(MAX_COPIES, max(2, math.ceil(floor / max(1, nbytes_per_copy)))))

    # -- one variant ------------------------------------------------------------------------
    def prepare(self, fns: Sequence[Callable], graph_safe: bool = True, cell: Optional[str] = None) -> Prepared:
        """Warm up and build the sampler for one variant; `fns` are its launches over distinct copies.
        cell: the warm-up runs in the NVTX range "warmup <cell>", the samples in "time <cell>"."""
        if self.spec.captures_graph and not graph_safe:
            raise TimingError(
                f"--timing {self.mode} captures a CUDA graph, and this launch cannot be captured "
                "(it syncs with or copies from the host)"
            )
        t_end = clock.now() + self.warmup_ms / 1e3
        calls = 0
        with annotate(cell and range_name("warmup", cell)):
            while calls < self.warmup_calls or clock.now() < t_end:  # compile, autotune caches, clocks up
                for f in fns:
                    f()
                sync()
                calls += 1
        kernels: list = []
        captured: list = []
        take, replay = SAMPLERS[self.spec.sampler](self, fns, graph_safe, kernels, captured)
        return Prepared(take=take, keep=list(fns), cell=cell, replay=replay, kernels=kernels, captured=captured,
                        sample_once=lambda: take(1)[0], held=graph_safe, l2_flag=self.persisting_flag())  # fmt: skip

    def rerun(self, p: Prepared) -> tuple[list, float]:
        """One more call of what was sampled, in its mode, after the samples: (the outputs it wrote, one per copy in
        stream mode, and its time in µs).  A graph mode replays its graph and reads the outputs its capture returned;
        an eager mode takes one cold sample (held, as its samples were) of a call that keeps what it returns; a CPU
        times the call by the host clock."""
        if p.captured:
            assert p.sample_once is not None
            return list(p.captured), p.sample_once()
        fn, outputs = p.keep[0], []

        def call():  # the last call's: a launch hold takes a batch again where the host queued it too slowly
            outputs[:] = [fn()]

        if not torch.cuda.is_available():
            t0 = clock.now()
            call()
            return outputs, (clock.now() - t0) * 1e6
        return outputs, self._cold(call, 1, held=p.held)[0]

    def capture_kernels(self, p: Prepared) -> None:
        """Fill p.kernels from one profiled replay of what a sample launches: in stream and graph mode the graph
        itself, since cuBLAS may choose another kernel under graph capture (once 16% slower in stream mode:
        docs/GPU-FACTS.md).  An eager call is followed by a marker copy on its stream, so that the same records show
        the kernels it left running (Prepared.late).  A sampler that records its names while sampling (cupti)
        leaves no replay; a CPU has no kernel records.  A profiler that records nothing (another one holds CUPTI:
        nsys, ncu) leaves the names empty and the timing as it is."""
        if p.replay is None or not torch.cuda.is_available():
            return
        try:
            if p.captured:
                p.kernels[:] = kernel_trace.launch_names(p.replay)
            else:  # an eager call: the same records say what it left running (the referee reads p.late)
                p.kernels[:], p.late = kernel_trace.names_and_late(p.replay)
        except Exception:  # noqa: BLE001 - the names are a note beside the timing and never cost the cell; a GPU test
            p.kernels[:] = []  # (tests/test_gpu_cupti.py) fails where they go missing

    def prepare_host(self, fn: Callable, *, evict: bool, per_sample: int = 1, cell: Optional[str] = None) -> Prepared:
        """Wall samples of a closure that launches many kernels (a model layer, eager or as a graph replay): each
        sample starts with the GPU idle and, with `evict`, L2 emptied; it is the host clock around fn() and a
        synchronize, divided by `per_sample` (layer copies per launch).  Warm-up: 3 calls (compiled, caches warm)."""

        def one() -> float:
            if evict:
                self._evict()
            sync()
            t0 = clock.now()
            fn()
            sync()
            return (clock.now() - t0) * 1e6 / per_sample

        with annotate(cell and range_name("warmup", cell)):
            for _ in range(3):
                one()
        return Prepared(take=lambda n: [one() for _ in range(n)], keep=[fn], cell=cell)

    def _cold(self, fn: Callable, n: int, held: bool = True) -> list:
        """n cold samples; held (gemmbench.measure.launch_hold) unless the launch waits on the host itself (not graph-safe:
        a spin ahead of it would only make the host wait out the spin)."""

        def enqueue(k: int) -> list:
            events = []
            for _ in range(k):
                start, end = clock.Event(enable_timing=True), clock.Event(enable_timing=True)
                self._evict()  # queued ahead of the start event: L2 holds none of what ran before
                start.record()
                fn()
                end.record()
                events.append((start, end))
            return events

        return self._elapsed_us(self._held(enqueue, n) if held else enqueue(n))

    def _held(self, enqueue: Callable[[int], list], n: int) -> list:
        """enqueue(k) for n samples in all, each chunk behind a GPU spin that outlasts its queuing
        (gemmbench.measure.launch_hold: host launch latency stays out).  Chunks of at most HELD_SAMPLES: the launches
        held behind a spin must fit the GPU's queue of pending work, or the host would block on it."""
        if self._hold is None:
            self._hold = cuda_hold(clock.now, clock.synchronize)
        hold = self._hold
        out: list = []
        for first in range(0, n, HELD_SAMPLES):
            out += hold.run(functools.partial(enqueue, min(HELD_SAMPLES, n - first)))
        return out

    def _elapsed_us(self, events: list) -> list:
        """Each (start, end) event pair's interval in µs, once the GPU has run them all; `midway` (telemetry's
        reading) is called when half the pairs have run, while the GPU runs the rest: every launch of the batch
        was queued behind the hold, so host work now falls inside no timed interval."""
        if self.midway is not None and events:
            events[(len(events) - 1) // 2][1].synchronize()
            self.midway()
        clock.synchronize()
        return [clock.elapsed_ms(s, e) * 1e3 for s, e in events]

    def _cupti(self, fn: Callable, n: int, kernels: list) -> list:
        try:
            samples, names = kernel_trace.cupti_samples(fn, self._evict, n)
        except ActivityError as exc:
            raise TimingError(f"--timing cupti: {exc}") from exc
        kernels.extend(x for x in names if x not in kernels)
        return samples

    def _wall(self, fn: Callable, n: int) -> list:
        t0 = clock.now()
        fn()
        sync()
        quickest = clock.now() - t0  # a warm-up call, and the first guess at one call's time
        out = []
        for _ in range(n):
            # sized by the quickest call seen so far: a first call that the OS or the garbage collector interrupted
            # reads milliseconds, and sizing every sample by it would time a sub-microsecond call once a sample
            reps = _calls_per_wall_sample(quickest)
            sync()
            t0 = clock.now()
            for _ in range(reps):
                fn()
            sync()
            per_call = (clock.now() - t0) / reps
            out.append(per_call * 1e6)
            quickest = min(quickest, per_call)
        return out

    # -- the samplers (SAMPLERS): (fns, graph_safe, the kernel names they record, the outputs a graph's capture
    # returned) -> (take, replay) ----------------------------------------------------------------------------------
    def _events_sampler(self, fns: Sequence[Callable], graph_safe: bool, kernels: list, captured: list) -> Sampler:
        fn = fns[0]
        return (lambda n: self._cold(fn, n, held=graph_safe)), fn

    def _activity_records_sampler(
        self, fns: Sequence[Callable], graph_safe: bool, kernels: list, captured: list
    ) -> Sampler:
        fn = fns[0]
        # one profiled call first: the process's first profiler session sets up CUPTI (host time that would
        # otherwise come out of the cell's --budget) and a call whose records do not split fails here
        self._cupti(fn, 1, [])
        return (lambda n: self._cupti(fn, n, kernels)), None

    def _host_sampler(self, fns: Sequence[Callable], graph_safe: bool, kernels: list, captured: list) -> Sampler:
        fn = fns[0]
        return (lambda n: self._wall(fn, n)), fn

    def _copies_graph_sampler(
        self, fns: Sequence[Callable], graph_safe: bool, kernels: list, captured: list
    ) -> Sampler:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured.extend(f() for f in fns)
        per_call = len(fns)

        def take(n: int) -> list:
            events = []
            for _ in range(n):
                start, end = clock.Event(enable_timing=True), clock.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                events.append((start, end))
            return [us / per_call for us in self._elapsed_us(events)]

        return take, graph.replay

    def _eviction_graph_sampler(
        self, fns: Sequence[Callable], graph_safe: bool, kernels: list, captured: list
    ) -> Sampler:
        fn = fns[0]
        # Event-record nodes inside the graph (external=True) bracket the call alone, so the
        # eviction runs in the same replay but outside the measured interval.
        try:
            start = clock.Event(enable_timing=True, external=True)
            end = clock.Event(enable_timing=True, external=True)
        except TypeError as exc:
            raise TimingError("--timing graph needs torch.cuda.Event(external=True) (PyTorch >= 2.7)") from exc
        self._evict()  # allocate the eviction buffer outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._evict()
            start.record()
            captured.append(fn())
            end.record()

        def take(n: int) -> list:
            out = []
            for _ in range(n):
                graph.replay()
                end.synchronize()
                out.append(clock.elapsed_ms(start, end) * 1e3)
            return out

        return take, graph.replay

    # -- stopping rule ----------------------------------------------------------------------
    def enough(self, p: Prepared) -> bool:
        n = len(p.samples)
        if n < self.min_samples:
            return False
        if n >= self.max_samples or p.spent_s >= self.budget_s:
            return True
        p20, med, p80 = np.percentile(p.samples, [20, 50, 80])
        return (p80 - p20) / med / math.sqrt(n) <= self.target_noise

    def run(self, prepared: dict) -> dict:
        """Sample every prepared variant in interleaved rounds (clock drift then favours none)."""
        for _ in self.rounds(prepared):
            pass
        return {k: p.samples for k, p in prepared.items()}

    def rounds(self, prepared: dict):
        """run() step by step: yields the name of the variant about to be sampled, so that a caller can
        tell which variant a fault belongs to."""
        # a restart after a failed variant must not sample again the ones already finished
        active = [name for name, p in prepared.items() if not self.enough(p)]
        while active:
            for name in list(active):
                p = prepared[name]
                yield name
                t0 = clock.now()
                with annotate(p.cell and range_name("time", p.cell)):
                    p.samples += p.take(self.batch)
                p.spent_s += clock.now() - t0
                p.l2_flag = self.persisting_flag() or p.l2_flag  # this batch's, cleared before the next variant's
                if self.enough(p):
                    active.remove(name)

    def persisting_flag(self) -> Optional[str]:
        """What launches left set in persisting L2 since the last look (persisting_l2.what_was_set), then cleared;
        None where nothing was, or on a CPU."""
        if self._l2_guard is None and self.spec.gpu:
            self._l2_guard = persisting_l2.guard()
        return self._l2_guard.after_batch() if self._l2_guard is not None else None

    def measure(self, fns: Sequence[Callable], graph_safe: bool = True) -> list:
        """All samples of one launch (or of its copies in stream mode), in µs."""
        return self.run({"x": self.prepare(fns, graph_safe)})["x"]


# How each sampler of timing_modes.Mode.sampler is taken: every mode's sampler is here (a test holds them equal)
SAMPLERS: dict[str, Callable[[Timer, Sequence[Callable], bool, list, list], Sampler]] = {
    "events": Timer._events_sampler,
    "copies_graph": Timer._copies_graph_sampler,
    "eviction_graph": Timer._eviction_graph_sampler,
    "host": Timer._host_sampler,
    "activity_records": Timer._activity_records_sampler,
}


def quick_median_us(fn: Callable, budget_s: float = 0.05) -> float:
    """A short cold (GPU) or wall (CPU) measurement for choosing between configs."""
    mode = timing_modes.default(torch.cuda.is_available())
    timer = Timer(mode, warmup_ms=5, min_samples=10, budget_s=budget_s, target_noise=0.01)
    return float(np.median(timer.measure([fn])))
