"""What a worker does with each task (worker.py runs them; pool.py schedules them as cells).

Every task checks with the one `check.check_cell()` before anything is timed, tuned or profiled, and answers each of
its items with exactly one result, sent as soon as it is known:

  time     a problem's variants: check each, then time those that passed in interleaved rounds (run rows)
  check    the same check alone (compute-sanitizer runs it in a worker of its own, one variant at a time)
  tune     one (problem at its M bucket, variant): search its configs, checked, and store the winner
  profile  one (problem, variant): check, warm up, then one launch inside its NVTX range for the profiler around
  layer    one layer plan: build, check every GEMM, time kernels, eager launches and one CUDA graph (layer rows)
"""

from __future__ import annotations

from typing import Any, Callable, Optional, cast

import torch

from gemmbench import registry
from gemmbench.configs import tuning
from gemmbench.engine import layer as L
from gemmbench.engine.faults import context_poisoned, one_line
from gemmbench.engine.layer_plan import fall_back, steps_from_wire
from gemmbench.engine.rows import cell_row
from gemmbench.measure import memory, telemetry
from gemmbench.measure.check import check_cell, reference
from gemmbench.measure.inputs import make_inputs
from gemmbench.measure.nvtx_ranges import annotate, cell_name, domain_in_use, range_name
from gemmbench.measure.referee import Referee
from gemmbench.measure.timing import TimingError, plan_copies
from gemmbench.results import metrics
from gemmbench.shapes import Problem

PROFILE_WARMUP_CALLS = 3


def _run_row(ctx, problem: Problem, variant, status: str, reason: str = "", **extra: Any) -> dict:
    return cell_row(problem, variant, status, reason, ctx.args.timing, ctx.args.inputs, ctx.provenance, **extra)


def _error_rows(ctx, problem: Problem, variant, peak: Optional[int]) -> Callable[[str], list]:
    """The `error` row of a variant, with the peak GPU memory its cell reached, for ctx.failed to fill with the reason."""
    return lambda reason: [_run_row(ctx, problem, variant, "error", reason, gpu_mem_peak_bytes=peak)]


_FAILED = object()  # a variant's supports() raised: its error is recorded already


def _unsupported(ctx, name: str, variant, problem: Problem, rows_for: Callable[[str], list]) -> Any:
    """variant.unsupported_reason(), as a phase of its own: a plugin's supports() that hangs is stopped by the
    watchdog and blamed on this variant, and one that raises is this variant's error (_FAILED, recorded)."""
    ctx.begin(name, "supports")
    try:
        return variant.unsupported_reason(problem, ctx.dev)
    except Exception as exc:  # noqa: BLE001 - a plugin's bug: this variant's error row, the cell goes on
        ctx.failed(name, rows_for, "supports", exc)
        return _FAILED


# ---------------------------------------------------------------- time (and check)


def time_task(ctx, task: dict) -> None:
    """Check every item (a variant name) on fresh inputs, then time the ones that passed, side by side.  Each row
    records the peak GPU memory of its cell (memory.peak_bytes): its check, and its timing's set-up and warm-up."""
    problem, seed = Problem(**task["problem"]), task["seed"]
    passed, peaks = {}, {}
    for name in task["items"]:
        variant = registry.get(name)
        reason = _unsupported(ctx, name, variant, problem, _error_rows(ctx, problem, variant, None))
        if reason is _FAILED:
            continue
        if reason:
            ctx.result(name, [_run_row(ctx, problem, variant, "skipped", reason)])
            continue
        ctx.begin(name, "check")
        memory.reset_peak(ctx.devname)
        try:
            inputs = make_inputs(problem, seed, ctx.devname)
            # mypy cannot infer a lambda with a default argument (n binds this variant) from the parameter's type
            checked = check_cell(
                problem, variant, inputs, on_phase=cast(Callable[[str], None], lambda ph, n=name: ctx.begin(n, ph))
            )
        except Exception as exc:  # noqa: BLE001 - recorded as the cell's error, the sweep goes on
            inputs = None  # not held through the next variant's draw
            peak = memory.peak_bytes(ctx.devname)
            ctx.failed(name, _error_rows(ctx, problem, variant, peak), "check", exc)
            continue
        res, config = checked.result, checked.launch.config
        del inputs, checked  # freed before the next variant's draw and the timing's copies (a 15 GiB weight each)
        peak = memory.peak_bytes(ctx.devname)
        if not res.ok:
            row = _run_row(ctx, problem, variant, "wrong", res.detail, max_rel_err=res.max_rel_err, config=config,
                           gpu_mem_peak_bytes=peak)  # fmt: skip
            ctx.result(name, [row])
        elif task["task"] == "check":
            ctx.result(name, passed=True)
        else:
            passed[name], peaks[name] = (variant, res.max_rel_err, res.note), peak
    if passed:
        _time(ctx, problem, passed, peaks, seed + 1)


