"""`gemmbench run`: check, then time, every variant on every problem of a shape set (the work: gemmbench.engine.sweep)."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.markup import escape

from gemmbench.cli import ab as ab_mod
from gemmbench.cli import compare as cli_compare
from gemmbench.cli import run_setup as setup
from gemmbench.cli.common import (
    err,
    fail,
    gpus_option,
    out,
    positive_budget,
    progress_bar,
    shard_option,
    warn,
    watchdog,
)  # fmt: skip
from gemmbench.cli.dry_run import DEFAULT_GPU, DryRun, print_dry_run
from gemmbench.cli.engines import import_configs
from gemmbench.cli.formats import InputValues, OutputFormat, choice, format_option, print_json
from gemmbench.cli.options import (
    COMPARISON,
    ENGINE,
    OUTPUT,
    TIMING,
    WHAT,
    AcrossGpus,
    Borrow,
    CellTimeout,
    Dp,
    Dtype,
    Ep,
    Force,
    Fp8Accum,
    GpuName,
    Gpus,
    ImportConfig,
    Layout,
    Ms,
    Plugins,
    Routing,
    Scaling,
    Seed,
    Shapes,
    Tp,
    Variants,
)  # fmt: skip
from gemmbench.cli.request import SweepRequest as R
from gemmbench.engine import plan, sweep_fingerprint
from gemmbench.engine.pool import PoolError
from gemmbench.engine.worker_process import WorkerOptions
from gemmbench.measure import timing_modes
from gemmbench.measure.timing_modes import TimingMode

# the options only `run` takes (those it shares: cli.options), by --help panel
Retune = Annotated[
    bool, typer.Option(help="Ignore stored Triton configs; tune each problem anew (not stored).", rich_help_panel=WHAT)
]
NoStore = Annotated[
    bool,
    typer.Option(
        "--no-store",
        help="Keep the winners of the run's quick searches in this process only; by default they are stored in the "
        "user's config folder, and the next run runs them.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
NoOwn = Annotated[
    bool,
    typer.Option(
        "--no-own",
        help="Skip this GPU's own stored Triton configs (shipped, tuned or searched): what searching (or, with "
        "--borrow, borrowing) gives here.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
Timing = Annotated[
    TimingMode,
    typer.Option(parser=choice(TimingMode, "--timing"), help=timing_modes.help_text(), rich_help_panel=TIMING),
]
Inputs = Annotated[
    InputValues,
    typer.Option(
        parser=choice(InputValues, "--inputs"),
        help="The values the timed calls run on, each with mean 1/sqrt(K): randn ((randn+1)/sqrt(K)), uniform "
        "(U(0,2)/sqrt(K)), ones (1/sqrt(K)); values move a GEMM's power and clocks. The check always runs on randn.",
        rich_help_panel=TIMING,
    ),  # fmt: skip
]
Budget = Annotated[
    float,
    typer.Option(help="Seconds of sampling per cell at most (after >= 10 samples).", rich_help_panel=TIMING),
]
Repeat = Annotated[
    int,
    typer.Option(
        help="Run the sweep N times, one after another, each in fresh worker processes, into one file (rows carry "
        "`process` 0..N-1); `gemmbench compare` tests per-process medians where both sides have >= 3.",
        rich_help_panel=TIMING,
    ),  # fmt: skip
]
Out = Annotated[
    Optional[Path],
    typer.Option(
        "--out",
        help="Folder for <run_id>.parquet, or a .parquet file path. [default: results]",
        rich_help_panel=OUTPUT,
    ),
]
Format = Annotated[
    OutputFormat,
    format_option(
        "table: one table per GEMM; json: one JSON document of every cell on stdout (docs/USAGE.md: JSON output).",
        panel=OUTPUT,
    ),
]
Wide = Annotated[
    bool,
    typer.Option(
        help="Tables with every column (those empty or of one value too), the skipped rows in them, and the legend "
        "under each.",
        rich_help_panel=OUTPUT,
    ),  # fmt: skip
]
Append = Annotated[
    bool,
    typer.Option(
        help="Add this sweep's rows to an existing --out file (a gemmbench run file).", rich_help_panel=OUTPUT
    ),
]
Resume = Annotated[
    Optional[Path],
    typer.Option(
        help="Finish an interrupted run: skip the cells this run file already has (same problem, variant, "
        "timing mode and gemmbench build) and add the rest to it.",
        rich_help_panel=OUTPUT,
    ),  # fmt: skip
]
CompareTo = Annotated[
    Optional[str],
    typer.Option(
        help="Then compare with this baseline (a name, as `gemmbench baseline list` shows, or a path); exit 1 on a "
        "regression.",
        rich_help_panel=COMPARISON,
    ),  # fmt: skip
]
Ab = Annotated[
    Optional[str],
    typer.Option(
        "--ab",
        metavar="BASELINE_COMMAND",
        help="Interleave --repeat N processes of this command's gemmbench (another build, e.g. "
        "'/other/venv/bin/gemmbench') with N of this one, A B A B ..., run with the same sweep options; its rows go to "
        "<out>-baseline.parquet, then compared with this run's.",
        rich_help_panel=COMPARISON,
    ),  # fmt: skip
]
RunShard = Annotated[
    Optional[str],
    typer.Option(
        help="Run only shard I of N (0 <= I < N) of the cells, e.g. $SLURM_ARRAY_TASK_ID/8; join the parts "
        "with `gemmbench merge`.",
        rich_help_panel=ENGINE,
    ),  # fmt: skip
]
Sanitize = Annotated[
    bool, typer.Option(help="Run each check under compute-sanitizer memcheck first.", rich_help_panel=ENGINE)
]
Strict = Annotated[
    bool, typer.Option(help="Exit 1 if any cell is wrong, impossible or failed.", rich_help_panel=ENGINE)
]


def run(
    shapes: Shapes, variants: Variants = R.variants, dtype: Dtype = R.dtype, m: Ms = R.m, routing: Routing = R.routing,
    scaling: Scaling = R.scaling, fp8_accum: Fp8Accum = R.fp8_accum, plugin: Plugins = None,
    import_config: ImportConfig = None, retune: Retune = R.retune, borrow: Borrow = R.borrow,
    no_store: NoStore = R.no_store, no_own: NoOwn = R.no_own, gpu: GpuName = None, seed: Seed = R.seed, tp: Tp = R.tp,
    dp: Dp = R.dp, ep: Ep = R.ep, layout: Layout = R.layout, timing: Timing = R.timing, inputs: Inputs = R.inputs,
    budget: Budget = R.budget, repeat: Repeat = 1, out_path: Out = None, fmt: Format = OutputFormat.table, wide: Wide = False,
    append: Append = False, force: Force = False, resume: Resume = None, dry_run: DryRun = False,
    compare_to: CompareTo = None, across_gpus: AcrossGpus = False, ab: Ab = None, gpus: Gpus = R.gpus,
    shard: RunShard = R.shard, cell_timeout: CellTimeout = R.cell_timeout, sanitize: Sanitize = R.sanitize,
    strict: Strict = False,
) -> None:  # fmt: skip
    """Check, then time, every variant on every problem of a shape set; write Parquet and print tables."""
    request = R.of(locals())  # the sweep as asked: what --ab gives the baseline build
    as_json = fmt is OutputFormat.json
    if dry_run:  # nothing written, nothing run, no GPU needed
        return _dry_run(request, gpu, as_json)
    if gpu is not None:
        raise fail("--gpu goes with --dry-run: a run measures the GPU it runs on")
    dest = _Destination(setup.results_path(out_path, resume), append, force, resume, compare_to)
    baseline_cmd = _refuse_before_work(dest, repeat, ab)  # parse: what cannot go together, before any work
    sset, cells, imported = _plan(request)  # plan: the cells of the sweep
    opened = _open(request, dest, sset, cells, imported, as_json)  # open: the file, locked, and the workers' options
    if opened is None:  # nothing left to run: said, and done
        return None
    writer, run_id, cells, worker = opened
    ab_args = _baseline_args(baseline_cmd, request.options())  # every sweep option its build has (cli.ab.sweep_args)
    options = lambda process: sweep_options(request, run_id, worker, process)  # noqa: E731
    resumable = repeat == 1 and baseline_cmd is None and not append  # what --resume can finish
    rows, stopped, process, joined = _processes(repeat, baseline_cmd, ab_args, options, cells, writer, resumable)
    rows = _last_process(rows, run_id, repeat, process)
    _show(rows, run_id, writer, stopped, as_json, wide)  # show: the tables, the comparison, the summary
    # under --format json stdout holds the run's document only: the comparison goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        code = cli_compare.compare_after_run(str(joined) if joined else compare_to, writer.path, across_gpus)
    _summary(rows, writer.path, strict)
    if code:
        raise typer.Exit(code)


@dataclass(frozen=True)
class _Destination:
    """Where a run's rows go and what it may do to what is there."""

    path: Path
    append: bool
    force: bool
    resume: Optional[Path]
    compare_to: Optional[str]


