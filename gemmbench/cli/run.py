"""`gemmbench run`: check, then time, every variant on every problem of a shape set (the work: gemmbench.engine.sweep)."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gemmbench.cli import ab as ab_mod
from gemmbench.cli import compare as cli_compare
from gemmbench.cli.common import (
    CellTimeout,
    Dp,
    Dtype,
    Ep,
    Layout,
    Ms,
    Plugins,
    Routing,
    Scaling,
    Seed,
    Shapes,
    Tp,
    Variants,
    cpu_too_large,
    deployment,
    err,
    fail,
    gpus_option,
    lock_output,
    out,
    output_path,
    positive_budget,
    progress_bar,
    select_cells,
    shard_option,
    watchdog,
)  # fmt: skip
from gemmbench.cli.dry_run import DryRun, print_dry_run
from gemmbench.cli.engines import ImportConfig, import_configs
from gemmbench.cli.formats import LayoutChoice, OutputFormat, choice, format_option, print_json
from gemmbench.engine import sweep_fingerprint
from gemmbench.engine.pool import PoolError
from gemmbench.engine.worker_process import WorkerOptions
from gemmbench.measure.timing_modes import TimingMode
from gemmbench.results import named_baselines

Timing = Annotated[
    TimingMode,
    typer.Option(
        parser=choice(TimingMode, "--timing"),
        help="cold (L2 emptied by a read), stream (CUDA graph over distinct copies), graph, wall, "
        "cupti (kernel durations only, from CUPTI activity records, L2 emptied).",
    ),
]
Format = Annotated[
    OutputFormat,
    format_option(
        "table: one table per GEMM; json: one JSON document of every cell on stdout (docs/USAGE.md: JSON output)."
    ),
]
Out = Annotated[
    Optional[Path],
    typer.Option("--out", help="Folder for <run_id>.parquet, or a .parquet file path. [default: results]"),
]
Sanitize = Annotated[bool, typer.Option(help="Run each check under compute-sanitizer memcheck first.")]
Budget = Annotated[float, typer.Option(help="Seconds of sampling per cell at most (after >= 10 samples).")]
Strict = Annotated[bool, typer.Option(help="Exit 1 if any cell is wrong or failed.")]
Retune = Annotated[bool, typer.Option(help="Ignore stored Triton configs; tune each problem anew (not stored).")]
CompareTo = Annotated[
    Optional[str],
    typer.Option(
        help="Then compare with this baseline (a name, as `gemmbench baseline list` shows, or a path); exit 1 on a "
        "regression."
    ),  # fmt: skip
]
Gpus = Annotated[
    Optional[str], typer.Option(help="Run on these GPUs of this host at once, one worker each: 'all' or 0,1,...")
]
Append = Annotated[bool, typer.Option(help="Add this sweep's rows to an existing --out file (a gemmbench run file).")]
Force = Annotated[bool, typer.Option(help="Replace an existing --out file.")]
Resume = Annotated[
    Optional[Path],
    typer.Option(
        help="Finish an interrupted run: skip the cells this run file already has (same problem, variant, "
        "timing mode and gemmbench build) and add the rest to it."
    ),  # fmt: skip
]
Repeat = Annotated[
    int,
    typer.Option(
        help="Run the sweep N times, one after another, each in fresh worker processes, into one file (rows carry "
        "`process` 0..N-1); `gemmbench compare` tests per-process medians where both sides have >= 3."
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
    ),  # fmt: skip
]
AcrossGpus = Annotated[
    bool, typer.Option(help="--compare-to: compare cells run on different physical GPUs (else they are other-gpu).")
]
RunShard = Annotated[
    Optional[str],
    typer.Option(
        help="Run only shard I of N (0 <= I < N) of the cells, e.g. $SLURM_ARRAY_TASK_ID/8; join the parts "
        "with `gemmbench merge`."
    ),  # fmt: skip
]


def run(
    shapes: Shapes, variants: Variants = None, dtype: Dtype = "fp8,bf16", m: Ms = None, tp: Tp = "1",
    timing: Timing = TimingMode.cold, out_path: Out = None, plugin: Plugins = None,
    sanitize: Sanitize = False, seed: Seed = 0, budget: Budget = 0.5, strict: Strict = False, retune: Retune = False,
    routing: Routing = "uniform", compare_to: CompareTo = None, shard: RunShard = None, gpus: Gpus = None,
    append: Append = False, force: Force = False, resume: Resume = None, ep: Ep = "1", scaling: Scaling = None,
    import_config: ImportConfig = None, fmt: Format = OutputFormat.table, repeat: Repeat = 1,
    across_gpus: AcrossGpus = False, ab: Ab = None, dp: Dp = "1", layout: Layout = LayoutChoice.vllm,
    dry_run: DryRun = False, cell_timeout: CellTimeout = None,
) -> None:  # fmt: skip
    """Check, then time, every variant on every problem of a shape set; write Parquet and print tables."""
    from gemmbench.engine import sweep  # heavy (pandas; torch); tables not at --help (yaml, importlib.metadata)
    from gemmbench.results import store
    from gemmbench.results.tables import gemm_tables, scaling_excluded_count

    timing, budget, as_json = timing.value, positive_budget(budget), fmt is OutputFormat.json
    dep, watchdog_s = deployment(tp, dp, ep, layout), watchdog(cell_timeout, budget)
    if dry_run:  # nothing written, nothing run, no GPU needed
        variants, _ = import_configs(import_config, variants)
        sset, cells = select_cells(shapes, variants, dtype, m, routing, seed, plugin, dep, scaling)
        print_dry_run(sset, cells, dep, as_json)
        return
    shard_at, gpu_ids = shard_option(shard), gpus_option(gpus)
    if resume is not None and out_path is not None:  # a resumed run goes on in its own file
        raise fail("--resume writes into the file it resumes: give --resume or --out, not both")
    out_path = out_path or Path("results")
    _refuse_before_work(out_path, append, force, resume, compare_to)
    _check_repeat(repeat, resume)
    baseline_cmd = _check_ab(ab, compare_to, append, resume, out_path, force)
    variants, imported = import_configs(import_config, variants)  # the imported variants always run
    sset, cells = select_cells(shapes, variants, dtype, m, routing, seed, plugin, dep, scaling)
    meta, cells = _shard(cells, shard_at)
    timing = timing if _on_gpu() else "wall"  # no CUDA events on a CPU
    _comparable_baseline(compare_to, timing)
    run_id = store.new_run_id(sset.name) + (f"-shard{shard_at[0]}of{shard_at[1]}" if shard_at else "")
    fp = _fingerprint(sset, cells, timing, budget, seed, sanitize, retune, plugin, import_config)
    meta = {**(meta or {}), **sweep_fingerprint.encode(fp)}
    _check_resume(resume, fp)
    cpu = _cpu_path(cells, sanitize)  # refused before anything is written
    writer, run_id, cells = _writer(out_path, run_id, meta, cells, timing, append, force, resume)
    if cpu and cells:
        _say_cpu_path()
    if not cells and resume is not None:
        writer.close()  # a sweep killed after its last part: its parts become the file
        err.print(escape(f"--resume: every cell is already in {writer.path}; nothing to run"), highlight=False)
        if as_json:
            _print_json(run_id, writer.path, writer.rows, False)
        return
    if not cells:  # more shards than cells: an empty part still tells merge this shard ran
        store.write_rows(writer.path, [], meta)
        err.print(escape(f"shard {shard}: no cells (the sweep has fewer cells than shards). Results: {writer.path}"))
        if as_json:
            _print_json(run_id, writer.path, [], False)
        return
    worker = WorkerOptions(timing, budget, plugins=plugin or [], cpu=cpu, retune=retune, ceilings=not cpu, env=imported,
                           watchdog_s=watchdog_s)  # fmt: skip
    # what a baseline process is given: every sweep option its build has (cli.ab.sweep_args)
    try:
        known = ab_mod.baseline_options(baseline_cmd) if baseline_cmd else None
    except ab_mod.AbError as exc:
        raise fail(f"--ab: {exc}") from None
    ab_options = [
        ("--shapes", shapes, None), ("--variants", variants, None), ("--dtype", dtype, "fp8,bf16"), ("--m", m, None),
        ("--tp", tp, "1"), ("--timing", timing, None), ("--plugin", [str(f) for f in plugin or []], []),
        ("--seed", seed, 0), ("--budget", budget, 0.5), ("--retune", retune, False), ("--routing", routing, "uniform"),
        ("--shard", shard, None), ("--gpus", gpus, None), ("--ep", ep, "1"), ("--scaling", scaling, None),
        ("--dp", dp, "1"), ("--layout", str(layout), "vllm"), ("--cell-timeout", cell_timeout, None),
        ("--import-config", import_config or [], []), ("--sanitize", sanitize, False),
    ]  # fmt: skip
    try:
        ab_args = ab_mod.sweep_args(ab_options, known)
    except ab_mod.AbError as exc:
        raise fail(f"--ab: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="gemmbench-ab-") as parts_dir:
        parts: list[Path] = []
        stopped, rows = False, []
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
            opts = sweep.SweepOptions(run_id, worker, seed, sanitize, gpu_ids, process)
            rows, stopped = _sweep(opts, cells, writer)
            if stopped:
                break
        finished = [p for p in parts if p.is_file()]  # an interrupted run keeps the baseline processes that ended
        if baseline_cmd and finished:
            compare_to = str(ab_mod.baseline_path(writer.path))
            n = ab_mod.join_baseline(finished, Path(compare_to))
            err.print(escape(f"--ab: {n} baseline rows of {len(finished)} processes in {compare_to}"), highlight=False)
    if repeat > 1:  # the tables and the summary show the last process's rows; the file holds every process's
        rows = [r for r in rows if r["run_id"] == run_id and r["process"] == process]
        err.print(f"tables: process {process} of 0..{repeat - 1} (every process's rows are in the file)")
    if as_json:
        _print_json(run_id, writer.path, rows, stopped)
    else:
        for table in gemm_tables(rows):
            out.print(table)
        hidden = scaling_excluded_count(rows)
        if hidden:
            out.print(f"{hidden} skipped rows not shown: variants that run another fp8 scaling (--scaling row or "
                      "block runs them; the rows are in the file)", highlight=False)  # fmt: skip
    if stopped:  # Ctrl-C or SIGINT: the finished rows are on disk, and their tables above
        done = f"{writer.added} finished rows in {writer.path}" if writer.added else "no cell finished; nothing written"
        raise fail(f"interrupted: {done}", 130)
    # under --format json stdout holds the run's document only: the comparison goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        code = cli_compare.compare_after_run(compare_to, writer.path, across_gpus)
    _summary(rows, writer.path, strict)
    if code:
        raise typer.Exit(code)


def _fingerprint(sset, cells, timing, budget, seed, sanitize, retune, plugins, import_config) -> dict:
    """This sweep's fingerprint (gemmbench.engine.sweep_fingerprint), stored in its file for --resume to check."""
    import gemmbench
    from gemmbench.measure import device
    from gemmbench.results.shard import cell_key

    files = [Path(spec.split(":", 1)[-1]) for spec in import_config or []]  # ENGINE:FILE
    return sweep_fingerprint.fingerprint(
        (cell_key(p, n) for p, names in cells for n in names), sset.name, timing=timing, budget=budget, seed=seed,
        sanitize=sanitize, retune=retune, plugins=sweep_fingerprint.content(plugins or []),
        imported=sweep_fingerprint.content(files), build=f"{gemmbench.__version__} {device.git_sha()}",
    )  # fmt: skip


