"""The timing primitive on a CPU: wall-clock sampling, the stopping rule on synthetic samples, the
modes a CPU cannot run, and the interleaving of variants in rounds()."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from gemmbench.measure.timing import L2_STATE, MODES, Prepared, Timer, TimingError

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without a GPU refuses")


# ---------------------------------------------------------------- construction


@cpu_only
@pytest.mark.parametrize("mode", ["cold", "stream", "graph"])
def test_gpu_modes_refused_without_a_gpu(mode):
    with pytest.raises(TimingError, match="GPU") as info:
        Timer(mode)
    assert mode in str(info.value) and "wall" in str(info.value)


@cpu_only
def test_default_mode_is_cold_and_so_refused_without_a_gpu():
    with pytest.raises(TimingError, match="needs a CUDA GPU"):
        Timer()


@pytest.mark.parametrize("mode", ["warm", "", "WALL", "events"])
def test_unknown_mode_raises(mode):
    with pytest.raises(TimingError, match="unknown timing mode") as info:
        Timer(mode)
    assert repr(mode) in str(info.value)
    for known in MODES:
        assert known in str(info.value)


def test_wall_timer_reports_warm_l2_and_one_copy():
    timer = Timer("wall")
    assert timer.mode == "wall" and timer.l2_state == "warm" == L2_STATE["wall"]
    assert timer.copies_needed(1) == 1 and timer.copies_needed(10**12) == 1


# ---------------------------------------------------------------- wall sampling


def test_wall_measure_samples_a_function():
    calls = []
    timer = Timer("wall", warmup_ms=1, min_samples=12, budget_s=0.05, batch=4)
    samples = timer.measure([lambda: calls.append(1)])
    assert len(samples) >= 12
    assert all(isinstance(s, float) and s > 0 for s in samples)
    assert len(calls) >= 3 + len(samples)  # >= 3 warm-up calls, then >= 1 call per sample
    assert len(samples) % 4 == 0  # whole batches


def test_wall_samples_are_per_call_microseconds():
    """A call that sleeps 2 ms reads as >= 2000 µs (one call per sample: each is over 1 ms)."""
    timer = Timer("wall", warmup_ms=1, min_samples=5, budget_s=0.0, batch=5)
    samples = timer.measure([lambda: time.sleep(0.002)])
    assert len(samples) == 5  # budget 0: stops at min_samples
    assert all(2000 <= s < 200_000 for s in samples), samples


def test_wall_sample_of_a_fast_call_averages_many_calls():
    """Sub-millisecond calls are repeated within a sample; the sample is the time of one call."""
    calls = []

    def fn():
        calls.append(1)

    timer = Timer("wall", warmup_ms=0, min_samples=3, max_samples=3, budget_s=10, batch=3)
    prepared = timer.prepare([fn])
    warm = len(calls)
    prepared.samples += prepared.take(3)
    sampled = len(calls) - warm
    assert sampled > 3 * 10  # many calls per sample, not one
    assert all(0 < s < 1000 for s in prepared.samples)


def test_a_fast_call_interrupted_once_while_sizing_its_samples_is_still_averaged_over_many_calls():
    """The sampler's first call is slowed (as a garbage collection or a preemption does): each sample is sized by the
    quickest call seen so far, not by that one, so the samples after the first still repeat the call many times."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == slow_call:
            time.sleep(0.005)

    slow_call = -1
    timer = Timer("wall", warmup_ms=0, min_samples=3, max_samples=3, budget_s=10, batch=3)
    prepared = timer.prepare([fn])
    slow_call = len(calls) + 1  # the first call the sampler makes
    prepared.samples += prepared.take(3)
    # a 5 ms call sizing the samples alone would give 1 ms / 5 ms -> one call a sample: 1 + 3 calls in all
    assert len(calls) - (slow_call - 1) > 3 * 10
    assert all(0 < s < 1000 for s in prepared.samples)


def test_prepare_warms_up_every_copy_and_keeps_the_launches():
    seen = {"a": 0, "b": 0}
    fa, fb = (lambda: seen.__setitem__("a", seen["a"] + 1)), (lambda: seen.__setitem__("b", seen["b"] + 1))
    prepared = Timer("wall", warmup_ms=0).prepare([fa, fb])
    assert seen["a"] >= 3 and seen["b"] >= 3
    assert list(prepared.keep) == [fa, fb]
    assert prepared.samples == [] and prepared.spent_s == 0.0


def test_wall_sampling_stops_on_budget():
    # target_noise 0 and a huge max_samples: only the budget can stop it
    timer = Timer("wall", warmup_ms=0, min_samples=10, max_samples=10**6, budget_s=0.02, target_noise=0.0, batch=10)
    p = timer.prepare([lambda: sum(range(50))])
    out = timer.run({"x": p})
    assert out["x"] is p.samples and len(p.samples) >= 10 and len(p.samples) % 10 == 0
    assert 0.02 <= p.spent_s < 1.0


