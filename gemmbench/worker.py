"""The worker process: checks and times the variants of one problem at a time.

A kernel that faults (illegal address, misaligned access) poisons the CUDA context of its whole
process, so cells run here, never in the process that owns the sweep.  The parent (runner.py)
sends one JSON task per line on stdin; events go back as JSON lines on the file descriptor named
by GEMMBENCH_EVENT_FD (stdout stays free for whatever kernels or plugins print):

  {"ev": "ready"} / {"ev": "startup_failed", "error": E}   once, after start-up
  {"ev": "begin", "variant": V, "phase": "check"|"time"}   before any work that could fault
  {"ev": "row", "row": {...}}                               a finished cell (any status)
  {"ev": "passed", "variant": V}                            check-only tasks: V passed its check
  {"ev": "done"}                                            the task is complete
  {"ev": "fatal"}                                           the CUDA context is lost; the worker exits

After a CUDA error the worker reports the row and exits with FATAL_EXIT; the parent starts a new one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

FATAL_EXIT = 3


class Events:
    def __init__(self, fd: int):
        self._f = os.fdopen(fd, "w", buffering=1)

    def send(self, **event) -> None:
        self._f.write(json.dumps(event) + "\n")
        self._f.flush()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def context_poisoned() -> bool:
    """True when the CUDA context is unusable (a sticky error): only a new process recovers."""
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return True


class Worker:
    def __init__(self, args, events: Events):
        import torch

        from gemmbench import ceilings, device, registry
        from gemmbench.timing import Timer

        self.torch, self.registry, self.events = torch, registry, events
        for plugin in args.plugin:
            registry.load_plugin(plugin)
        self.dev = device.detect()
        self.devname = "cuda" if self.dev.kind == "cuda" else "cpu"
        self.timer = Timer(args.timing, budget_s=args.budget, min_samples=args.min_samples)
        # measured (or read from the cache) here, so that a failure is one startup error, not a cell's
        self.ceilings = ceilings.ceilings(args.timing) if self.dev.kind == "cuda" and not args.check_only else None
        self.provenance = device.provenance()

    # -- rows -------------------------------------------------------------------------------
    def _row(self, problem, variant, status: str, reason: str = "", **extra) -> dict:
        from gemmbench.store import cell_columns

        row = dict(
            cell_columns(problem, variant),
            status=status,
            reason=reason or None,
            timing_mode=self.timer.mode,
            l2_state=self.timer.l2_state,
            **self.provenance,
        )
        row.update(extra)
        return row

    def _fail(self, problem, variant, phase: str, exc: BaseException) -> None:
        reason = f"{phase}: {_one_line(exc)}"
        poisoned = context_poisoned()
        self.events.send(ev="row", row=self._row(problem, variant, "error", reason))
        if poisoned:
            self.events.send(ev="fatal")  # the row above was the casualty: the parent restarts, no new row
            sys.exit(FATAL_EXIT)

    # -- phases -----------------------------------------------------------------------------
    def check(self, problem, variant, seed: int):
        """Run once on fresh inputs into a NaN-poisoned output; compare with the fp32 reference."""
        from gemmbench.check import compare, poison, reference
        from gemmbench.inputs import make_inputs
        from gemmbench.nvtx_ranges import annotate, cell_name, range_name

        inputs = make_inputs(problem, seed, self.devname, scaling=variant.fp8_scaling)
        launch = variant.make(problem, inputs)
        poison(launch.out)
        with annotate(range_name("check", cell_name(variant.name, problem))):  # exactly one call inside
            out = launch.fn()
            if self.dev.kind == "cuda":
                self.torch.cuda.synchronize()
        if variant.check is not None:  # not a GEMM output (moe_align): the variant's own check
            return variant.check(problem, inputs, out), launch.config
        return compare(problem, out, reference(problem, inputs)), launch.config

    def task(self, task: dict) -> None:
        from gemmbench.shapes import Problem

        problem = Problem(**task["problem"])
        seed = task["seed"]
        passed = {}
        for name in task["variants"]:
            variant = self.registry.get(name)
            reason = variant.unsupported_reason(problem, self.dev)
            if reason:
                self.events.send(ev="row", row=self._row(problem, variant, "skipped", reason))
                continue
            self.events.send(ev="begin", variant=name, phase="check")
            try:
                result, config = self.check(problem, variant, seed)
            except Exception as exc:  # noqa: BLE001 - recorded as the cell's error, the sweep goes on
                self._fail(problem, variant, "check", exc)
                continue
            if not result.ok:
                self.events.send(
                    ev="row",
                    row=self._row(
                        problem, variant, "wrong", result.detail, max_rel_err=result.max_rel_err, config=config
                    ),
                )
                continue
            if task.get("check_only"):
                self.events.send(ev="passed", variant=name)
            else:
                passed[name] = (variant, result.max_rel_err)
        if passed:
            self.time(problem, passed, seed + 1)
        self.events.send(ev="done")

    def time(self, problem, passed: dict, seed: int) -> None:
        from gemmbench import metrics
        from gemmbench.inputs import make_inputs
        from gemmbench.nvtx_ranges import cell_name
        from gemmbench.timing import TimingError

        copies, prepared, configs, hit = {}, {}, {}, {}
        for name, (variant, _) in passed.items():
            self.events.send(ev="begin", variant=name, phase="time")
            try:
                scaling = variant.fp8_scaling
                if scaling not in copies:
                    first = make_inputs(problem, seed, self.devname, scaling=scaling)
                    n = self.timer.copies_needed(first.nbytes())
                    copies[scaling] = [first] + [
                        make_inputs(problem, seed + i, self.devname, scaling=scaling) for i in range(1, n)
                    ]
                launches = [variant.make(problem, inp) for inp in copies[scaling]]
                configs[name] = launches[0].config
                # stream mode cycles through copies with different routings: the bytes of a call are the mean
                hit[name] = [c.experts_hit() for c in copies[scaling]]
                prepared[name] = self.timer.prepare(
                    [x.fn for x in launches], all(x.graph_safe for x in launches), cell=cell_name(name, problem)
                )
            except TimingError as exc:
                self.events.send(ev="row", row=self._row(problem, variant, "skipped", str(exc)))
            except Exception as exc:  # noqa: BLE001
                self._fail(problem, variant, "time", exc)
        current = None
        while True:
            try:
                for current in self.timer.rounds(prepared):
                    self.events.send(ev="begin", variant=current, phase="time")
                break
            except Exception as exc:  # noqa: BLE001 - drop the failing variant, keep timing the rest
                self._fail(problem, passed[current][0], "time", exc)
                del prepared[current]
        for name, p in prepared.items():
            variant, err = passed[name]
            stats = metrics.summarize(p.samples)
            if not variant.gemm:  # a step beside the GEMMs (moe_align): its time, no FLOPs or roofline
                self.events.send(
                    ev="row",
                    row=self._row(
                        problem, variant, "ok", **stats, samples_us=p.samples, max_rel_err=err, config=configs[name]
                    ),
                )
                continue
            t = stats["time_us_median"]
            scaling = variant.fp8_scaling if problem.dtype == "fp8" else "tensor"
            nbytes = round(
                sum(metrics.bytes_min(problem, h if problem.is_moe else None, scaling) for h in hit[name])
                / len(hit[name])
            )
            flops = metrics.flops(problem)  # also in every row, via _row
            extra = dict(
                stats,
                samples_us=p.samples,
                max_rel_err=err,
                config=configs[name],
                bytes_min=nbytes,
                tflops=metrics.tflops(flops, t),
                gbps=metrics.gbps(nbytes, t),
            )
            if self.ceilings is not None:
                bw = metrics.bandwidth_at(self.ceilings.bandwidth_ladder, nbytes)
                peak = self.ceilings.peak_for(problem.dtype)
                bound = metrics.roofline_bound_us(flops, nbytes, bw, peak)
                extra.update(
                    ceiling_bw_gbps=bw,
                    ceiling_tflops=peak,
                    roofline_bound_us=bound,
                    pct_of_roofline=metrics.pct_of_roofline(t, bound),
                )
            self.events.send(ev="row", row=self._row(problem, variant, "ok", **extra))


def main() -> None:
    parser = argparse.ArgumentParser(description="gemmbench worker (started by gemmbench run)")
    parser.add_argument("--timing", default="cold")
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument("--min-samples", type=int, default=10)
    parser.add_argument("--plugin", action="append", default=[])
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args()
    events = Events(int(os.environ["GEMMBENCH_EVENT_FD"]))
    try:
        worker = Worker(args, events)
    except Exception as exc:  # noqa: BLE001 - the parent reports it once and stops
        events.send(ev="startup_failed", error=_one_line(exc), detail=traceback.format_exc()[-2000:])
        sys.exit(2)
    events.send(ev="ready")
    for line in sys.stdin:
        if line.strip():
            worker.task(json.loads(line))


if __name__ == "__main__":
    main()
