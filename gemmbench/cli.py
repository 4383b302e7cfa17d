"""The command line (Typer).  Parses, validates, calls one function; measures nothing itself.
Tables go to stdout; progress, banners and warnings to stderr; a bad input is one line on stderr
and exit code 2, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark and profile the GEMM kernels of LLM inference on NVIDIA Hopper GPUs.")
list_app = typer.Typer(no_args_is_help=True, help="List shape sets or variants.")
shapes_app = typer.Typer(no_args_is_help=True, help="Make shape sets.")
app.add_typer(list_app, name="list")
app.add_typer(shapes_app, name="shapes")

# Piped output (CI logs, files) gets a wide fixed width instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> "typer.Exit":
    # escape: messages quote user input (globs like 'cublas_[ab]*'), which rich would read as markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def progress_bar():
    """The progress bar of every long command, on stderr: what runs now, done of total, time taken."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err)


def _choices(option: str, text: str, allowed) -> list[str]:
    """A comma-separated option whose every value must be one of `allowed`; duplicates dropped, order kept."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names or any(x not in allowed for x in names):
        raise fail(f"{option} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return list(dict.fromkeys(names))


def _dtypes(text: str) -> list[str]:
    from gemmbench.shapes import DTYPES

    return _choices("--dtype", text, DTYPES)


def _tp_list(text: str) -> list[int]:
    try:
        tps = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        tps = []
    if not tps or min(tps) < 1:
        raise fail(f"--tp {text!r}: give positive integers, comma-separated (e.g. 8 or 1,2,4,8)")
    return list(dict.fromkeys(tps))


def _problems(sset, dtypes, m_values, tps: list[int], routings: list[str]) -> list:
    """Every (TP, routing) expansion of the set; dense GEMMs once per TP (routing does not apply to them)."""
    from gemmbench.shapes import problems

    out = []
    for t in tps:
        for i, r in enumerate(routings):
            out += [p for p in problems(sset, dtypes, m_values, t, r) if p.is_moe or i == 0]
    return out


def _load_plugins(plugins: list[Path]) -> None:
    from gemmbench import registry

    for p in plugins:
        registry.load_plugin(p)


def select_cells(shapes: str, variants: Optional[str], dtype: str, m: Optional[str], tp: str, routing: str,
                 seed: int, plugin: Optional[list[Path]]) -> tuple:
    """The selection options `run` and `profile` share -> (shape set, [(problem, [variant names])]).
    A cell is a problem and a variant made for its kind (dense/MoE) and dtype."""
    from gemmbench import registry, shapes as shapes_mod
    from gemmbench.inputs import ROUTINGS

    tps = _tp_list(tp)
    routings = _choices("--routing", routing, ROUTINGS)
    if not 0 <= seed < 2**31:
        raise fail(f"--seed must be in 0 .. 2**31 - 1, got {seed}")
    if variants is not None and not variants.strip(" ,"):
        raise fail("--variants is empty (give globs such as 'triton_*,cublas_fp8')")
    try:
        sset = shapes_mod.load(shapes)
        m_values = shapes_mod.parse_m_list(m) if m is not None else None
        problems = _problems(sset, _dtypes(dtype), m_values, tps, routings)
        _load_plugins(plugin or [])
        chosen = registry.select(variants)
    except (shapes_mod.ShapeError, registry.RegistryError) as exc:
        raise fail(str(exc)) from None
    cells = [(p, [v.name for v in chosen if p.dtype in v.dtypes and v.moe == p.is_moe]) for p in problems]
    uncovered = sorted({f"{p.gemm} {p.dtype}" for p, names in cells if not names})
    cells = [(p, names) for p, names in cells if names]
    if not cells:
        raise fail(f"no selected variant runs {sset.name} in {dtype} (see `gemmbench list variants`)")
    if uncovered:  # nothing may disappear silently: these problems have no cell at all
        err.print(escape(f"warning: no selected variant runs {', '.join(uncovered)}; those problems are left out"),
                  highlight=False)
    return sset, cells


@app.command()
def run(
    shapes: Annotated[str, typer.Option(help="Built-in shape set (see `gemmbench list shapes`) or a YAML path.")],
    variants: Annotated[Optional[str], typer.Option(help="Comma-separated globs, e.g. 'triton_*,cublas_fp8'.")] = None,
    dtype: Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.")] = "fp8,bf16",
    m: Annotated[Optional[str], typer.Option(help="M values (tokens): '1,16,64', 'decode', 'prefill', 'all'.")] = None,
    tp: Annotated[str, typer.Option(help="Tensor parallelism, e.g. 8 or 1,2,4,8: column-parallel GEMMs divide N, row-parallel K.")] = "1",
    timing: Annotated[str, typer.Option(help="cold (L2 emptied by a read), stream (CUDA graph over distinct copies), graph, wall.")] = "cold",
    out_path: Annotated[Path, typer.Option("--out", help="Folder for <run_id>.parquet, or a .parquet file path.")] = Path("results"),
    plugin: Annotated[Optional[list[Path]], typer.Option(help="Python file registering extra variants (repeatable).")] = None,
    sanitize: Annotated[bool, typer.Option(help="Run each check under compute-sanitizer memcheck first.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    budget: Annotated[float, typer.Option(help="Seconds of sampling per cell at most (after >= 10 samples).")] = 0.5,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any cell is wrong or failed.")] = False,
    retune: Annotated[bool, typer.Option(help="Ignore stored Triton configs; tune each problem anew (not stored).")] = False,
    routing: Annotated[str, typer.Option(help="MoE token routing, comma-separated: uniform, skewed, one-expert.")] = "uniform",
    compare_to: Annotated[Optional[str], typer.Option(help="Then compare with this baseline (a name in results/baselines/ or a path); exit 1 on a regression.")] = None,
    shard: Annotated[Optional[str], typer.Option(help="Run only shard I of N (0 <= I < N) of the cells, e.g. $SLURM_ARRAY_TASK_ID/8; join the parts with `gemmbench merge`.")] = None,
    gpus: Annotated[Optional[str], typer.Option(help="Run on these GPUs of this host at once, one worker each: 'all' or 0,1,...")] = None,
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
        err.print("[bold yellow]No CUDA GPU: CPU path.[/] Baselines run torch's CPU matmul, Triton variants run in "
                  "Triton's interpreter; timings are CPU wall-clock times, not GPU numbers.", highlight=False)
    run_id = new_run_id(sset.name) + (f"-shard{shard_at[0]}of{shard_at[1]}" if shard_at else "")
    path = _output_path(out_path, run_id)
    writer = store.RunWriter(path, meta)
    if not cells:  # more shards than cells: an empty part still tells merge this shard ran
        store.write_rows(path, [], meta)
        err.print(escape(f"shard {shard}: no cells (the sweep has fewer cells than shards). Results: {path}"))
        return
    opts = RunOptions(timing=timing, plugins=plugin or [], seed=seed, budget_s=budget, sanitize=sanitize,
                      run_id=run_id, retune=retune,
                      worker_env={"CUDA_VISIBLE_DEVICES": visible_device(gpu_ids[0])} if gpu_ids and len(gpu_ids) == 1 else {})
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
            raise fail(f"interrupted: {len(done) if gpus else len(writer.rows)} finished rows are in {where}", 130) from None
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
        err.print(f"[bold red]{bad} cell(s) wrong or failed[/]: see the status column (never timed, never in a speedup)")
        if strict:
            raise typer.Exit(1)


def _m_label(m_values: tuple) -> str:
    from gemmbench.shapes import PRESETS

    for name, values in PRESETS.items():
        if tuple(m_values) == tuple(values):
            return f"{name} ({values[0]}..{values[-1]})"
    return ",".join(map(str, m_values))


@list_app.command("shapes")
def list_shapes() -> None:
    """Built-in shape sets with their GEMMs and default M lists."""
    from gemmbench import shapes as shapes_mod

    t = Table(title="shape sets (gemmbench run --shapes NAME; --m and --tp override)")
    for col in ("set", "GEMM", "N", "K", "E", "topk", "TP splits", "default M"):
        t.add_column(col)
    for name in shapes_mod.builtin_names():
        s = shapes_mod.load(name)
        for i, g in enumerate(s.gemms):
            t.add_row(name if i == 0 else "", g.name, str(g.N), str(g.K), str(g.E) if g.is_moe else "",
                      str(g.topk) if g.is_moe else "", {"column": "N", "row": "K"}.get(g.parallel, "-"),
                      _m_label(s.m_values) if i == 0 else "")
        t.add_section()
    out.print(t)


@list_app.command("variants")
def list_variants(
    plugin: Annotated[Optional[list[Path]], typer.Option(help="Python file registering extra variants.")] = None,
) -> None:
    """Registered kernel variants: name, family, dtypes and what each does."""
    from gemmbench import registry

    try:
        _load_plugins(plugin or [])
        variants = registry.all_variants()
    except registry.RegistryError as exc:
        raise fail(str(exc)) from None
    t = Table(title="variants (gemmbench run --variants GLOB,...)")
    for col in ("variant", "family", "dtypes", "runs", "description"):
        t.add_column(col)
    for v in variants:
        src = "" if v.source == "builtin" else escape(f" [plugin {v.source}]")
        t.add_row(v.name, v.family, ",".join(v.dtypes), "MoE" if v.moe else "dense", escape(v.description) + src)
    out.print(t)


@shapes_app.command("from-config")
def shapes_from_config(
    path: Annotated[Path, typer.Argument(help="A Hugging Face config.json on disk.")],
    name: Annotated[Optional[str], typer.Option(help="Name of the set (default: from the config).")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Where to write the YAML (default: stdout).")] = None,
) -> None:
    """Write a shape set (Llama-family dense or Mixtral-family MoE) from a model's config.json."""
    from gemmbench import shapes as shapes_mod

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        check = Path(tmp) / "set.yaml"
        try:
            set_name, text = shapes_mod.from_hf_config(path, name)
            check.write_text(text)
            shapes_mod.load(str(check))  # only a set that `run --shapes` accepts is written
        except shapes_mod.ShapeError as exc:
            raise fail(str(exc).replace(str(check), f"the set made from {path}")) from None
    if out_file is None:
        sys.stdout.write(text)
        return
    try:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text)
    except OSError as exc:
        raise fail(f"--out {out_file}: cannot write ({exc.strerror})") from None
    err.print(escape(f"wrote shape set {set_name!r} to {out_file}; run it with: gemmbench run --shapes {out_file}"))


# these commands live in their own modules (registered on `app` when imported)
from gemmbench import cli_compare, cli_layer, cli_merge, cli_plot, cli_profile, cli_tune  # noqa: E402,F401


def main() -> None:
    app()