def _check_resume(resume: Optional[Path], fp: dict) -> None:
    """--resume takes only a file of this very sweep, measured the same way by this build."""
    from gemmbench.results import store

    if resume is None:
        return
    try:
        stored = sweep_fingerprint.decode(store.file_metadata(resume))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same one line
        raise fail(f"--resume {resume}: not a readable run file ({exc})") from None
    why = sweep_fingerprint.difference(stored, fp)
    if why:
        raise fail(f"--resume {resume}: {why}; a resumed file holds one sweep: start a new run")


def _writer(out_path, run_id, meta, cells, timing, append, force, resume) -> tuple:
    """(the run's writer, its run id, the cells still to run): a new file; an existing --out only with --append
    (its rows kept) or --force; --resume: the file's own run, less the cells it has finished."""
    from gemmbench.results import store

    path = resume if resume is not None else output_path(out_path, run_id)
    lock_output(path)
    if resume is None and not (append or force):  # written by a run that ended while this one started
        _refuse_written(path)
    written = path.exists() or store.parts_dir(path).exists()
    if written and force:  # replaced now: never read later as one run with this sweep's parts
        path.unlink(missing_ok=True)
        shutil.rmtree(store.parts_dir(path), ignore_errors=True)
    kept: list = []
    if resume is not None or (append and written):
        option = "--resume" if resume is not None else "--append"
        try:
            kept = store.records(store.load(path))
        except store.StoreError as exc:
            raise fail(f"{option}: {exc}") from None
    if resume is None:
        return store.RunWriter(path, meta, kept), run_id, cells
    return store.RunWriter(path, meta, kept), kept[0]["run_id"] if kept else run_id, _not_done(cells, kept, timing)


