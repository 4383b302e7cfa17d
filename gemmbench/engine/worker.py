"""The worker process: runs the engine's tasks (engine/tasks/), one cell at a time, in a process a faulting kernel may end.

A kernel that faults (illegal address, misaligned access) poisons the CUDA context of its whole process, so cells
run here, never in the process that owns the sweep (pool.py).  The pool sends one task per line on stdin:
{"task": "time"|"check"|"tune"|"profile"|"layer", "items": [...], ...payload}.  Events go back as JSON lines on the
file descriptor named by GEMMBENCH_EVENT_FD (stdout stays free for whatever kernels, plugins or profilers print):

  {"ev": "starting", "phase": P}                              during start-up, as each phase begins (a heartbeat)
  {"ev": "ready"} / {"ev": "startup_failed", "error": E}     once, after start-up
  {"ev": "begin", "item": I, "phase": P}                       before any work on I that could fault
  {"ev": "result", "item": I, "rows": [...], "passed": bool}   I is finished (any status), exactly once
  {"ev": "done"}                                               the task is complete
  {"ev": "fatal"}                                              the CUDA context is lost; the worker exits

After a CUDA error the worker reports the item's result and exits with FATAL_EXIT; the pool starts a new one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any, Callable, Optional

from gemmbench.engine.faults import context_poisoned, one_line

FATAL_EXIT = 3
# The CPU path measures no GPU number, and Triton's interpreter takes 25-250 ms a call on the smoke set (measured on the
# 2-core CI machine): there a cell takes exactly 5 samples, after the wall sampler's first call (which
# also decides the calls per sample) as its only warm-up; not >= 25 ms of warm-up, >= 10 samples and then more until
# --budget is spent (that rule gave interpreter cells 10-20 samples and each torch cell 0.5 s: half the smoke run).
# Five, not fewer: `compare`'s Mann-Whitney U can reach p < 0.01 (two-sided) between two runs only from 5 samples each.
CPU_SAMPLES = 5


class Events:
    def __init__(self, fd: int):
        os.set_inheritable(fd, False)  # a plugin's child must not hold the pipe open past this worker's death
        self._f = os.fdopen(fd, "w", buffering=1)

    def send(self, **event: Any) -> None:
        self._f.write(json.dumps(event, default=str) + "\n")
        self._f.flush()


class Context:
    """What a task sees of its worker: the events, the device, the timer and the provenance of its rows."""

    def __init__(self, args: argparse.Namespace, events: Events):
        from gemmbench import registry  # heavy, in main's try: startup_failed
        from gemmbench.configs import engine_import
        from gemmbench.measure import ceilings, device

        events.send(ev="starting", phase="loading plugins")
        for plugin in args.plugin:
            registry.load_plugin(plugin)
        engine_import.register_from_env()  # the command's --import-config variants
        self.args, self.events = args, events
        events.send(ev="starting", phase="probing the GPU")
        self.dev = device.detect()
        self.devname = "cuda" if self.dev.kind == "cuda" else "cpu"
        import torch

        if self.dev.kind == "cuda":  # a GPU that a stopped worker left unusable fails here, not in the next cell
            torch.ones(1, device="cuda").add_(1).item()
        else:  # the CPU path: one thread, so a small matmul is not timed in the scheduler's ticks of a busy machine
            torch.set_num_threads(1)
        # measured (or read from the cache) here, so that a failure is one start-up error, not a cell's
        if args.ceilings and self.dev.kind == "cuda":
            events.send(ev="starting", phase="measuring the GPU's ceilings")
        self.ceilings = ceilings.ceilings(args.timing) if args.ceilings and self.dev.kind == "cuda" else None
        self.provenance = device.provenance()
        self._timer = None
        self.cache: dict = {}  # what tasks of one worker may share (tuning's inputs and reference)

    @property
    def timer(self):
        """The run's Timer, made at first use: tune, profile and layer tasks make their own."""
        if self._timer is None:
            from gemmbench.measure.timing import Timer  # torch, off this module's top (main reports a failed import)

            a = self.args
            if self.dev.kind == "cuda":
                self._timer = Timer(a.timing, budget_s=a.budget, min_samples=a.min_samples)
            else:  # CPU_SAMPLES: one batch of n samples, no warm-up of its own (Timer._wall's first call is one)
                n = min(a.min_samples, CPU_SAMPLES)
                self._timer = Timer(a.timing, budget_s=a.budget, min_samples=n, max_samples=n, batch=n, warmup_ms=0,
                                    warmup_calls=0)  # fmt: skip
        return self._timer

    def begin(self, item: str, phase: str) -> None:
        self.events.send(ev="begin", item=item, phase=phase)

    def result(self, item: str, rows: Optional[list] = None, passed: bool = False) -> None:
        self.events.send(ev="result", item=item, rows=rows or [], passed=passed)

    def failed(self, item: str, rows_for: Callable[[str], list], phase: str, exc: BaseException) -> None:
        """The item's result as an error; when the CUDA context is gone, the worker exits after it."""
        from gemmbench.measure.check import CellError  # torch, off this module's top (main reports a failed import)

        if isinstance(exc, CellError):
            phase, exc = exc.phase, exc.exc
        poisoned = context_poisoned()
        self.result(item, rows_for(f"{phase}: {one_line(exc)}"))
        if poisoned:
            self.events.send(ev="fatal")  # the row above was the casualty: the pool restarts, no new row
            raise SystemExit(FATAL_EXIT)  # not sys.exit: that is a plugin's error here (refuse_exit)


class PluginExit(Exception):
    """sys.exit called by a variant's code inside the worker: that variant's error, not the end of the worker."""


def refuse_exit(code: object = None) -> None:
    """sys.exit in the worker: an exception the cell's own error handling records against the variant in flight."""
    raise PluginExit(f"sys.exit({code!r}) called inside the benchmark worker, which only gemmbench may end")


def main() -> None:
    parser = argparse.ArgumentParser(description="gemmbench worker (started by the engine's pool)")
    parser.add_argument("--timing", default="cold")
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument("--min-samples", type=int, default=10)
    parser.add_argument("--inputs", default="randn", help="the values timed calls run on (inputs.VALUES)")
    parser.add_argument("--plugin", action="append", default=[])
    parser.add_argument("--ceilings", action="store_true", help="measure the GPU's ceilings at start-up")
    args = parser.parse_args()
    events = Events(int(os.environ["GEMMBENCH_EVENT_FD"]))
    sys.exit = refuse_exit  # type: ignore[assignment]  # a plugin's hook ending the worker would be a silent loss
    try:
        from gemmbench.engine import tasks  # heavy, in the try: a failed import (torch, triton) is startup_failed

        work = tasks.load_all()
        ctx = Context(args, events)
    except Exception as exc:  # noqa: BLE001 - the pool reports it once and stops
        events.send(ev="startup_failed", error=one_line(exc), detail=traceback.format_exc()[-2000:])
        raise SystemExit(2) from None
    events.send(ev="ready", device=ctx.dev.kind)  # a GPU that fell off the bus starts as a "cpu" worker
    for line in sys.stdin:
        if line.strip():
            task = json.loads(line)
            work[task["task"]](ctx, task)
            events.send(ev="done")


if __name__ == "__main__":
    main()
