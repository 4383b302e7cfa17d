"""`gemmbench compare`, `gemmbench baseline save` and `baseline list` (registered on cli.app); the work is in
gemmbench.results.compare, the baselines' search path in gemmbench.results.named_baselines."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import err, fail, out
from gemmbench.cli.formats import CompareFormat, OutputFormat, choice, format_option, print_json
from gemmbench.cli.options import COMPARISON, OUTPUT, AcrossGpus
from gemmbench.results import named_baselines

BASELINE_DIR = named_baselines.SAVE_DIR
VERDICTS = "Verdicts"  # compare's --help panel: what counts as a change, and which changes fail
baseline_app = typer.Typer(
    no_args_is_help=True, help="Save runs as named baselines for `gemmbench compare`, and list the names it finds."
)
FORMATS = tuple(f.value for f in CompareFormat)
STYLE = {
    "slower": "bold red",
    "now-failing": "bold red",
    "noisy": "yellow",
    "config-changed": "magenta",
    "other-gpu": "blue",
    "faster": "green",
    "fixed": "green",
    "missing": "yellow",
    "new": "cyan",
    "still-failing": "red",
    "same": "dim",
    "skipped": "dim",
}


def resolve(spec: str) -> Path:
    """A baseline name (found on the search path: ./results/baselines, the user's, the shipped) or a path to a run
    file or folder; a name found nowhere is one line and exit 2."""
    try:
        return named_baselines.resolve(spec)
    except named_baselines.BaselineError as exc:
        raise fail(str(exc)) from None


def compare_runs(
    baseline: list[Path],
    candidate: list[Path],
    threshold: str,
    fmt: str,
    fail_on: str,
    force: bool,
    allow_empty: bool = False,
    allow_stack_change: bool = False,
    across_gpus: bool = False,
) -> int:
    """Load, check comparability, print the verdicts; returns the exit code (1 on a --fail-on verdict)."""
    from gemmbench.results import compare as cmp  # heavy (pandas), as store is
    from gemmbench.results.store import StoreError, load, skipped_line

    if fmt not in FORMATS:
        raise fail(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    try:
        thr = cmp.parse_threshold(threshold)
        failed = cmp.parse_fail_on(fail_on)
    except cmp.CompareError as exc:
        raise fail(str(exc)) from None
    same = {p.resolve() for p in baseline} & {p.resolve() for p in candidate}
    if same:
        raise fail(f"{sorted(same)[0]} is both the baseline and the candidate: a run compared with itself says nothing")
    skipped: list[Path] = []
    try:
        base, cand = load(baseline, skipped), load(candidate, skipped)
    except StoreError as exc:
        raise fail(str(exc)) from None
    if skipped_line(skipped):
        err.print(escape(f"compare: {skipped_line(skipped)}"), highlight=False, soft_wrap=True)
    shared = set(base["run_id"]) & set(cand["run_id"])
    if shared:  # a copy of the file, say: the same samples on both sides
        raise fail(f"run {sorted(shared)[0]} is on both sides (the baseline and the candidate hold the same run): "
                   "compare two runs")  # fmt: skip
    why = cmp.check_comparable(base, cand)
    if why and not force:
        raise fail(f"refusing to compare: {why} (compare like with like, or pass --force)")
    if why:
        err.print(escape(f"warning (--force): {why}"), highlight=False)
    stack = cmp.check_stack(base, cand)
    if stack and not allow_stack_change:
        raise fail(f"refusing to compare across stacks: {stack} (measure both on one stack, or pass "
                   "--allow-stack-change: every verdict is then marked)")  # fmt: skip
    rows = cmp.compare(base, cand, thr, across_gpus)
    if stack:
        cmp.mark_stack_change(rows)
    if not allow_empty and all(r.verdict in cmp.NOT_COMPARED for r in rows):
        # a gate that compared nothing must not pass: the candidate ran other shapes, variants or dtypes, or on
        # other GPUs
        summary = ", ".join(f"{n} {v}" for v, n in cmp.counts(rows).items())
        gpus = (
            "; --across-gpus compares cells run on different GPUs"
            if any(r.verdict == "other-gpu" for r in rows)
            else ""
        )
        raise fail(f"nothing compared: the runs have no cell in common on one GPU ({summary}){gpus}; --allow-empty "
                   "accepts that")  # fmt: skip
    names = " + ".join(map(str, baseline)), " + ".join(map(str, candidate))
    if fmt == "markdown":
        out.print(cmp.markdown(rows, thr, *names, failed, stack), markup=False, highlight=False, soft_wrap=True)
    elif fmt == "json":
        print_json(cmp.document(rows, thr, stack))
    else:
        _table(rows, thr, stack)
        out.print(escape(cmp.test_note(rows)), highlight=False, soft_wrap=True)
    hits = [r for r in rows if r.verdict in failed]
    summary = ", ".join(f"{n} {v}" for v, n in cmp.counts(rows).items())
    err.print(
        escape(f"{len(rows)} cells: {summary}") + (f"; [bold red]{len(hits)} hit --fail-on[/]" if hits else ""),
        highlight=False,
    )
    if stack:
        err.print(escape(cmp.stack_note(stack)), highlight=False, soft_wrap=True)
    return 1 if hits else 0


def _table(rows, thr: float, stack: Optional[str] = None) -> None:
    from gemmbench.results import compare as cmp  # heavy (pandas): loaded by compare_runs already
    from gemmbench.results.compare import STACK_MARK

    across = f"; {STACK_MARK}: across a stack change" if stack else ""
    t = Table(title=f"candidate vs baseline (threshold {thr:.1%}; `same` and `skipped` rows counted below{across})")
    for col in ("verdict", "cell", "variant", "baseline µs", "candidate µs", "change", "p"):
        t.add_column(col, justify="right" if col[0] in "bcp" and col != "cell" else "left")
    for r in rows:
        if r.verdict in ("same", "skipped"):
            continue
        change = escape(cmp.change_text(r, 60))
        t.add_row(
            f"[{STYLE[r.verdict]}]{escape(r.shown)}[/]",
            escape(r.cell),
            r.variant,
            "" if r.base_us is None else f"{r.base_us:.2f}",
            "" if r.cand_us is None else f"{r.cand_us:.2f}",
            change,
            "" if r.p_value is None else f"{r.p_value:.2g}",
        )
    out.print(t)


def compare(
    baseline: Annotated[
        str,
        typer.Argument(
            help="Baseline: a name (looked up in ./results/baselines, the user's baselines, the shipped ones: "
            "`gemmbench baseline list`), a Parquet file or a folder."
        ),
    ],
    candidate: Annotated[list[Path], typer.Argument(help="Candidate run file(s) or folder(s).")],
    threshold: Annotated[
        str, typer.Option(help="Smallest change of the median that counts, e.g. 5%.", rich_help_panel=VERDICTS)
    ] = "5%",
    fail_on: Annotated[
        str,
        typer.Option(
            help="Exit 1 on these verdicts: slower, failing, noisy, missing, config-changed.", rich_help_panel=VERDICTS
        ),
    ] = "slower,failing",
    allow_empty: Annotated[
        bool,
        typer.Option(
            help="Exit 0 even when the two sides have no cell in common (nothing was compared).",
            rich_help_panel=VERDICTS,
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option(help="Compare runs of different timing modes or L2 states.", rich_help_panel=COMPARISON)
    ] = False,
    allow_stack_change: Annotated[
        bool,
        typer.Option(
            help="Compare runs of different GPU models, torch, triton, CUDA or driver; every verdict is marked.",
            rich_help_panel=COMPARISON,
        ),
    ] = False,
    across_gpus: AcrossGpus = False,
    format_: Annotated[
        CompareFormat,
        typer.Option(
            "--format",
            parser=choice(CompareFormat, "--format"),
            help="table, markdown (a PR comment) or json.",
            rich_help_panel=OUTPUT,
        ),
    ] = CompareFormat.table,
) -> None:
    """Verdict per cell (slower, faster, same, noisy, config-changed, other-gpu, now-failing, fixed, new, missing) from the raw samples of two runs (per-process medians where both sides have >= 3 processes: `run --repeat`).

    Exit 1 when a verdict named by --fail-on occurs, 0 otherwise, 2 on misuse or when nothing was compared. Folders are read with their subfolders."""
    path = resolve(baseline)
    code = compare_runs(
        [path], candidate, threshold, format_.value, fail_on, force, allow_empty, allow_stack_change, across_gpus
    )
    raise typer.Exit(code)


@baseline_app.command("save")
def baseline_save(
    results: Annotated[list[Path], typer.Argument(help="Run file(s) or folder(s) to keep as the baseline.")],
    name: Annotated[
        str,
        typer.Option(
            help="The baseline's name: results/baselines/NAME.parquet in the working directory by default (--dir)."
        ),
    ],
    out_dir: Annotated[
        Path, typer.Option("--dir", help="Folder of the baselines (any folder of `gemmbench baseline list`).")
    ] = BASELINE_DIR,
    variants: Annotated[Optional[str], typer.Option(help="Keep only these variants (comma-separated globs).")] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing baseline of that name.")] = False,
) -> None:
    """Copy the rows of one or more runs into one baseline file (checked, written atomically)."""
    from gemmbench.results.store import StoreError, load, records, write_rows  # heavy (pandas, pyarrow)

    if not named_baselines.NAME.fullmatch(name):
        raise fail(f"--name {name!r}: use letters, digits, '.', '_' and '-' (it becomes a file name)")
    if (out_dir / f"{name}.parquet").exists() and not force:
        raise fail(f"baseline {name!r} exists ({out_dir / f'{name}.parquet'}); --force replaces it")
    try:
        df = load(results)
    except StoreError as exc:
        raise fail(str(exc)) from None
    if variants:
        globs = [g.strip() for g in variants.split(",") if g.strip()]
        df = df[[any(fnmatch.fnmatchcase(v, g) for g in globs) for v in df["variant"]]]
        if df.empty:
            raise fail(f"--variants {variants!r} keeps no row of {', '.join(map(str, results))}")
    rows = records(df)
    path = out_dir / f"{name}.parquet"
    try:
        write_rows(path, rows)
    except (OSError, StoreError) as exc:
        raise fail(f"cannot write {path}: {exc}") from None
    gpus = ", ".join(sorted(set(df["gpu"].dropna()))) or "no GPU"
    err.print(escape(f"baseline {name!r}: {len(rows)} rows ({gpus}) -> {path}"), highlight=False)


@baseline_app.command("list")
def baseline_list(
    fmt: Annotated[
        OutputFormat, format_option("table, or json: one JSON document on stdout (docs/USAGE.md: JSON output).")
    ] = OutputFormat.table,
) -> None:
    """The baselines `compare NAME` finds, in search order: where each resolved, its stack, its days and rows."""
    # where: cwd, user or shipped; a name found again later on the path is shadowed (dim), never used
    found = named_baselines.entries()
    if fmt is OutputFormat.json:
        docs = []
        for e in found:
            s = named_baselines.summary(e.path)
            docs.append({"name": e.name, "where": e.where, "shadowed": e.shadowed, "file": str(e.path),
                         **{k: getattr(s, k) for k in ("gpu", "torch", "triton", "cuda", "driver", "date", "rows",
                                                       "error")}})  # fmt: skip
        print_json({"schema": "gemmbench.baselines/1", "search_path": named_baselines.shown_path(), "baselines": docs})
        return
    t = Table(title="named baselines (first found wins)")
    for col in ("name", "where", "GPU", "torch", "triton", "CUDA", "driver", "date", "rows", "file"):
        t.add_column(col, justify="right" if col == "rows" else "left")
    for e in found:
        s = named_baselines.summary(e.path)
        cells = [e.name, e.where + (" (shadowed)" if e.shadowed else ""), s.gpu, s.torch, s.triton, s.cuda, s.driver]
        cells += [s.date]
        cells += ["" if s.error else str(s.rows), str(e.path) if not s.error else f"{e.path}: {s.error}"]
        t.add_row(*map(escape, cells), style="dim" if e.shadowed else None)
    out.print(t)
    looked = named_baselines.shown_path()
    err.print(escape(f"{len(found)} baseline file(s); searched in order: {looked}"), highlight=False, soft_wrap=True)


def compare_after_run(spec: Optional[str], run_path: Path, across_gpus: bool = False) -> int:
    """`gemmbench run --compare-to NAME|PATH`: the fresh run against the baseline, as a PR-comment summary."""
    if not spec:
        return 0
    return compare_runs([resolve(spec)], [run_path], "5%", "markdown", "slower,failing", False, False, False,
                        across_gpus)  # fmt: skip