def _refuse_before_work(out_path: Path, append: bool, force: bool, resume: Optional[Path], compare_to) -> None:
    """Before any work: results already written are never replaced without --force; the baseline exists."""
    if compare_to:
        try:
            baseline = named_baselines.resolve(compare_to)
        except named_baselines.BaselineError as exc:
            raise fail(f"--compare-to: {exc}") from None
        if not baseline.exists():
            raise fail(f"--compare-to {compare_to!r}: no such baseline ({baseline})")
    if append and force:
        raise fail("give --append or --force, not both")
    from gemmbench.results.store import parts_dir  # heavy (pandas)

    if resume is not None and not (resume.is_file() or parts_dir(resume).is_dir()):
        raise fail(f"--resume {resume}: no such run file")
    if resume is None and out_path.suffix == ".parquet" and not (append or force):
        _refuse_written(out_path)


def _refuse_written(path: Path) -> None:
    """One line where a run file, or an unfinished sweep's parts of one, is at `path` (nothing to replace without
    --append or --force)."""
    from gemmbench.results.store import parts_dir  # heavy (pandas)

    if path.exists():
        raise fail(f"--out {path} exists; --append adds this sweep's rows to it, --force replaces it")
    if parts_dir(path).exists():
        raise fail(f"--out {path}: an unfinished sweep's rows are in {parts_dir(path)}; --resume {path} finishes "
                   "it, --force replaces it")  # fmt: skip