def _time(ctx, problem: Problem, passed: dict, peaks: dict, seed: int) -> None:
    copies: Optional[tuple] = None  # (inputs copies, their timer, the plan's note, L2 state): one set for all variants
    prepared, configs, works, plans, made = {}, {}, {}, {}, {}
    recorders = {}  # telemetry.CellRecorder per variant, where NVML sees the GPU
    probe = telemetry.probe(ctx.provenance.get("gpu_uuid"))
    ctx.timer.persisting_flag()  # what the checks' set-ups left in L2 goes: each variant's own is found after its make
    for name, (variant, *_) in passed.items():
        ctx.begin(name, "time")
        memory.reset_peak(ctx.devname)  # what the copies and earlier variants' launches hold counts: it is in use
        try:
            if copies is None:
                copies = _copies(ctx, problem, seed, len(passed))
            inputs, timer, note, l2 = copies
            plans[name] = (timer, note, l2)
            made[name] = launches = [variant.make(problem, inp) for inp in inputs]
            configs[name] = launches[0]  # its config is read once it has run: the compiler's report comes with it
            # stream mode cycles through copies with different routings: the bytes of a call are the mean
            works[name] = [c.local_work() for c in inputs]
            prepared[name] = timer.prepare([x.fn for x in launches], all(x.graph_safe for x in launches),
                                           cell=cell_name(name, problem))  # fmt: skip
            timer.capture_kernels(prepared[name])  # one profiled launch, before timing (cupti: while timing)
            if probe is not None:
                rec = telemetry.CellRecorder(probe, telemetry.calls_per_sample(timer.mode, len(launches)))
                prepared[name].take, recorders[name] = rec.wrap(prepared[name].take, timer), rec
            peaks[name] = _max(peaks[name], memory.peak_bytes(ctx.devname))
        except TimingError as exc:
            ctx.result(name, [_run_row(ctx, problem, variant, "skipped", str(exc))])
        except Exception as exc:  # noqa: BLE001
            pk = _max(peaks[name], memory.peak_bytes(ctx.devname))
            ctx.failed(name, _error_rows(ctx, problem, variant, pk), "time", exc)
    current = None
    while True:
        try:
            for current in ctx.timer.rounds(prepared):  # the stopping rule is the run's, whatever each one's mode
                ctx.begin(current, "time")
            break
        except Exception as exc:  # noqa: BLE001 - drop the failing variant, keep timing the rest
            v, pk = passed[current][0], peaks[current]
            ctx.failed(current, _error_rows(ctx, problem, v, pk), "time", exc)
            del prepared[current]
    referee = Referee(problem, copies[0], seed, copies[1]) if copies is not None and prepared else None
    for name, p in prepared.items():
        variant, err, checked = passed[name]
        timer, note, l2 = plans[name]
        note = "; ".join(filter(None, [note, checked]))  # the check's word on its tolerance (fast accumulation)
        stats = metrics.summarize(p.samples)
        extra = dict(stats, samples_us=p.samples, max_rel_err=err, config=configs[name].config, timing_mode=timer.mode,
                     l2_state=l2, gpu_mem_peak_bytes=peaks[name], kernels=p.kernel_names)  # fmt: skip
        if variant.gemm:  # a step beside the GEMMs (moe_align) has its time, no FLOPs or roofline
            extra.update(_throughput(ctx, problem, variant, works[name], stats["time_us_median"]))
            if extra["flops"] == 0:  # no roofline to be close to: the time is a launch that finds nothing to do
                note = "; ".join(filter(None, [note, IDLE_RANK]))
        if name in recorders:
            extra.update(recorders[name].columns(extra.get("flops")))
        try:
            status, note = _judged(ctx, referee, name, variant, p, made[name], extra, note)
        except Exception as exc:  # noqa: BLE001 - a call that fails on fresh inputs: this row's error (a fault ends the worker)
            ctx.failed(name, _error_rows(ctx, problem, variant, peaks[name]), "referee", exc)
            continue
        ctx.result(name, [_run_row(ctx, problem, variant, status, note, **extra)])


