"""`gemmbench run`: check, then time, every variant on every problem of a shape set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gemmbench.cli import compare as cli_compare
from gemmbench.cli.common import err, fail, out, progress_bar, select_cells


def run(
    shapes: Annotated[str, typer.Option(help="Built-in shape set (see `gemmbench list shapes`) or a YAML path.")],
    variants: Annotated[Optional[str], typer.Option(help="Comma-separated globs, e.g. 'triton_*,cublas_fp8'.")] = None,
    dtype: Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.")] = "fp8,bf16",
    m: Annotated[Optional[str], typer.Option(help="M values (tokens): '1,16,64', 'decode', 'prefill', 'all'.")] = None,
    tp: Annotated[
        str, typer.Option(help="Tensor parallelism, e.g. 8 or 1,2,4,8: column-parallel GEMMs divide N, row-parallel K.")
    ] = "1",
    timing: Annotated[
        str, typer.Option(help="cold (L2 emptied by a read), stream (CUDA graph over distinct copies), graph, wall.")
    ] = "cold",
    out_path: Annotated[
        Path, typer.Option("--out", help="Folder for <run_id>.parquet, or a .parquet file path.")
    ] = Path("results"),
    plugin: Annotated[
        Optional[list[Path]], typer.Option(help="Python file registering extra variants (repeatable).")
    ] = None,
    sanitize: Annotated[bool, typer.Option(help="Run each check under compute-sanitizer memcheck first.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    budget: Annotated[float, typer.Option(help="Seconds of sampling per cell at most (after >= 10 samples).")] = 0.5,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any cell is wrong or failed.")] = False,
    retune: Annotated[
        bool, typer.Option(help="Ignore stored Triton configs; tune each problem anew (not stored).")
    ] = False,
    routing: Annotated[
        str, typer.Option(help="MoE token routing, comma-separated: uniform, skewed, one-expert.")
    ] = "uniform",
    compare_to: Annotated[
        Optional[str],
        typer.Option(
            help="Then compare with this baseline (a name in results/baselines/ or a path); exit 1 on a regression."
        ),
    ] = None,
    shard: Annotated[
        Optional[str],
        typer.Option(
            help="Run only shard I of N (0 <= I < N) of the cells, e.g. $SLURM_ARRAY_TASK_ID/8; join the parts with `gemmbench merge`."
        ),
    ] = None,
    gpus: Annotated[
        Optional[str], typer.Option(help="Run on these GPUs of this host at once, one worker each: 'all' or 0,1,...")
    ] = None,
) -> None:
    """Check, then time, every variant on every problem of a shape set; write Parquet and print tables."""
    from gemmbench import store
    from gemmbench.timing import MODES

    if timing not in MODES:
        raise fail(f"--timing {timing!r}: choose from {', '.join(MODES)}")
    if not budget > 0 or budget == float("inf"):
        raise fail(f"--budget must be a positive number of seconds, got {budget}")
    if compare_to and not cli_compare.resolve(compare_to).exists():
        raise fail(f"--compare-to {compare_to!r}: no such baseline ({cli_compare.resolve(compare_to)})")
    from gemmbench import shard as shard_mod

    try:
        shard_at = shard_mod.parse(shard) if shard is not None else None
    except shard_mod.ShardError as exc:
        raise fail(str(exc)) from None
    sset, cells = select_cells(shapes, variants, dtype, m, tp, routing, seed, plugin)
    meta = None
    if shard_at:
        meta = {shard_mod.META_KEY: json.dumps(shard_mod.metadata(cells, *shard_at)).encode()}
        cells = shard_mod.partition(cells, shard_at[1])[shard_at[0]]

    import torch

    from gemmbench.runner import RunOptions, cpu_too_large, new_run_id

    cpu = not torch.cuda.is_available()
    gpu_ids = None
    if gpus is not None:
        from gemmbench.multi import GpuError, parse_gpus, visible_device

        try:
            gpu_ids = parse_gpus(gpus, torch.cuda.device_count() if not cpu else 0)
        except GpuError as exc:
            raise fail(str(exc)) from None
    if cpu and cells:
        reason = cpu_too_large([p for p, _ in cells])
        if reason:
            raise fail(f"no CUDA GPU here, so this would be the CPU path, and {reason}")
        if sanitize:
            raise fail("--sanitize needs a CUDA GPU")
        timing = "wall"  # no CUDA events on a CPU
        err.print(
            "[bold yellow]No CUDA GPU: CPU path.[/] Baselines run torch's CPU matmul, Triton variants run in "
            "Triton's interpreter; timings are CPU wall-clock times, not GPU numbers.",
            highlight=False,
        )
    run_id = new_run_id(sset.name) + (f"-shard{shard_at[0]}of{shard_at[1]}" if shard_at else "")
    path = _output_path(out_path, run_id)
    writer = store.RunWriter(path, meta)
    if not cells:  # more shards than cells: an empty part still tells merge this shard ran
        store.write_rows(path, [], meta)
        err.print(escape(f"shard {shard}: no cells (the sweep has fewer cells than shards). Results: {path}"))
        return
    opts = RunOptions(
        timing=timing,
        plugins=plugin or [],
        seed=seed,
        budget_s=budget,
        sanitize=sanitize,
        run_id=run_id,
        retune=retune,
        worker_env={"CUDA_VISIBLE_DEVICES": visible_device(gpu_ids[0])} if gpu_ids and len(gpu_ids) == 1 else {},
    )
    total = sum(len(n) for _, n in cells)
    rows = _sweep(opts, cells, cpu, writer, total, gpu_ids if gpu_ids and len(gpu_ids) > 1 else None)
    from gemmbench.tables import gemm_tables

    for table in gemm_tables(rows):
        out.print(table)
    code = cli_compare.compare_after_run(compare_to, path)
    _summary(rows, path, strict)
    if code:
        raise typer.Exit(code)


def _output_path(out: Path, run_id: str) -> Path:
    """The run's Parquet path, with its folder made and writable, before any cell runs."""
    import os

    path = out if out.suffix == ".parquet" else out / f"{run_id}.parquet"
    if path.is_dir():
        raise fail(f"--out {out}: is a folder; give a folder without the .parquet suffix, or a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK):
        raise fail(f"--out {out}: folder {path.parent} is not writable")
    return path


def _sweep(opts, cells, cpu, writer, total, gpus=None) -> list:
    """The sweep with one progress bar: one worker, or (gpus) one per GPU writing part files merged at the end."""
    from gemmbench.runner import RunError, Runner

    with progress_bar() as progress:
        bar = progress.add_task("starting worker" + ("s" if gpus else ""), total=total)
        done = []

        def on_row(row):
            if gpus:  # the parts are written by multi.run_on_gpus
                done.append(row)
            else:
                writer.append(row)
            progress.advance(bar)

        def on_begin(problem, variant, phase):
            progress.update(bar, description=f"{problem.label}  {variant} ({phase})")

        runner = None
        parts_dir = writer.path.with_name(writer.path.stem + ".parts")
        try:
            if gpus:
                from gemmbench import multi

                parts = multi.run_on_gpus(opts, cpu, cells, gpus, parts_dir, on_row, on_begin)
                if parts:
                    multi.merge_parts(parts, writer.path)
                return done
            runner = Runner(opts, cpu, on_row, on_begin)
            for problem, names in cells:
                runner.run_problem(problem, names)
        except RunError as exc:
            if gpus:
                raise fail(f"{exc} ({len(done)} rows saved in the part files in {parts_dir})") from None
            raise fail(f"{exc} ({len(writer.rows)} rows saved to {writer.path})") from None
        except OSError as exc:  # the results file could not be written
            raise fail(f"cannot write {writer.path}: {exc}") from None
        except KeyboardInterrupt:
            progress.stop()
            where = f"the part files in {parts_dir} (gemmbench merge joins them)" if gpus else str(writer.path)
            raise fail(
                f"interrupted: {len(done) if gpus else len(writer.rows)} finished rows are in {where}", 130
            ) from None
        finally:
            if runner is not None:
                runner.close()
        progress.update(bar, description="done")
    return writer.rows


def _summary(rows, path, strict: bool) -> None:
    from gemmbench.tables import status_counts

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