def _check_ab(ab: Optional[str], compare_to, append: bool, resume, out_path: Path, force: bool) -> Optional[list[str]]:
    """--ab's command as argv (None without --ab), before any work."""
    if ab is None:
        return None
    if compare_to or append or resume is not None:
        raise fail("--ab compares with the baseline it runs: it takes no --compare-to, --append or --resume")
    base = ab_mod.baseline_path(out_path)
    if out_path.suffix == ".parquet" and base.exists() and not force:
        raise fail(f"--ab: the baseline file {base} exists; --force replaces it")
    try:
        return ab_mod.parse_command(ab)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _check_repeat(repeat: int, resume: Optional[Path]) -> None:
    if repeat < 1:
        raise fail(f"--repeat {repeat}: give a number of processes >= 1")
    if repeat > 1 and resume is not None:  # which processes of which cells are done is not what --resume tracks
        raise fail("--repeat runs whole sweeps; it cannot --resume one")


def _not_done(cells: list, kept: list, timing: str) -> list:
    """The cells a resumed run still has to run (a row of the same cell, timing mode and build is done)."""
    import gemmbench
    from gemmbench.measure import device
    from gemmbench.results import store
    from gemmbench.results.shard import cell_key

    done = {store.resume_key(r) for r in kept}
    build = [timing, gemmbench.__version__, str(device.git_sha())]
    left = [(p, [n for n in names if "|".join([cell_key(p, n), *build]) not in done]) for p, names in cells]
    left = [(p, names) for p, names in left if names]
    err.print(escape(f"--resume: {len(kept)} rows kept, {sum(len(n) for _, n in left)} cells to run"), highlight=False)
    return left