def _judged(ctx, referee: Optional[Referee], name: str, variant, p, launches: list, extra: dict, note: str
            ) -> tuple[str, str]:  # fmt: skip
    """A timed row's (status, reason): the referee's verdict (gemmbench.measure.referee), else `impossible` where the
    time beats the row's roofline bound (metrics.impossible_reason), else ok with its note."""
    if referee is not None:
        ctx.begin(name, "referee")
        verdict = referee.judge(variant, p, launches, extra["time_us_median"])
        if verdict is not None:
            return verdict.status, verdict.reason
    if extra.get("flops"):
        why = metrics.impossible_reason(extra["time_us_median"], extra["flops"], extra["bytes_min"],
                                        extra.get("ceiling_bw_gbps"), extra.get("ceiling_tflops"), extra["l2_state"])  # fmt: skip
        if why:
            return "impossible", why
    return "ok", note


def _copies(ctx, problem: Problem, seed: int, variants: int) -> tuple:
    """The inputs copies a problem's variants are timed over (in its scaling, of the run's --inputs values), sized
    from free memory (timing.plan_copies: a copy is its inputs and one output per variant), the timer to time them
    with (the run's, or a cold one when stream mode's copies do not fit), the note the rows carry then, and the L2
    state of the rows (Timer.l2_state_over)."""
    values = ctx.args.inputs
    first = make_inputs(problem, seed, ctx.devname, values=values)
    per_copy = first.nbytes() + variants * first.out_nbytes()
    plan = plan_copies(
        ctx.timer.mode, ctx.timer.copies_needed(first.nbytes()), per_copy, memory.free_bytes(ctx.devname)
    )
    timer = ctx.timer if plan.mode == ctx.timer.mode else ctx.timer.in_mode(plan.mode)
    inputs = [first] + [make_inputs(problem, seed + i, ctx.devname, values=values) for i in range(1, plan.copies)]
    return inputs, timer, plan.note, timer.l2_state_over(plan.copies, first.nbytes())


def _max(a: Optional[int], b: Optional[int]) -> Optional[int]:
    return None if a is None and b is None else max(x for x in (a, b) if x is not None)


# Under expert parallelism a few tokens can all land on other ranks' experts (DeepSeek-V3, EP 8, 1 token: 8 of 256
# experts, rank 0 holds 32): the kernel is launched and returns; its row says so and has no roofline %.
IDLE_RANK = "no (token, expert) pair on this rank's experts: the time is a launch with nothing to do"


def _throughput(ctx, problem: Problem, variant, works: list, t: float) -> dict:
    """works: each timed copy's GemmInputs.local_work (its experts hit, and under EP its pairs and tokens)."""
    nbytes = round(sum(metrics.bytes_min(problem, **w) for w in works) / len(works))
    # every row has the FLOPs of a routing-independent problem (cell_columns); under EP they are this rank's pairs
    flops = round(sum(metrics.flops(problem, w.get("pairs")) for w in works) / len(works))
    out: dict[str, Any] = dict(
        flops=flops, bytes_min=nbytes, tflops=metrics.tflops(flops, t), gbps=metrics.gbps(nbytes, t)
    )
    if ctx.ceilings is not None and flops > 0:  # flops 0: no pair on this rank (EP), no bound to be a % of
        bw = metrics.bandwidth_at(ctx.ceilings.bandwidth_ladder, nbytes)
        peak = ctx.ceilings.peak_for(problem.dtype)
        bound = metrics.roofline_bound_us(flops, nbytes, bw, peak)
        pct = metrics.pct_of_roofline(t, bound)
        out.update(ceiling_bw_gbps=bw, ceiling_tflops=peak, roofline_bound_us=bound, pct_of_roofline=pct,
                   roofline_note=metrics.roofline_note(pct, flops, nbytes, bw, peak))  # fmt: skip
    return out


# ---------------------------------------------------------------- tune


def tune_task(ctx, task: dict) -> None:
    """One job: its item is the job key; the result row is {"done": key, ...} or {"failed": key, "reason": ...}."""
    [key] = task["items"]
    problem, variant = Problem(**task["problem"]), registry.get(task["variant"])
    ctx.begin(key, "tune")
    try:
        share = (
            problem.label
        )  # a problem's variants come one after another: one reference (the label names the scaling)
        if ctx.cache.get("tune") != share:
            inputs = make_inputs(problem, task["seed"], ctx.devname)
            ctx.cache.update(tune=share, inputs=inputs, ref=reference(problem, inputs))
        inputs, ref = ctx.cache["inputs"], ctx.cache["ref"]
        # each candidate is a sign of life to the pool's watchdog
        best, path, tried = tuning.tune_and_store(variant.tunable, problem, inputs, ref, lambda: ctx.begin(key, "tune"),
                                                  task.get("budget_s", tuning.DEFAULT_BUDGET_S), task.get("exhaustive", False))  # fmt: skip
    except tuning.TuningError as exc:  # no config runs it: the next job can still run
        ctx.result(key, [{"failed": key, "reason": str(exc)}])
        return
    except Exception as exc:  # noqa: BLE001 - a fault: this job's outcome, then the worker may have to go
        ctx.cache.clear()
        ctx.failed(key, lambda r: [{"failed": key, "reason": r}], "tune", exc)
        return
    ctx.result(key, [{"done": key, "us": best.time_us, "config": best.config, "tried": tried, "file": str(path)}])


