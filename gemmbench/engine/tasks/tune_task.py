"""The `tune` task: one job is one (problem at its M bucket, variant), one cell of the engine, so that a faulting
config costs only its job and a fresh worker carries on.  The parent's side: the jobs in a fixed order (`jobs`), their
cells (`cells`) and TuneSink, which keeps each job's outcome for the command's table and JSON document; the worker's:
`work`, which searches the job's configs (configs.tuning), each checked, and stores the winner as its own JSON file."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from gemmbench import registry
from gemmbench.configs import config_files, tuning
from gemmbench.engine.pool import Cell, Sink
from gemmbench.measure.check import reference
from gemmbench.measure.inputs import make_inputs
from gemmbench.results.shard import cell_key, cost
from gemmbench.shapes import Problem

# ---------------------------------------------------------------- the parent's side


def jobs(problems: list, chosen: list, dev) -> list:
    """[(problem at its M bucket, variant)], in a fixed order: every shard's host builds this same list from the
    same options.  M = 1..16 share a bucket, so they are tuned once.  Each fp8 accumulation contract asked is tuned
    on its own and stored in its own file (config_files.config_path: fast's ends ,fp8_accum=fast, and fast runs read
    it over the shared one): a tile chosen under fast accumulation can need twice the registers with promotion."""
    seen, out = set(), []
    for p in problems:
        p = p.with_(M=config_files.m_bucket(p.M, p.is_moe))
        for v in chosen:
            key = cell_key(p, v.name)
            if key not in seen and not v.unsupported_reason(p, dev):
                seen.add(key)
                out.append((p, v))
    return out


def cells(jobs: list, seed: int, search: tuple[float, bool]) -> list[Cell]:
    """The engine's cells: one `tune` task per job, its one item the job key; search: (seconds per job, exhaustive)."""
    return [
        Cell(
            "tune",
            {"problem": asdict(p), "variant": v.name, "seed": seed, "budget_s": search[0], "exhaustive": search[1]},
            (cell_key(p, v.name),),
            f"{p.label}  {v.name}",
            cost=cost(p),
        )  # fmt: skip
        for p, v in jobs
    ]


@dataclass
class TuneSink(Sink):
    """The pool's events for the jobs: each one's outcome (done: its result row; failed: why), and the progress
    hooks of the command (begin: what runs now; advance: a job answered; note: a line to show)."""

    jobs: dict  # job key -> (problem at its bucket, variant), in the jobs' order
    begin_hook: Callable[[str], None] = lambda text: None
    advance: Callable[[], None] = lambda: None
    note_hook: Callable[[str], None] = lambda text: None
    done: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)

    @classmethod
    def of(cls, jobs: list, **hooks) -> "TuneSink":
        return cls({cell_key(p, v.name): (p, v) for p, v in jobs}, **hooks)

    def begin(self, cell, item, phase, gpu) -> None:
        self.begin_hook(f"GPU {gpu}: {cell.label}" if gpu is not None else cell.label)

    def result(self, cell, item, rows, passed, gpu) -> None:
        for row in rows:
            if "done" in row:
                self.done[item] = row
            else:
                self.failed[item] = row.get("reason", "")
        self.advance()

    def lost(self, cell, item, reason, gpu) -> None:
        self.failed[item] = f"GPU {gpu}: {reason}" if gpu is not None else reason
        self.advance()

    def note(self, text: str) -> None:
        self.note_hook(text)

    def document(self, gpu: str, folder: Path) -> dict:
        """`--format json`: `gemmbench.tune/1`, one entry per job, tuned or failed (docs/USAGE.md: JSON output)."""
        jobs = []
        for key, (p, v) in self.jobs.items():
            job = dict(variant=v.name, gemm=p.gemm, N=p.N, K=p.K, E=p.E, topk=p.topk, dtype=p.dtype, scaling=p.scaling,
                       fp8_accum=p.fp8_accum, bucket=p.M)  # fmt: skip
            if key in self.done:
                e = self.done[key]
                job.update(status="tuned", us=e["us"], config=e["config"], tried=e["tried"], file=e.get("file"),
                           before=e.get("before"), wrong_results=e.get("wrong", []),
                           trials=e.get("trials", []))  # fmt: skip
            else:
                job.update(status="failed", reason=self.failed.get(key, "not run"))
            jobs.append(job)
        return {"schema": "gemmbench.tune/1", "gpu": gpu, "folder": str(folder), "jobs": jobs}

    @staticmethod
    def before(entry: dict) -> str:
        """What a tuned job did to its bucket's stored config: "kept", "replaced", or "new" (none was stored)."""
        was = entry.get("before")
        return "new" if was is None else "kept" if was == entry["config"] else "replaced"

    def before_line(self) -> str:
        """How the tuned jobs left the configs stored before them, in one line."""
        counts = Counter(self.before(e) for e in self.done.values())
        return (f"{len(self.done)} tuned: {counts['kept']} kept the stored config, {counts['replaced']} replaced it, "
                f"{counts['new']} had none")  # fmt: skip

    def failure_lines(self) -> list[str]:
        return [f"failed: {v.name} {p.label}: {self.failed[k]}" for k, (p, v) in self.jobs.items() if k in self.failed]

    def wrong_lines(self) -> list[str]:
        """One line per tuned job where configs of the space computed a wrong result: a kernel bug in those configs,
        which the check kept out of the store, named so that it is fixed rather than silently searched around."""
        lines = []
        for k, (p, v) in self.jobs.items():
            wrong = self.done.get(k, {}).get("wrong") or []
            if wrong:
                first = " ".join(f"{name}={value}" for name, value in wrong[0]["config"].items())
                lines.append(f"wrong result: {v.name} {p.label}: {len(wrong)} config(s) of the search space failed "
                             f"the check (not stored), first {first}: {wrong[0]['error']}")  # fmt: skip
        return lines


# ---------------------------------------------------------------- the worker's side


def work(ctx, task: dict) -> None:
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
        trials, path, before = tuning.tune_and_store(
            variant.tunable, problem, inputs, ref,
            lambda: ctx.begin(key, "tune"),  # each candidate is a sign of life to the pool's watchdog
            task.get("budget_s", tuning.DEFAULT_BUDGET_S), task.get("exhaustive", False),
        )  # fmt: skip
    except tuning.TuningError as exc:  # no config runs it: the next job can still run
        ctx.result(key, [{"failed": key, "reason": str(exc)}])
        return
    except Exception as exc:  # noqa: BLE001 - a fault: this job's outcome, then the worker may have to go
        ctx.cache.clear()
        ctx.failed(key, lambda r: [{"failed": key, "reason": r}], "tune", exc)
        return
    best = trials[0]
    ctx.result(key, [{"done": key, "us": best.time_us, "config": best.config, "tried": len(trials), "file": str(path),
                      "before": before.to_dict() if before is not None else None,
                      "wrong": [{"config": x.config, "error": x.error} for x in trials if x.wrong],
                      "trials": [trial_entry(x) for x in trials]}])  # fmt: skip


def trial_entry(trial: tuning.Trial) -> dict:
    """One timed config as the JSON document lists it: what a tune tried and how each fared, so that a kept or
    replaced config can be explained (its time null where it failed; a finalist's spread says which of them tied)."""
    us = trial.time_us if math.isfinite(trial.time_us) else None
    spread = trial.spread if trial.retimed else None
    return {"config": trial.config, "us": us, "retimed": trial.retimed, "spread": spread, "error": trial.error or None}