def _comparable_baseline(spec: Optional[str], timing: str) -> None:
    """--compare-to, checked before any cell runs: the baseline exists, and this run (this GPU, or the CPU; this
    timing mode) could be compared with it."""
    import pandas as pd

    from gemmbench.measure import device
    from gemmbench.measure.timing import L2_STATE
    from gemmbench.results import compare, store

    if not spec:
        return
    path = cli_compare.resolve(spec)
    try:
        base = store.load([path])
    except store.StoreError as exc:
        raise fail(f"--compare-to {spec!r}: {exc}") from None
    dev = device.detect()
    gpus = ", ".join(sorted(set(base["gpu"].dropna())))
    if dev.kind != "cuda" and gpus:
        raise fail(f"--compare-to {spec!r}: the baseline was measured on {gpus}; this run is on the CPU path (no "
                   "CUDA GPU here), so the two could not be compared")  # fmt: skip
    this = pd.DataFrame([{"gpu": dev.name if dev.kind == "cuda" else None, "timing_mode": timing,
                          "l2_state": L2_STATE[timing]}])  # fmt: skip
    why = compare.check_comparable(base, this.reindex(columns=list(compare.MUST_MATCH)))
    if why:
        raise fail(f"--compare-to {spec!r}: this run could not be compared with it: {why}")
    stack = {k: device.provenance()[k] for k in compare.STACK}  # this run's rows will record these
    why = compare.check_stack(base, pd.DataFrame([stack]))
    if why:
        raise fail(f"--compare-to {spec!r}: this run's stack is not the baseline's: {why} (run without --compare-to "
                   "and use `gemmbench compare --allow-stack-change` to compare across stacks)")  # fmt: skip


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


def _cpu_path(cells: list, sanitize: bool) -> bool:
    """True without CUDA, after refusing what the CPU path cannot do (before anything is written)."""
    import torch  # heavy

    if torch.cuda.is_available() or not cells:
        return not torch.cuda.is_available()
    reason = cpu_too_large([p for p, _ in cells])
    if reason:
        raise fail(f"no CUDA GPU here, so this would be the CPU path, and {reason}")
    if sanitize:
        raise fail("--sanitize needs a CUDA GPU")
    return True


def _say_cpu_path() -> None:
    err.print(
        "[bold yellow]No CUDA GPU: CPU path.[/] Baselines run torch's CPU matmul on one thread, Triton variants run "
        "in Triton's interpreter; timings are CPU wall-clock times, not GPU numbers.",
        highlight=False,
    )


def _sweep(opts, cells: list, writer) -> tuple[list, bool]:
    """gemmbench.engine.sweep.run under one progress bar -> (the file's rows, whether Ctrl-C stopped it); a sweep that
    cannot go on is one line, its rows kept."""
    from gemmbench.engine import sweep  # heavy (torch, pandas)
    from gemmbench.results import store

    with progress_bar() as progress:
        bar = progress.add_task(
            "starting workers" if opts.gpus else "starting worker", total=sum(len(n) for _, n in cells)
        )
        hooks = sweep.Progress(
            row=lambda row: progress.advance(bar),
            begin=lambda what: progress.update(bar, description=escape(what)),
            note=lambda text: progress.console.print(escape(text), highlight=False),
        )
        try:
            try:
                sweep.run(cells, opts, writer, hooks)
            finally:  # the finished rows as one file, whatever stopped the sweep (a full disk keeps its parts)
                writer.close()
        except PoolError as exc:
            raise fail(f"{exc} ({len(writer.rows)} rows saved to {writer.path})") from None
        except OSError as exc:  # the results file could not be written (a full disk, say): the parts written stay
            raise fail(f"cannot write {writer.path}: {exc.strerror or exc}; the rows written so far are in "
                       f"{store.parts_dir(writer.path)} (--resume {writer.path} finishes the sweep)") from None  # fmt: skip
        except KeyboardInterrupt:
            progress.stop()
            return writer.rows, True
        progress.update(bar, description="done")
    return writer.rows, False


def _print_json(run_id: str, path: Path, rows: list, interrupted: bool) -> None:
    """`--format json`: the run's document on stdout (docs/USAGE.md: JSON output): `tables.summary` of the file's rows, as
    the tables show them (with --append or --resume the rows it held before too)."""
    from gemmbench.results.tables import status_counts, summary  # not at --help (yaml, importlib.metadata)

    print_json({"schema": "gemmbench.run/1", "run_id": run_id, "file": str(path), "interrupted": interrupted,
                "counts": status_counts(rows), "cells": summary(rows)})  # fmt: skip


def _summary(rows, path, strict: bool) -> None:
    from gemmbench.results.tables import status_counts  # not at --help (yaml, importlib.metadata)

    counts = status_counts(rows)
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    err.print(f"{len(rows)} cells: {parts}.  Results: {escape(str(path))}", highlight=False)
    bad = counts.get("wrong", 0) + counts.get("error", 0)
    if bad:
        err.print(
            f"[bold red]{bad} cell(s) wrong or failed[/]: see the status column (never timed, never in a speedup)"
        )
        if strict:
            raise typer.Exit(1)