# ---------------------------------------------------------------- profile


def profile_task(ctx, task: dict) -> None:
    """Everything a profiler should not see happens first, outside the range (inputs, make and its tuning, the
    check, a warm-up); then one eager launch inside "profile <cell>", the range ncu --nvtx-include selects.  A cell
    whose check fails is never profiled.  The result row is the outcome: status, reason, config, max_rel_err,
    experts_hit, pairs, tokens (GemmInputs.local_work), range, domain."""
    [name] = task["items"]
    problem, variant = Problem(**task["problem"]), registry.get(name)
    rng = range_name("profile", cell_name(name, problem))
    outcome: dict = {"range": rng, "domain": domain_in_use(), "config": None, "max_rel_err": None, "experts_hit": None,
                     "pairs": None, "tokens": None}  # fmt: skip
    reason = _unsupported(ctx, name, variant, problem, lambda r: [dict(outcome, status="error", reason=r)])
    if reason is _FAILED:
        return
    if reason:
        ctx.result(name, [dict(outcome, status="skipped", reason=reason)])
        return
    ctx.begin(name, "check")
    try:
        inputs = make_inputs(problem, task["seed"], ctx.devname)
        checked = check_cell(problem, variant, inputs, on_phase=lambda ph: ctx.begin(name, ph))
        outcome.update(config=checked.launch.config, max_rel_err=checked.result.max_rel_err,
                       experts_hit=inputs.experts_hit())  # fmt: skip
        outcome.update(inputs.local_work())  # MoE: experts_hit again, pairs and tokens
        if not checked.result.ok:
            ctx.result(name, [dict(outcome, status="wrong", reason=checked.result.detail)])
            return
        ctx.begin(name, "profile")
        for _ in range(PROFILE_WARMUP_CALLS):
            checked.launch.fn()
        torch.cuda.synchronize()
        with annotate(rng):
            checked.launch.fn()
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        ctx.failed(name, lambda r: [dict(outcome, status="error", reason=r)], "profile", exc)
        return
    ctx.result(name, [dict(outcome, status="ok", reason=None)])


# ---------------------------------------------------------------- layer


def layer_task(ctx, task: dict) -> None:
    """One layer plan (its item is the plan's label): build `layers` copies, check every GEMM, then measure."""
    [label] = task["items"]
    steps = steps_from_wire(task["steps"])
    meta, seed, layers = task["meta"], task["seed"], task["layers"]
    built: list = []
    checks: list = []

    def rows(status: str, reason=None, measured=None) -> list:
        return L.rows_for(meta, steps, built, measured, status, reason, checks)

    ctx.begin(label, "check")
    try:
        while True:  # a step whose variant fails to build or launch takes the next of --variants, if it has one
            try:
                copies = [L.build(steps, seed + 7919 * i, ctx.devname) for i in range(layers)]
                built = copies[0]
                checks = L.check(built)
                break
            except L.StepFailed as failed:
                nxt = None if context_poisoned() else fall_back(steps, failed.step, one_line(failed.exc))
                if nxt is None:  # none left, or the CUDA context is gone: this layer's error
                    raise failed.exc from None
                steps, built, checks = nxt, [], []
                took = next(s for s in steps if s.name == failed.step)
                # the phase names the fallback: a death or hang from here on is blamed on it, not on the plan sent
                ctx.begin(label, f"check, {failed.step} on {took.variant} after {took.failed[-1].split(':')[0]} failed")
        wrong = [c for c in checks if not c["ok"]]
        if wrong:
            ctx.result(label, rows("wrong", "; ".join(f"{c['step']}: {c['detail']}" for c in wrong)))
            return
        ctx.begin(label, "time")
        measured = L.measure(copies, task["budget"], label)
    except Exception as exc:  # noqa: BLE001 - a fault, a failed launch, a variant's bug: this layer only
        ctx.failed(label, lambda r: rows("error", r), "layer", exc)
        return
    ctx.result(label, rows("ok", None, measured))


RUN: dict[str, Callable[[Any, dict], None]] = {
    "time": time_task,
    "check": time_task,  # the same check, and nothing timed: its passes are `passed` results
    "tune": tune_task,
    "profile": profile_task,
    "layer": layer_task,
}