# ---------------------------------------------------------------- the stopping rule


def noisy(n):
    """Samples whose (p80 - p20) / median is about 1: never "known to the target"."""
    return [1.0, 3.0] * (n // 2) + [1.0] * (n % 2)


def steady(n):
    return [5.0] * n


def P(samples, spent_s=0.0):
    return Prepared(take=lambda n: [], samples=list(samples), spent_s=spent_s)


def test_enough_needs_min_samples_even_when_noise_is_zero_and_budget_spent():
    timer = Timer("wall", min_samples=10, budget_s=0.5)
    assert not timer.enough(P(steady(9), spent_s=100.0))
    assert not timer.enough(P([]))
    assert timer.enough(P(steady(10)))


def test_enough_stops_on_max_samples():
    timer = Timer("wall", min_samples=10, max_samples=40, budget_s=1e9, target_noise=1e-9)
    assert not timer.enough(P(noisy(39)))
    assert timer.enough(P(noisy(40)))
    assert timer.enough(P(noisy(41)))


def test_enough_stops_on_budget():
    timer = Timer("wall", min_samples=10, max_samples=10**6, budget_s=0.5, target_noise=1e-9)
    assert not timer.enough(P(noisy(20), spent_s=0.499))
    assert timer.enough(P(noisy(20), spent_s=0.5))
    assert timer.enough(P(noisy(20), spent_s=3.0))


def test_enough_stops_on_low_noise():
    timer = Timer("wall", min_samples=10, max_samples=10**6, budget_s=1e9, target_noise=0.005)
    assert timer.enough(P(steady(10)))
    assert not timer.enough(P(noisy(10)))
    # (p80 - p20) / median / sqrt(n): the same spread passes once n is large enough
    spread = list(np.linspace(99.0, 101.0, 100))  # p80 - p20 = 1.2, median 100 -> 0.012 / sqrt(n)
    p20, med, p80 = np.percentile(spread, [20, 50, 80])
    noise = (p80 - p20) / med / np.sqrt(100)
    assert noise == pytest.approx(0.0012, rel=1e-6)
    assert Timer("wall", min_samples=10, budget_s=1e9, target_noise=0.0013).enough(P(spread))
    assert not Timer("wall", min_samples=10, budget_s=1e9, target_noise=0.0011).enough(P(spread))


# ---------------------------------------------------------------- rounds()


def sampler(kind, log=None, name=None):
    def take(n):
        if log is not None:
            log.append((name, n))
        return kind(n)

    return take


def test_rounds_interleave_variants():
    timer = Timer("wall", min_samples=10, max_samples=30, budget_s=1e9, target_noise=1e-9, batch=5)
    prepared = {k: Prepared(take=sampler(noisy)) for k in ("a", "b", "c")}
    order = list(timer.rounds(prepared))
    assert order == ["a", "b", "c"] * 6  # 30 samples each, 5 per turn, strictly in turn
    assert all(len(p.samples) == 30 for p in prepared.values())


def test_a_variant_that_is_done_early_stops_being_yielded():
    timer = Timer("wall", min_samples=10, max_samples=30, budget_s=1e9, target_noise=0.005, batch=5)
    taken = []
    prepared = {"a": Prepared(take=sampler(steady, taken, "a")), "b": Prepared(take=sampler(noisy, taken, "b"))}
    order = list(timer.rounds(prepared))
    # a: known after min_samples (2 turns); b: noisy, runs to max_samples (6 turns)
    assert order == ["a", "b", "a", "b", "b", "b", "b", "b"]
    assert len(prepared["a"].samples) == 10 and len(prepared["b"].samples) == 30
    assert taken == [(n, 5) for n in order]  # each yield is followed by one batch of that variant


def test_rounds_yields_before_sampling():
    """The name comes out before its batch is taken: a crash in take() is attributed to it."""
    timer = Timer("wall", min_samples=1, batch=1)

    def boom(n):
        raise RuntimeError("kernel fault")

    prepared = {"good": Prepared(take=sampler(steady)), "bad": Prepared(take=boom)}
    gen = timer.rounds(prepared)
    assert next(gen) == "good"
    assert next(gen) == "bad"
    with pytest.raises(RuntimeError, match="kernel fault"):
        next(gen)


def test_rounds_accumulates_spent_time_and_stops_on_budget(monkeypatch):
    import gemmbench.measure.timing as timing

    clock = [100.0]
    monkeypatch.setattr(timing.clock, "now", lambda: clock[0])  # the timer's own clock (gemmbench.measure.clock)

    def slow(n):  # every batch costs 4 ms of (fake) time
        clock[0] += 0.004
        return noisy(n)

    timer = Timer("wall", min_samples=2, max_samples=10**6, budget_s=0.01, target_noise=1e-9, batch=2)
    prepared = {"a": Prepared(take=slow), "b": Prepared(take=sampler(steady))}
    order = list(timer.rounds(prepared))
    # a is noisy: only its budget stops it, at 4, 8, 12 ms -> after its third batch;
    # b is steady: known after its first batch, at no cost
    assert order == ["a", "b", "a", "a"]
    assert prepared["a"].spent_s == pytest.approx(0.012) and prepared["b"].spent_s == 0.0
    assert len(prepared["a"].samples) == 6


def test_run_returns_every_variants_samples():
    timer = Timer("wall", min_samples=4, max_samples=4, budget_s=1e9, batch=2)
    prepared = {"x": Prepared(take=sampler(steady)), "y": Prepared(take=sampler(noisy))}
    out = timer.run(prepared)
    assert out == {"x": [5.0] * 4, "y": [1.0, 3.0, 1.0, 3.0]}


def test_rounds_with_nothing_prepared_yields_nothing():
    assert list(Timer("wall").rounds({})) == []


def test_warmup_and_samples_run_inside_their_nvtx_ranges(monkeypatch):
    """prepare(cell=...) warms up inside "warmup <cell>" and every batch of samples is taken inside
    "time <cell>"; without a cell no range is opened.  (Ranges recorded by replacing the annotate helper.)"""
    import contextlib

    import gemmbench.measure.timing as timing

    opened, calls = [], []

    @contextlib.contextmanager
    def record(name):
        opened.append(name)
        calls.append(("enter", name))
        yield
        calls.append(("exit", name))

    monkeypatch.setattr(timing, "annotate", record)
    timer = Timer("wall", warmup_ms=1, min_samples=10, batch=5, budget_s=0.01)
    p = timer.prepare([lambda: calls.append("call")], cell="v g fp16 M1 N2 K3")
    assert calls[0] == ("enter", "warmup v g fp16 M1 N2 K3") and "call" in calls[1:-1]
    assert calls[-1] == ("exit", "warmup v g fp16 M1 N2 K3")
    timer.run({"v": p})
    times = [n for n in opened if n.startswith("time ")]
    assert times and set(times) == {"time v g fp16 M1 N2 K3"} and len(times) == len(p.samples) // 5
    opened.clear()
    timer.measure([lambda: None])
    assert opened and all(n is None for n in opened)


def test_the_check_call_runs_alone_inside_its_nvtx_range(monkeypatch):
    """check.check_cell: exactly the variant's one call (not the input draw or the reference) sits in
    "check <variant> <problem>", the range `ncu --nvtx-include` can select from a `gemmbench run`."""
    import contextlib

    import gemmbench.measure.nvtx_ranges as nvtx_ranges
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    events = []

    @contextlib.contextmanager
    def record(name):
        events.append(("enter", name))
        yield
        events.append(("exit", name))

    monkeypatch.setattr(nvtx_ranges, "annotate", record)
    variant = registry.get("cublas_fp16")
    real_make = variant.make

    def make(problem, inputs):
        launch = real_make(problem, inputs)
        fn = launch.fn
        launch.fn = lambda: (events.append("call"), fn())[1]
        return launch

    p = Problem("s", "g", 3, 32, 16, "fp16")
    object.__setattr__(variant, "make", make)  # Variant is frozen; restored below
    try:
        result = check_cell(p, variant, make_inputs(p, 1, "cpu")).result
    finally:
        object.__setattr__(variant, "make", real_make)
    assert result.ok
    assert events == [
        ("enter", "check cublas_fp16 g fp16 M3 N32 K16"),
        "call",
        ("exit", "check cublas_fp16 g fp16 M3 N32 K16"),
    ]


def test_prepare_host_times_a_closure_per_layer_under_the_one_stopping_rule():
    """The host-wall sampler (a layer's eager launches, or its graph replay): at least min_samples samples, each the
    closure's wall time divided by the copies it launches, and no more once the median is known."""
    import time as _time

    from gemmbench.measure.timing import Timer

    timer = Timer("wall", budget_s=5.0, min_samples=10, target_noise=0.5)
    p = timer.prepare_host(lambda: _time.sleep(0.002), evict=False, per_sample=2)
    samples = timer.run({"layer": p})["layer"]
    assert 10 <= len(samples) <= 30
    assert 800 < float(np.median(samples)) < 3000  # ~1000 µs: 2 ms over two layer copies