def _dry_run(request: R, gpu: Optional[str], as_json: bool) -> None:
    """`--dry-run`: the cells, for this machine's GPU, --gpu NAME, or an H200 from the parts table."""
    from gemmbench.cli.target_gpu import target_gpu
    from gemmbench.configs.config_sources import Policy

    sset, cells, _, dep = _cells(request)
    target = target_gpu(gpu) or target_gpu(DEFAULT_GPU)
    print_dry_run(sset, cells, dep, as_json, target, Policy(borrow=request.borrow, own=not request.no_own))


def _refuse_before_work(dest: _Destination, repeat: int, ab: Optional[str]) -> Optional[list[str]]:
    """Every refusal that needs no cell: results it would replace, options that do not go together; --ab's argv."""
    setup.refuse_before_work(dest.path, dest.append, dest.force, dest.resume, dest.compare_to)
    setup.check_repeat(repeat, dest.resume)
    return setup.check_ab(ab, dest.compare_to, dest.append, dest.resume, dest.path, dest.force)


def _plan(request: R) -> tuple:
    """(shape set, cells, the imported configs' environment), after refusing in one line the options a sweep checks
    before any work (budget, cell timeout, shard, --gpus)."""
    q = request
    positive_budget(q.budget)
    watchdog(q.cell_timeout, q.budget)
    shard_option(q.shard)
    gpus_option(q.gpus)
    sset, cells, imported, _ = _cells(q)
    return sset, cells, imported


