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

from typing import Any, Callable

import torch

from gemmbench import dtypes, metrics, registry, tuning
from gemmbench import layer as L
from gemmbench.check import check_cell, reference
from gemmbench.inputs import make_inputs
from gemmbench.nvtx_ranges import annotate, cell_name, domain_in_use, range_name
from gemmbench.shapes import Problem
from gemmbench.store import cell_columns
from gemmbench.timing import L2_STATE, TimingError

PROFILE_WARMUP_CALLS = 3


def _run_row(ctx, problem: Problem, variant, status: str, reason: str = "", **extra: Any) -> dict:
    row = dict(cell_columns(problem, variant), status=status, reason=reason or None, timing_mode=ctx.args.timing,
               l2_state=_l2_state(ctx.args.timing), **ctx.provenance)  # fmt: skip
    row.update(extra)
    return row


def _l2_state(mode: str) -> str:
    return L2_STATE.get(mode, "cold")


# ---------------------------------------------------------------- time (and check)


def time_task(ctx, task: dict) -> None:
    """Check every item (a variant name) on fresh inputs, then time the ones that passed, side by side."""
    problem, seed = Problem(**task["problem"]), task["seed"]
    passed = {}
    for name in task["items"]:
        variant = registry.get(name)
        reason = variant.unsupported_reason(problem, ctx.dev)
        if reason:
            ctx.result(name, [_run_row(ctx, problem, variant, "skipped", reason)])
            continue
        ctx.begin(name, "check")
        try:
            inputs = make_inputs(problem, seed, ctx.devname, scaling=variant.fp8_scaling)
            checked = check_cell(problem, variant, inputs, on_phase=lambda ph, n=name: ctx.begin(n, ph))
        except Exception as exc:  # noqa: BLE001 - recorded as the cell's error, the sweep goes on
            ctx.failed(name, lambda r, v=variant: [_run_row(ctx, problem, v, "error", r)], "check", exc)
            continue
        res = checked.result
        if not res.ok:
            row = _run_row(ctx, problem, variant, "wrong", res.detail, max_rel_err=res.max_rel_err,
                           config=checked.launch.config)  # fmt: skip
            ctx.result(name, [row])
        elif task["task"] == "check":
            ctx.result(name, passed=True)
        else:
            passed[name] = (variant, res.max_rel_err)
        del checked
    if passed:
        _time(ctx, problem, passed, seed + 1)


def _time(ctx, problem: Problem, passed: dict, seed: int) -> None:
    timer = ctx.timer
    copies: dict = {}
    prepared, configs, works = {}, {}, {}
    for name, (variant, _) in passed.items():
        ctx.begin(name, "time")
        try:
            scaling = variant.fp8_scaling
            if scaling not in copies:
                first = make_inputs(problem, seed, ctx.devname, scaling=scaling)
                n = timer.copies_needed(first.nbytes())
                copies[scaling] = [first] + [
                    make_inputs(problem, seed + i, ctx.devname, scaling=scaling) for i in range(1, n)
                ]
            launches = [variant.make(problem, inp) for inp in copies[scaling]]
            configs[name] = launches[0].config
            # stream mode cycles through copies with different routings: the bytes of a call are the mean
            works[name] = [c.local_work() for c in copies[scaling]]
            prepared[name] = timer.prepare([x.fn for x in launches], all(x.graph_safe for x in launches),
                                           cell=cell_name(name, problem))  # fmt: skip
        except TimingError as exc:
            ctx.result(name, [_run_row(ctx, problem, variant, "skipped", str(exc))])
        except Exception as exc:  # noqa: BLE001
            ctx.failed(name, lambda r, v=variant: [_run_row(ctx, problem, v, "error", r)], "time", exc)
    current = None
    while True:
        try:
            for current in timer.rounds(prepared):
                ctx.begin(current, "time")
            break
        except Exception as exc:  # noqa: BLE001 - drop the failing variant, keep timing the rest
            v = passed[current][0]
            ctx.failed(current, lambda r, v=v: [_run_row(ctx, problem, v, "error", r)], "time", exc)
            del prepared[current]
    for name, p in prepared.items():
        variant, err = passed[name]
        stats = metrics.summarize(p.samples)
        extra = dict(stats, samples_us=p.samples, max_rel_err=err, config=configs[name])
        if variant.gemm:  # a step beside the GEMMs (moe_align) has its time, no FLOPs or roofline
            extra.update(_throughput(ctx, problem, variant, works[name], stats["time_us_median"]))
        ctx.result(name, [_run_row(ctx, problem, variant, "ok", **extra)])


def _throughput(ctx, problem: Problem, variant, works: list, t: float) -> dict:
    """works: each timed copy's GemmInputs.local_work (its experts hit, and under EP its pairs and tokens)."""
    scaling = dtypes.row_scaling(problem.dtype, variant.fp8_scaling)
    nbytes = round(sum(metrics.bytes_min(problem, fp8_scaling=scaling, **w) for w in works) / len(works))
    # every row has the FLOPs of a routing-independent problem (cell_columns); under EP they are this rank's pairs
    flops = round(sum(metrics.flops(problem, w.get("pairs")) for w in works) / len(works))
    out = dict(flops=flops, bytes_min=nbytes, tflops=metrics.tflops(flops, t), gbps=metrics.gbps(nbytes, t))
    if ctx.ceilings is not None:
        bw = metrics.bandwidth_at(ctx.ceilings.bandwidth_ladder, nbytes)
        peak = ctx.ceilings.peak_for(problem.dtype)
        bound = metrics.roofline_bound_us(flops, nbytes, bw, peak)
        out.update(ceiling_bw_gbps=bw, ceiling_tflops=peak, roofline_bound_us=bound,
                   pct_of_roofline=metrics.pct_of_roofline(t, bound))  # fmt: skip
    return out


# ---------------------------------------------------------------- tune


def tune_task(ctx, task: dict) -> None:
    """One job: its item is the job key; the result row is {"done": key, ...} or {"failed": key, "reason": ...}."""
    [key] = task["items"]
    problem, variant = Problem(**task["problem"]), registry.get(task["variant"])
    ctx.begin(key, "tune")
    try:
        share = (problem.label, variant.fp8_scaling)  # a problem's variants come one after another: one reference
        if ctx.cache.get("tune") != share:
            inputs = make_inputs(problem, task["seed"], ctx.devname, scaling=variant.fp8_scaling)
            ctx.cache.update(tune=share, inputs=inputs, ref=reference(problem, inputs))
        best, path, tried = tuning.tune_and_store(variant.tunable, problem, ctx.cache["inputs"], ctx.cache["ref"])
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
    reason = variant.unsupported_reason(problem, ctx.dev)
    if reason:
        ctx.result(name, [dict(outcome, status="skipped", reason=reason)])
        return
    ctx.begin(name, "check")
    try:
        inputs = make_inputs(problem, task["seed"], ctx.devname, scaling=variant.fp8_scaling)
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
    steps = L.steps_from_wire(task["steps"])
    meta, seed, layers = task["meta"], task["seed"], task["layers"]
    built: list = []
    checks: list = []

    def rows(status: str, reason=None, measured=None) -> list:
        return L.rows_for(meta, steps, built, measured, status, reason, checks)

    ctx.begin(label, "check")
    try:
        copies = [L.build(steps, seed + 7919 * i, ctx.devname) for i in range(layers)]
        built = copies[0]
        checks = L.check(built)
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
