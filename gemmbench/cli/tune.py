"""`gemmbench tune` (registered on cli.app): search the Triton variants' configs and store the winners; the work is
in gemmbench.tuning, the children of `--gpus` are driven by gemmbench.tune_multi.

A job is one (problem at its M bucket, variant).  Each winner is its own JSON file, written atomically, so disjoint
job sets (`--shard` on several hosts, `--gpus` on one) never conflict and need no merge step."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench import tune_multi
from gemmbench.cli.common import _dtypes, _load_plugins, _problems, _tp_list, err, fail, out, progress_bar


def tune(
    shapes: Annotated[str, typer.Option(help="Built-in shape set or a YAML path.")],
    variants: Annotated[str, typer.Option(help="Comma-separated globs of tunable (Triton) variants.")] = "triton_*",
    dtype: Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.")] = "fp8,bf16",
    m: Annotated[
        Optional[str], typer.Option(help="M values; each is tuned at its bucket (1..16 -> 16, then powers of 2).")
    ] = None,
    tp: Annotated[str, typer.Option(help="Tensor-parallel degrees, comma-separated, e.g. '1,2,4,8'.")] = "1",
    plugin: Annotated[
        Optional[list[Path]], typer.Option(help="Python file registering extra variants (repeatable).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    skip_stored: Annotated[
        bool, typer.Option(help="Leave (variant, shape, M bucket)s that already have a stored config.")
    ] = False,
    shard: Annotated[
        Optional[str],
        typer.Option(
            help="Tune only shard I of N (0 <= I < N) of the jobs, e.g. $SLURM_ARRAY_TASK_ID/8; every host computes the same split, and configs are files, so there is nothing to merge."
        ),
    ] = None,
    gpus: Annotated[
        Optional[str],
        typer.Option(
            help="Tune on these GPUs of this host at once, one child process each: 'all' or 0,1,... A faulting config costs only its job. With --shard, the shard's jobs are split across them."
        ),
    ] = None,
    worker_jobs: Annotated[
        Optional[Path],
        typer.Option(
            hidden=True,
            help="(a child of --gpus) JSON list of the job keys to tune; events go to stdout as JSON lines.",
        ),
    ] = None,
) -> None:
    """Search each Triton variant's config space per (GPU, N, K, dtype, M bucket); store the winners as JSON."""
    from gemmbench import shard as shard_mod
    from gemmbench import tuning

    try:
        shard_at = shard_mod.parse(shard) if shard is not None else None
    except shard_mod.ShardError as exc:
        raise fail(str(exc)) from None
    problems, chosen = _select(shapes, variants, dtype, m, tp, plugin)
    gpu_ids, dev = _gpus_and_device(gpus)
    jobs = _jobs(problems, chosen, dev)
    if worker_jobs is not None:
        raise typer.Exit(_worker(jobs, worker_jobs, seed))
    if not jobs:
        raise fail("no selected variant runs these problems here")
    total = len(jobs)
    if shard_at:  # split before --skip-stored: what is stored changes while the other shards run
        jobs = tune_multi.split_jobs(jobs, shard_at[1])[shard_at[0]]
        err.print(escape(f"shard {shard_at[0]}/{shard_at[1]}: {len(jobs)} of {total} jobs"), highlight=False)
        if not jobs:
            err.print("nothing to tune in this shard (the tune has fewer jobs than shards)")
            return
    if skip_stored:
        jobs = [
            (p, v) for p, v in jobs if not ((found := tuning.stored(v.name, p, dev.name)) and found[1]["bucket"] == p.M)
        ]
        if not jobs:
            err.print("every selected (variant, shape, M bucket) already has a stored config")
            return
    title = f"tuned on {dev.name} (cold L2) -> {tuning.configs_root() / tuning.gpu_dirname(dev.name)}"
    if shard_at:
        title += f", shard {shard_at[0]}/{shard_at[1]} ({len(jobs)} of {total} jobs)"
    if gpu_ids:
        title += f", GPUs {','.join(map(str, gpu_ids))}"
    report, fault = _tune(jobs, seed, gpu_ids, _child_command(shapes, variants, dtype, m, tp, plugin, seed))
    out.print(report.table(title))
    for line in report.failure_lines():
        err.print(escape(line), highlight=False, soft_wrap=True)
    if fault:
        raise fail(
            f"stopped after {fault}: a faulting kernel ends this process's CUDA context "
            "(configs stored so far are kept; with --gpus a fresh child would carry on)",
            1,
        )
    if report.failed:
        raise typer.Exit(1)


# ---------------------------------------------------------------- what to tune


