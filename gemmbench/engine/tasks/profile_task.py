"""The `profile` task: one (problem, variant) in a worker of its own, started under a profiler (Nsight Compute,
Nsight Systems).  Everything a profiler should not see happens first, outside the cell's NVTX range; then one eager
launch inside it, the range `ncu --nvtx-include` selects.  The parent's side: the cell (`cell`) and Outcome, the sink
that keeps the worker's outcome row and the profiler's output; the worker's: `work`.  Reading the reports into rows
is gemmbench.profile.sweep's."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import torch

from gemmbench import registry
from gemmbench.engine.pool import Cell, Sink
from gemmbench.engine.tasks.common import FAILED, unsupported
from gemmbench.measure.check import check_cell
from gemmbench.measure.inputs import cell_seed, make_inputs
from gemmbench.measure.nvtx_ranges import annotate, cell_name, domain_in_use, range_name
from gemmbench.shapes import Problem

PROFILE_WARMUP_CALLS = 3


# ---------------------------------------------------------------- the parent's side


def cell(problem: Problem, variant: str, seed: int, prefix: tuple, timeout_s: Optional[float]) -> Cell:
    """The profile cell of `variant` on `problem`, its worker started under the profiler's command line `prefix`."""
    payload = {"problem": asdict(problem), "seed": cell_seed(seed, problem)}
    return Cell("profile", payload, (variant,), problem.label, prefix=prefix, timeout_s=timeout_s)


class Outcome(Sink):
    """A Sink of gemmbench.engine.pool for one profiled cell: the worker's outcome (or why it has none), the tool's output."""

    def __init__(self) -> None:
        self.outcome: Optional[dict] = None
        self.why_lost: Optional[str] = None
        self.output, self.code = "", 0

    def result(self, cell, item, rows, passed, gpu) -> None:
        self.outcome = rows[0]

    def lost(self, cell, item, reason, gpu) -> None:
        self.why_lost = reason

    def closed(self, cell, log, code) -> None:
        self.output, self.code = log, code


# ---------------------------------------------------------------- the worker's side


def work(ctx, task: dict) -> None:
    """Everything a profiler should not see happens first, outside the range (inputs, make and its tuning, the
    check, a warm-up); then one eager launch inside "profile <cell>", the range ncu --nvtx-include selects.  A cell
    whose check fails is never profiled.  The result row is the outcome: status, reason, config, max_rel_err,
    experts_hit, pairs, tokens (GemmInputs.local_work), range, domain."""
    [name] = task["items"]
    problem, variant = Problem(**task["problem"]), registry.get(name)
    rng = range_name("profile", cell_name(name, problem))
    outcome: dict = {"range": rng, "domain": domain_in_use(), "config": None, "max_rel_err": None, "experts_hit": None,
                     "pairs": None, "tokens": None}  # fmt: skip
    reason = unsupported(ctx, name, variant, problem, lambda r: [dict(outcome, status="error", reason=r)])
    if reason is FAILED:
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
