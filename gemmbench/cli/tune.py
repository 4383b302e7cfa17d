"""`gemmbench tune`: search the Triton variants' configs and store the winners (the work: gemmbench.configs.tuning, run in the
engine's workers by its `tune` task, engine/tasks/tune_task.py, which also holds the jobs, their cells and the sink).

A job is one (problem at its M bucket, variant), one cell of the engine: a faulting config costs only its job, and a
fresh worker carries on.  Each winner is its own JSON file, written atomically, so disjoint job sets (`--shard` on
several hosts, `--gpus` on one) never conflict and need no merge step."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import (
    err,
    fail,
    gpus_option,
    out,
    progress_bar,
    shard_option,
    warn,
    watchdog,
)  # fmt: skip
from gemmbench.cli.engines import Export, ExportForce, ExportOnly, export_plan
from gemmbench.cli.engines import export as export_files
from gemmbench.cli.formats import LayoutChoice, OutputFormat, print_json
from gemmbench.cli.options import (
    ENGINE,
    WHAT,
    CellTimeout,
    DocFormat,
    Dp,
    Dtype,
    Ep,
    Fp8Accum,
    Gpus,
    Layout,
    Plugins,
    Scaling,
    Seed,
    Shapes,
    Tp,
)  # fmt: skip
from gemmbench.engine import plan
from gemmbench.engine.pool import Pool, PoolError
from gemmbench.engine.worker_process import WorkerOptions

# the options only `tune` takes (those it shares: cli.options; --export: cli.engines), by --help panel
TuneVariants = Annotated[
    str, typer.Option(help="Comma-separated globs of tunable (Triton) variants.", rich_help_panel=WHAT)
]
TuneMs = Annotated[
    Optional[str],
    typer.Option(
        help="M values; each is tuned at its bucket (dense: 1..16 -> 16, then powers of 2; MoE: powers of 2, 24 -> 32).",
        rich_help_panel=WHAT,
    ),
]
SkipStored = Annotated[
    bool,
    typer.Option(
        help="Leave (variant, shape, M bucket)s that already have a stored config (else they are tuned again, the "
        "stored config in the race: kept unless beaten beyond the noise).",
        rich_help_panel=WHAT,
    ),
]
TimeBudget = Annotated[
    float,
    typer.Option(
        help="Seconds of fine search per (variant, shape, M bucket): after a coarse pass (the quick candidates and "
        "about 12 more), rounds around the best, each timed whole, until one finds nothing faster or this many "
        "seconds have passed since the coarse pass.",
        rich_help_panel=WHAT,
    ),
]
Exhaustive = Annotated[
    bool,
    typer.Option(
        help="Time every config of the full space (no time budget): slow; what the quick search is measured against.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
TuneShard = Annotated[
    Optional[str],
    typer.Option(
        help="Tune only shard I of N (0 <= I < N) of the jobs, e.g. $SLURM_ARRAY_TASK_ID/8; every host "
        "computes the same split, and configs are files, so there is nothing to merge.",
        rich_help_panel=ENGINE,
    ),  # fmt: skip
]


def tune(
    shapes: Shapes, variants: TuneVariants = "triton_*", dtype: Dtype = "fp8,bf16", m: TuneMs = None,
    scaling: Scaling = None, fp8_accum: Fp8Accum = None, plugin: Plugins = None, seed: Seed = 0,
    skip_stored: SkipStored = False, time_budget: TimeBudget = 10.0, exhaustive: Exhaustive = False,
    tp: Tp = "1", dp: Dp = "1", ep: Ep = "1", layout: Layout = LayoutChoice.vllm,
    export: Export = None, export_only: ExportOnly = False, force: ExportForce = False,
    gpus: Gpus = None, shard: TuneShard = None, cell_timeout: CellTimeout = None, fmt: DocFormat = OutputFormat.table,
) -> None:  # fmt: skip
    """Search each Triton variant's config space per (GPU, N, K, dtype, scaling, M bucket); store the winners as JSON."""
    from gemmbench.configs import config_files
    from gemmbench.results import shard as shard_mod  # not at --help (hashlib; tuning: yaml)

    if not time_budget > 0:
        raise fail(f"--time-budget {time_budget:g}: give the seconds of search per problem, more than 0")
    if (export_only or force) and export is None:
        raise fail(f"{'--export-only' if export_only else '--force'} goes with --export ENGINE DIR")
    shard_at, watchdog_s = shard_option(shard), watchdog(cell_timeout)
    problems, chosen = plan.tunable(
        shapes, variants, dtype, m, plan.deployment(tp, dp, ep, layout), plugin, warn, scaling, fp8_accum
    )
    exports = export_plan(export, shapes, problems, chosen) if export else ([], [])  # refused before tuning
    if export and export_only:
        export_files(export, exports, chosen, force, tuned=False)
        return
    gpu_ids, dev = _gpus_and_device(gpus)
    from gemmbench.engine.tasks import tune_task  # heavy (torch)

    jobs = tune_task.jobs(problems, chosen, dev)
    if not jobs:
        raise fail("no selected variant runs these problems here")
    total = len(jobs)
    if shard_at:  # split before --skip-stored: what is stored changes while the other shards run
        jobs = shard_mod.split_jobs(jobs, shard_at[1])[shard_at[0]]
        err.print(escape(f"shard {shard_at[0]}/{shard_at[1]}: {len(jobs)} of {total} jobs"), highlight=False)
    if skip_stored:
        jobs = [(p, v) for p, v in jobs if config_files.own_bucket(v.name, p, dev.name) is None]
    if not jobs:
        err.print("nothing to tune: " + ("every selected (variant, shape, M bucket) already has a stored config"
                                         if skip_stored else "the tune has fewer jobs than shards"))  # fmt: skip
        if export:
            export_files(export, exports, chosen, force, tuned=False)
        return
    title = f"tuned on {dev.name} (cold L2) -> {config_files.configs_root() / config_files.gpu_dirname(dev.name)}"
    title += f", shard {shard_at[0]}/{shard_at[1]} ({len(jobs)} of {total} jobs)" if shard_at else ""
    title += f", GPUs {','.join(map(str, gpu_ids))}" if gpu_ids else ""
    fine = f"a coarse pass, then fine rounds begun within {time_budget:g} s of its end"
    err.print(f"{len(jobs)} jobs, each {'every config of the full space' if exhaustive else fine}", highlight=False)
    report = _tune(jobs, seed, (time_budget, exhaustive), gpu_ids, WorkerOptions("cold", plugins=[Path(p).resolve() for p in plugin or []],
                                                      watchdog_s=watchdog_s))  # fmt: skip
    if fmt is OutputFormat.json:
        print_json(report.document(dev.name, config_files.configs_root() / config_files.gpu_dirname(dev.name)))
    else:
        out.print(_table(report, title))
    if report.done:
        err.print(report.before_line(), highlight=False)
    for line in report.failure_lines() + report.wrong_lines():
        err.print(escape(line), highlight=False, soft_wrap=True)
    if export:  # what failed to tune is not stored: the export writes what is
        export_files(export, exports, chosen, force, tuned=True)
    if report.failed:
        raise typer.Exit(1)