def _select(shapes, variants, dtype, m, tp, plugin) -> tuple[list, list]:
    """(problems, tunable variants) of the options, or a one-line error."""
    from gemmbench import registry
    from gemmbench import shapes as shapes_mod

    tps = _tp_list(tp)
    try:
        sset = shapes_mod.load(shapes)
        m_values = shapes_mod.parse_m_list(m) if m is not None else None
        # configs are stored per shape, not per routing: tuned on uniform routing
        problems = _problems(sset, _dtypes(dtype), m_values, tps, ["uniform"])
        _load_plugins(plugin or [])
        chosen = [v for v in registry.select(variants) if v.tunable is not None]
    except (shapes_mod.ShapeError, registry.RegistryError) as exc:
        raise fail(str(exc)) from None
    if not chosen:
        raise fail(f"--variants {variants!r} selects no tunable variant (the Triton ones are)")
    return problems, chosen


def _gpus_and_device(gpus: Optional[str]):
    """(the --gpus indices or None, the device the configs are for).  The parent of --gpus only counts the GPUs
    and reads their properties: it allocates and launches nothing, so a fault can only ever hit a child."""
    import torch

    from gemmbench.multi import GpuError, parse_gpus

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ids = None
    if gpus is not None:
        try:
            ids = parse_gpus(gpus, count)
        except GpuError as exc:
            raise fail(str(exc)) from None
    if not count:
        raise fail("gemmbench tune needs a CUDA GPU: configs are measured on, and stored for, one GPU")
    from gemmbench.device import detect

    if ids is None:
        return None, detect()
    models = {i: detect(i) for i in ids}
    if len({d.name for d in models.values()}) > 1:  # configs are stored per GPU model: one tune, one folder
        raise fail(
            f"--gpus {gpus!r} mixes GPU models ({', '.join(f'{i}: {d.name}' for i, d in models.items())}); "
            "configs are stored per model, so tune one model at a time"
        )
    return ids, models[ids[0]]


def _jobs(problems: list, chosen: list, dev) -> list:
    """[(problem at its M bucket, variant)], in a fixed order: the parent, its children and every shard's host
    build this same list from the same options."""
    from gemmbench import tuning

    # M = 1..16 share a bucket, so they are tuned once
    seen, jobs = set(), []
    for p in problems:
        p = p.with_(M=tuning.m_bucket(p.M, p.is_moe))
        for v in chosen:
            key = tune_multi.job_key(p, v.name)
            if key not in seen and not v.unsupported_reason(p, dev):
                seen.add(key)
                jobs.append((p, v))
    return jobs


def _child_command(shapes, variants, dtype, m, tp, plugin, seed) -> list[str]:
    """The command that rebuilds this job list in a child (it gets --worker-jobs on top)."""
    cmd = [
        sys.executable,
        "-m",
        "gemmbench",
        "tune",
        "--shapes",
        shapes,
        "--variants",
        variants,
        "--dtype",
        dtype,
        "--tp",
        tp,
        "--seed",
        str(seed),
    ]
    if m is not None:
        cmd += ["--m", m]
    for p in plugin or []:
        cmd += ["--plugin", str(p.resolve())]
    return cmd


# ---------------------------------------------------------------- tuning them


def _tune_job(p, v, seed: int, cache: dict):
    """tuning.tune_and_store for one job -> (best trial, file, candidates tried).  The inputs and reference are
    shared by the variants of a problem (they come one after another)."""
    from gemmbench import tuning
    from gemmbench.check import reference
    from gemmbench.inputs import make_inputs

    if cache.get("key") != (p.label, v.fp8_scaling):
        inputs = make_inputs(p, seed, "cuda", scaling=v.fp8_scaling)
        cache.update(key=(p.label, v.fp8_scaling), inputs=inputs, ref=reference(p, inputs))
    return tuning.tune_and_store(v.tunable, p, cache["inputs"], cache["ref"])


def _tune_here(jobs: list, seed: int, emit: Callable[[dict], None]) -> Optional[str]:
    """Tunes `jobs` in this process, each reported as events (tune_multi's protocol).  Returns None, or the job
    that faulted: then the CUDA context is gone and nothing more can run in this process."""
    from gemmbench import tuning

    cache: dict = {}
    for p, v in jobs:
        key = tune_multi.job_key(p, v.name)
        emit({"begin": key})
        try:
            best, path, tried = _tune_job(p, v, seed, cache)
        except tuning.TuningError as exc:  # no config runs it: the next job can still run
            emit({"failed": key, "reason": str(exc)})
            continue
        except RuntimeError as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            emit({"failed": key, "reason": reason})
            return f"{v.name} {p.label}"
        emit({"done": key, "us": best.time_us, "config": best.config, "tried": tried, "file": str(path)})
    return None