def _cells(request: R) -> tuple:
    """(shape set, cells, the imported configs' environment, deployment): engine/plan.py's cells of the request, the
    imported variants among them."""
    q = request
    variants, imported = import_configs(list(q.import_config), q.variants)
    dep = plan.deployment(q.tp, q.dp, q.ep, q.layout)
    sset, cells = plan.cells(q.shapes, variants, q.dtype, q.m, q.routing, q.seed, list(q.plugin), dep, warn, q.scaling,
                             q.fp8_accum)  # fmt: skip
    return sset, cells, imported, dep


def _open(request: R, dest: _Destination, sset, cells: list, imported: dict, as_json: bool) -> Optional[tuple]:
    """The run file opened (new, --append, --force or --resume), its sweep's fingerprint in it, and the workers'
    options -> (writer, run id, the cells still to run, WorkerOptions); None where no cell is left (said)."""
    from gemmbench.configs.config_sources import Policy
    from gemmbench.results import store

    q = request
    shard_at = shard_option(q.shard)
    meta, cells = _shard(cells, shard_at)
    mode = q.timing.value if _on_gpu() else timing_modes.CPU  # no CUDA events on a CPU
    setup.comparable_baseline(dest.compare_to, mode, q.inputs.value)
    run_id = store.new_run_id(sset.name) + (f"-shard{shard_at[0]}of{shard_at[1]}" if shard_at else "")
    policy = Policy(borrow=q.borrow, store=not q.no_store, own=not q.no_own)
    fp = setup.fingerprint(sset, cells, mode, q.inputs.value, q.budget, q.seed, q.sanitize, q.retune, list(q.plugin),
                           list(q.import_config), policy)  # fmt: skip
    meta = {**(meta or {}), **sweep_fingerprint.encode(fp)}
    setup.check_resume(dest.resume, fp)
    cpu = setup.cpu_path(cells, q.sanitize)  # refused before anything is written
    writer, run_id, cells = setup.open_run(dest.path, run_id, meta, cells, mode, dest.append, dest.force, dest.resume)
    if cpu and cells:
        _say_cpu_path()
    if not cells:
        _nothing_to_run(writer, meta, dest.resume, q.shard, run_id, as_json)
        return None
    worker = WorkerOptions(mode, q.budget, inputs=q.inputs.value, plugins=list(q.plugin), cpu=cpu, retune=q.retune,
                           ceilings=not cpu, env={**imported, **policy.env()},
                           watchdog_s=watchdog(q.cell_timeout, q.budget))  # fmt: skip
    return writer, run_id, cells, worker


