"""The `layer` task: one layer plan (its GEMMs in order, with the steps between them) is one cell; the worker builds
`layers` copies, checks every GEMM, then times the kernels, the eager launches and one CUDA graph (engine/layer.py).  A
step whose variant fails to build or launch takes the next of --variants (layer_plan.fall_back).  The parent's side:
the cell (`cell`) and LayerSink, which rewrites the layer table after each plan, so that an interrupted sweep keeps what
it measured; the worker's: `work`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gemmbench.dtypes import label as dtype_label
from gemmbench.dtypes import problem_fp8_accum, problem_scaling
from gemmbench.engine import layer as L
from gemmbench.engine.faults import context_poisoned, one_line
from gemmbench.engine.layer_plan import fall_back, steps_from_wire, steps_to_wire
from gemmbench.engine.pool import Cell, Sink
from gemmbench.measure.device import provenance

# ---------------------------------------------------------------- the parent's side


def cell(sset, model: str, run_id: str, one: tuple, seed: int, layers: int, budget: float) -> Cell:
    """One layer plan as an engine cell: the worker's `layer` task builds, checks and times it."""
    t, e, dp, layout, d, s, a, M, kind, steps = one
    a, s = problem_fp8_accum(d, a), problem_scaling(d, s)  # a 16-bit layer's: "none", as its rows' problems have
    par = f"tp{t}{f' ep{e}' if e > 1 else ''}{f' dp{dp}' if dp > 1 else ''}{f' {layout}' if layout != 'vllm' else ''}"
    label = f"{sset.name}{f' {kind}' if kind else ''} {par} {dtype_label(d, s, a)} M{M}"
    meta = dict(provenance(), run_id=run_id, timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"), model=model, shape_set=sset.name, layer_kind=kind,
                tp=t, ep=e, dp=dp, layout=layout, dtype=d, scaling=s, fp8_accum=a, M=M, layers=layers,
                l2_state="cold at layer start", timing_mode="wall")  # fmt: skip
    payload = dict(steps=steps_to_wire(steps), meta=meta, seed=seed, layers=layers, budget=budget)
    return Cell("layer", payload, (label,), label)


@dataclass
class LayerSink(Sink):
    """Every plan's rows into the layer table at `path`, rewritten after each (OSError when it cannot be written), and
    the progress hooks of the command (begin: what runs now; advance: a plan answered; note: a line to show)."""

    path: Path
    begin_hook: Callable[[str], None] = lambda text: None
    advance: Callable[[], None] = lambda: None
    note_hook: Callable[[str], None] = lambda text: None
    rows: list = field(default_factory=list)

    def begin(self, cell, item, phase, gpu) -> None:
        self.begin_hook(f"{item} ({phase})")

    def result(self, cell, item, rows, passed, gpu) -> None:
        from gemmbench.results import side_tables  # the parent's side: the worker imports no pandas

        self.rows += rows
        side_tables.write_layer_table(self.path, self.rows)
        self.advance()

    def lost(self, cell, item, reason, gpu) -> None:
        steps = steps_from_wire(cell.payload["steps"])
        self.result(cell, item, L.rows_for(cell.payload["meta"], steps, [], None, "error", reason), False, gpu)

    def note(self, text: str) -> None:
        self.note_hook(text)


# ---------------------------------------------------------------- the worker's side


def work(ctx, task: dict) -> None:
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