def _worker(jobs: list, jobs_file: Path, seed: int) -> int:
    """A child of --gpus: the listed jobs, one JSON event per line on stdout.  Exit code 1 after a fault, so the
    parent starts a fresh child (with a fresh CUDA context) for the rest."""
    wanted = json.loads(jobs_file.read_text())
    by_key = {tune_multi.job_key(p, v.name): (p, v) for p, v in jobs}
    events = sys.stdout
    sys.stdout = sys.stderr  # a library's print must not land in the event stream

    def emit(event: dict) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()

    try:
        for key in wanted:
            if key not in by_key:
                emit({"failed": key, "reason": "not a job of these options here (the child built another job list)"})
        return 1 if _tune_here([by_key[k] for k in wanted if k in by_key], seed, emit) else 0
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout = events


class _Report:
    """The events of every job, from this process or from the children, as one progress bar and one table."""

    def __init__(self, jobs: list, progress):
        self.jobs = {tune_multi.job_key(p, v.name): (p, v) for p, v in jobs}
        self.order = list(self.jobs)
        self.done: dict = {}
        self.failed: dict = {}
        self.progress = progress
        self.bar = progress.add_task("tuning", total=len(jobs))

    def event(self, gpu: Optional[int], event: dict) -> None:
        where = f"GPU {gpu}: " if gpu is not None else ""
        if "begin" in event:
            p, v = self.jobs[event["begin"]]
            self.progress.update(self.bar, description=escape(f"{where}{p.label}  {v.name}"))
        elif "done" in event or "failed" in event:
            key = event.get("done", event.get("failed"))
            if "done" in event:
                self.done[key] = event
            else:
                self.failed[key] = event.get("reason", "")
            self.progress.advance(self.bar)
        elif "died" in event:
            self.note(f"{where}a child died ({event['died']}); a fresh one takes its {event['left']} remaining jobs")
        elif "lost" in event:
            self.note(
                f"{where}given up after {tune_multi.MAX_DEATHS} child deaths in a row ({event['lost']}); "
                f"its {event['left']} remaining jobs go to the GPUs still working, if any"
            )

    def note(self, line: str) -> None:
        self.progress.console.print(escape(line), highlight=False, soft_wrap=True)

    def table(self, title: str) -> Table:
        results = Table(title=title)
        for col in ("variant", "GEMM", "N", "K", "dtype", "M bucket", "µs", "config", "tried"):
            results.add_column(col)
        for key in self.order:
            if key in self.done:
                (p, v), e = self.jobs[key], self.done[key]
                short = " ".join(f"{k}={val}" for k, val in e["config"].items() if k not in ("GROUP_M",))
                results.add_row(
                    v.name, p.gemm, str(p.N), str(p.K), p.dtype, str(p.M), f"{e['us']:.2f}", short, str(e["tried"])
                )
        return results

    def failure_lines(self) -> list[str]:
        lines = []
        for key in self.order:
            if key in self.failed:
                p, v = self.jobs[key]
                lines.append(f"failed: {v.name} {p.label}: {self.failed[key]}")
        return lines


def _tune(jobs: list, seed: int, gpu_ids: Optional[list], command: list[str]) -> tuple[_Report, Optional[str]]:
    """Every job, here or (gpu_ids) in one child per GPU, under one progress bar -> (report, what faulted here)."""
    fault = None
    with progress_bar() as progress:
        report = _Report(jobs, progress)
        try:
            if gpu_ids:
                _tune_on_gpus(gpu_ids, command, report)
            else:
                fault = _tune_here(jobs, seed, lambda e: report.event(None, e))
        except KeyboardInterrupt:
            progress.stop()
            raise fail("interrupted: the configs stored so far are kept", 130) from None
        progress.update(report.bar, description="stopped" if fault else "done")
    return report, fault


def _tune_on_gpus(gpu_ids: list, command: list[str], report: _Report) -> None:
    import tempfile

    def split(keys: list, n: int) -> list:
        return [
            [tune_multi.job_key(p, v.name) for p, v in part]
            for part in tune_multi.split_jobs([report.jobs[k] for k in keys], n)
        ]

    with tempfile.TemporaryDirectory(prefix="gemmbench-tune-") as folder:
        tune_multi.run_jobs(gpu_ids, list(report.jobs), tune_multi.spawner(command, Path(folder)), split, report.event)