def sweep_options(request: R, run_id: str, worker: WorkerOptions, process: int):
    """engine.sweep.SweepOptions of one of the --repeat processes."""
    from gemmbench.engine import sweep  # heavy (pandas; torch)

    return sweep.SweepOptions(run_id, worker, request.seed, request.sanitize, gpus_option(request.gpus), process)


def _nothing_to_run(
    writer, meta: dict, resume: Optional[Path], shard: Optional[str], run_id: str, as_json: bool
) -> None:
    """The end of a run with no cell left: a resumed sweep killed after its last part (its parts become the file), or
    a shard of a sweep with fewer cells than shards (an empty part still tells merge this shard ran)."""
    from gemmbench.results import store

    if resume is not None:
        writer.close()
        err.print(escape(f"--resume: every cell is already in {writer.path}; nothing to run"), highlight=False)
        rows = writer.rows
    else:
        store.write_rows(writer.path, [], meta)
        err.print(escape(f"shard {shard}: no cells (the sweep has fewer cells than shards). Results: {writer.path}"))
        rows = []
    if as_json:
        _print_json(run_id, writer.path, rows, False)


def _baseline_args(baseline_cmd: Optional[list[str]], options: list) -> list[str]:
    """The sweep options a --ab baseline process is given: those of `options` ((flag, value, default)) its build
    lists (cli.ab.sweep_args); none without --ab."""
    try:
        known = ab_mod.baseline_options(baseline_cmd) if baseline_cmd else None
        return ab_mod.sweep_args(options, known)
    except ab_mod.AbError as exc:
        raise fail(f"--ab: {exc}") from None


def _processes(repeat: int, baseline_cmd, ab_args: list[str], options, cells: list, writer, resumable: bool) -> tuple:
    """The --repeat processes of this build's sweep (`options(process)`: its sweep.SweepOptions), with --ab each
    after one of the baseline build's -> (the file's rows, whether Ctrl-C or SIGINT stopped them, the last process,
    the joined baseline file: None without --ab or where no baseline process ended)."""
    with tempfile.TemporaryDirectory(prefix="gemmbench-ab-") as parts_dir:
        parts: list[Path] = []
        stopped, process = False, 0
        rows: list[dict] = []
        for side, process in ab_mod.order(repeat) if baseline_cmd else [("", p) for p in range(repeat)]:
            if repeat > 1 or baseline_cmd:
                err.print(escape(f"process {process + 1} of {repeat}{f' ({side})' if side else ''}"), highlight=False)
            if side == ab_mod.BASELINE:
                parts.append(Path(parts_dir) / f"baseline-{process}.parquet")
                try:
                    ab_mod.run_baseline(baseline_cmd, ab_args, parts[-1])
                except ab_mod.AbError as exc:
                    raise fail(f"--ab: {exc} ({writer.added} candidate rows in {writer.path})") from None
                except KeyboardInterrupt:  # Ctrl-C or SIGINT during a baseline process (subprocess.run killed it)
                    stopped = True
                    break
                continue
            # N sweeps one after another, each with fresh workers: N fresh processes a cell
            rows, stopped = _sweep(options(process), cells, writer, resumable)
            if stopped:
                break
        return rows, stopped, process, _join_baseline(parts, writer.path) if baseline_cmd else None