def _gpus_and_device(gpus: Optional[str]):
    """(the --gpus indices or None, the device the configs are for).  This process only counts the GPUs and reads
    their properties: it allocates and launches nothing, so a fault can only ever hit a worker."""
    import torch  # heavy, as device is

    from gemmbench.measure.device import detect

    ids = gpus_option(gpus)
    if not torch.cuda.is_available() or not torch.cuda.device_count():
        raise fail("gemmbench tune needs a CUDA GPU: configs are measured on, and stored for, one GPU")
    if ids is None:
        return None, detect()
    models = {i: detect(i) for i in ids}
    if len({d.name for d in models.values()}) > 1:  # configs are stored per GPU model: one tune, one folder
        raise fail(f"--gpus {gpus!r} mixes GPU models ({', '.join(f'{i}: {d.name}' for i, d in models.items())}); "
                   "configs are stored per model, so tune one model at a time")  # fmt: skip
    return ids, models[ids[0]]


def _tune(jobs: list, seed: int, search: tuple[float, bool], gpu_ids: Optional[list], worker: WorkerOptions):
    """Every job in the engine's workers (one per GPU), under one progress bar with the time left -> the TuneSink."""
    from gemmbench.engine.tasks import tune_task  # heavy (torch)

    with progress_bar(eta=True) as progress:
        bar = progress.add_task("tuning", total=len(jobs))
        report = tune_task.TuneSink.of(
            jobs,
            begin_hook=lambda text: progress.update(bar, description=escape(text)),
            advance=lambda: progress.advance(bar),
            note_hook=lambda text: progress.console.print(escape(text), highlight=False, soft_wrap=True),
        )
        try:
            with Pool(worker, report, gpu_ids) as pool:
                pool.run(tune_task.cells(jobs, seed, search))
        except PoolError as exc:
            progress.stop()
            raise fail(
                f"{exc} (the configs stored so far are kept: the same command with --skip-stored tunes the rest)"
            ) from None
        except KeyboardInterrupt:
            progress.stop()
            raise fail("interrupted: the configs stored so far are kept", 130) from None
        progress.update(bar, description="done")
    return report


def _table(report, title: str) -> Table:
    """The tuned jobs, one row each (TuneSink.done), in the jobs' order."""
    from gemmbench import dtypes  # not at --help

    results = Table(title=title)
    for col in ("variant", "GEMM", "N", "K", "dtype", "M bucket", "µs", "config", "tried", "before"):
        results.add_column(col)
    for key, (p, v) in report.jobs.items():
        if key in report.done:
            e = report.done[key]
            short = " ".join(f"{k}={val}" for k, val in e["config"].items() if k not in ("GROUP_M",))
            results.add_row(v.name, p.gemm, str(p.N), str(p.K), dtypes.label(p.dtype, p.scaling, p.fp8_accum), str(p.M),
                            f"{e['us']:.2f}", short, str(e["tried"]), report.before(e))  # fmt: skip
    return results