def _join_baseline(parts: list[Path], path: Path) -> Optional[Path]:
    """The baseline processes that ended (an interrupted run keeps them) joined beside the run file, or None."""
    from gemmbench.results import store  # heavy (pandas)

    finished = [p for p in parts if p.is_file() or store.parts_dir(p).is_dir()]
    if not finished:
        return None
    joined = ab_mod.baseline_path(path)
    n = ab_mod.join_baseline(finished, joined)
    err.print(escape(f"--ab: {n} baseline rows of {len(finished)} processes in {joined}"), highlight=False)
    return joined


def _last_process(rows: list, run_id: str, repeat: int, process: int) -> list:
    """The rows the tables and the summary show: with --repeat the last process's (the file holds every process's)."""
    if repeat == 1:
        return rows
    err.print(f"tables: process {process} of 0..{repeat - 1} (every process's rows are in the file)")
    return [r for r in rows if r["run_id"] == run_id and r["process"] == process]


def _show(rows: list, run_id: str, writer, stopped: bool, as_json: bool, wide: bool = False) -> None:
    """The run's tables (or its JSON document); then, where Ctrl-C or SIGINT stopped it, one line and exit 130."""
    from gemmbench.cli import configs_used
    from gemmbench.results.tables import (
        gemm_tables,
        legends,
        scaling_excluded_count,
    )  # not at --help (yaml, importlib.metadata)

    if as_json:
        _print_json(run_id, writer.path, rows, stopped)
    else:
        for doc in configs_used.summarize(rows):
            out.print(escape(configs_used.line(doc)), highlight=False, soft_wrap=True)
        for table in gemm_tables(rows, wide):
            out.print(table)
        for legend in [] if wide else legends(rows):  # once, under the tables
            out.print(escape(legend), highlight=False, style="dim")
        hidden = scaling_excluded_count(rows)
        if hidden:
            out.print(f"{hidden} skipped rows, of variants that run another fp8 scaling or accumulation, are in the file "
                      "only (--scaling row or block, --fp8-accum precise run them)", highlight=False)  # fmt: skip
    if stopped:  # the finished rows are on disk, and their tables above
        done = f"{writer.added} finished rows in {writer.path}" if writer.added else "no cell finished; nothing written"
        raise fail(f"interrupted: {done}", 130)


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _shard(cells: list, shard_at: Optional[tuple[int, int]]) -> tuple[Optional[dict], list]:
    """(the part file's metadata, this shard's cells); the whole sweep when not sharded."""
    from gemmbench.results import shard  # not at --help (hashlib)

    if not shard_at:
        return None, cells
    meta = {shard.META_KEY: json.dumps(shard.metadata(cells, *shard_at)).encode()}
    return meta, shard.partition(cells, shard_at[1])[shard_at[0]]


def _say_cpu_path() -> None:
    err.print(
        "[bold yellow]No CUDA GPU: CPU path.[/] Baselines run torch's CPU matmul on one thread, Triton variants run "
        "in Triton's interpreter; timings are CPU wall-clock times, not GPU numbers.",
        highlight=False,
    )


def _sweep(opts, cells: list, writer, resumable: bool = True) -> tuple[list, bool]:
    """gemmbench.engine.sweep.run under one progress bar -> (the file's rows, whether Ctrl-C stopped it); a sweep that
    cannot go on is one line, its rows kept."""
    from gemmbench.engine import sweep  # heavy (torch, pandas)
    from gemmbench.measure import device
    from gemmbench.results import store

    with progress_bar(eta=True) as progress:
        bar = progress.add_task(
            "starting workers" if opts.gpus else "starting worker", total=sum(len(n) for _, n in cells)
        )

        def note(text: str) -> None:
            progress.console.print(escape(text), highlight=False)

        build_changed = _build_watch(device.git_sha(), note)

        def row_done(row: dict) -> None:
            build_changed(row)
            progress.advance(bar)

        hooks = sweep.Progress(
            row=row_done, begin=lambda what: progress.update(bar, description=escape(what)), note=note
        )
        try:
            try:
                sweep.run(cells, opts, writer, hooks)
            finally:  # the finished rows as one file, whatever stopped the sweep (a full disk keeps its parts)
                writer.close()
        except PoolError as exc:
            rest = f"; --resume {writer.path} runs the rest" if writer.rows and resumable else ""
            raise fail(f"{exc} ({len(writer.rows)} rows saved to {writer.path}{rest})") from None
        except OSError as exc:  # the results file could not be written (a full disk, say): the parts written stay
            lost = f"; {writer.unwritten} rows measured last could not be written" if writer.unwritten else ""
            raise fail(f"cannot write {writer.path}: {exc.strerror or exc}; the sweep stopped there, the rows written "
                       f"so far are in {store.parts_dir(writer.path)}{lost} (--resume {writer.path} finishes the "
                       "sweep)") from None  # fmt: skip
        except KeyboardInterrupt:
            progress.stop()
            return writer.rows, True
        progress.update(bar, description="done")
    return writer.rows, False


def _build_watch(started: Optional[str], note: Callable[[str], None]) -> Callable[[dict], None]:
    """A check of each row's build against the one the sweep started with: a worker started after gemmbench's
    source changed (a kernel edited beside a long sweep, then a worker restarted after a crash) measures the new
    source and stamps its build; one line per new build says so, since the run's file then holds both."""
    seen = {started}

    def check(row: dict) -> None:
        build = row.get("git_sha")
        if build not in seen:
            seen.add(build)
            note(f"gemmbench's source changed while this sweep ran: rows from {row.get('gemm')} M={row.get('M')} "
                 f"{row.get('variant')} on were measured by build {build}, the sweep began with {started}; the "
                 "file holds both (its git_sha column says which)")  # fmt: skip

    return check


def _print_json(run_id: str, path: Path, rows: list, interrupted: bool) -> None:
    """`--format json`: the run's document on stdout (docs/USAGE.md: JSON output): `tables.summary` of the file's rows, as
    the tables show them (with --append or --resume the rows it held before too)."""
    from gemmbench.cli.configs_used import summarize
    from gemmbench.results.tables import status_counts, summary  # not at --help (yaml, importlib.metadata)

    print_json({"schema": "gemmbench.run/1", "run_id": run_id, "file": str(path), "interrupted": interrupted,
                "counts": status_counts(rows), "configs": summarize(rows), "cells": summary(rows)})  # fmt: skip


def _summary(rows, path, strict: bool) -> None:
    from gemmbench.results.run_schema import FAILING  # not at --help (pyarrow)
    from gemmbench.results.tables import status_counts  # not at --help (yaml, importlib.metadata)

    counts = status_counts(rows)
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    err.print(f"{len(rows)} cells: {parts}.  Results: {escape(str(path))}", highlight=False)
    bad = sum(counts.get(s, 0) for s in FAILING)
    if bad:
        err.print(f"[bold red]{bad} cell(s) wrong, impossible or failed[/]: see the status column (never ranked, never "
                  "in a speedup)")  # fmt: skip
        if strict:
            raise typer.Exit(1)
