"""`gemmbench plot` and `gemmbench report`: the commands (registered on cli.app); the rows are chosen by
gemmbench.plot.data, drawn by gemmbench.plot.figures and written up by gemmbench.plot.report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gemmbench.cli.common import err, fail
from gemmbench.cli.formats import OutputFormat, format_option, print_json
from gemmbench.cli.options import (
    OUTPUT,
    Force,
    Results,
    RowBaseline,
    RowDtype,
    RowGpu,
    RowShapes,
    RowTp,
    RowVariants,
)  # fmt: skip
from gemmbench.engine import plan
from gemmbench.results.run_file import refuse_existing

# the options only `plot` or only `report` takes (the rows both draw: cli.options)
PlotOut = Annotated[
    Path,
    typer.Option("--out", help="Folder for the figures: <kind>-<GEMM>-<dtype>.png.", rich_help_panel=OUTPUT),
]
PlotFormat = Annotated[str, typer.Option("--format", help="Comma-separated: png, svg.", rich_help_panel=OUTPUT)]
ReportOut = Annotated[
    Path, typer.Option("--out", help="Folder for report.md, report.html and img/.", rich_help_panel=OUTPUT)
]
ReportFormat = Annotated[
    OutputFormat,
    format_option(
        "table: the paths written, one a line; json: one JSON document on stdout, the paths and the winners "
        "(docs/USAGE.md: JSON output).",
        panel=OUTPUT,
    ),
]


def _globs(option: str, text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    globs = [x.strip() for x in text.split(",") if x.strip()]
    if not globs:
        raise fail(f"{option} is empty (give comma-separated names or globs)")
    return globs


def _selected(results: list[Path], shapes, variants, dtype, tp, gpu, baseline):
    """(runs, profiles, files) after the filters, speedups against the baseline; a bad input is one line, exit 2."""
    from gemmbench.plot import data as plotdata  # heavy (pandas, matplotlib), as store is
    from gemmbench.results.store import StoreError

    f = plotdata.Filters(
        shapes=_globs("--shapes", shapes),
        variants=_globs("--variants", variants),
        dtypes=plan.dtype_names(dtype) if dtype is not None else None,
        tps=plan.tp_list(tp) if tp is not None else None,
        gpu=gpu,
    )
    try:
        res = plotdata.read(results)
        runs = profiles = None
        if res.runs is not None:
            runs = plotdata.select(res.runs, f, "run rows")
            if baseline is not None and not (runs["variant"] == baseline).any():
                raise StoreError(
                    f"--baseline {baseline!r}: no such variant in the selected rows (they hold "
                    f"{', '.join(sorted(runs['variant'].astype(str).unique()))})"
                )
            runs = plotdata.keep_variants(plotdata.with_speedups(runs, baseline), f, "run rows")
        if res.profiles is not None:
            profiles = plotdata.keep_variants(plotdata.select(res.profiles, f, "profile rows"), f, "profile rows")
        if runs is not None and profiles is not None:
            gpus = set(plotdata.gpu_names(runs)) | set(plotdata.gpu_names(profiles))
            if len(gpus) > 1:
                raise StoreError(
                    f"the runs and the profile tables come from different GPUs ({'; '.join(sorted(gpus))}): "
                    f"choose one with --gpu"
                )
    except StoreError as exc:
        raise fail(str(exc)) from None
    layers = res.layers
    if layers is not None:
        if f.dtypes:
            layers = layers[layers["dtype"].isin(f.dtypes)]
        if f.tps:
            layers = layers[layers["tp"].isin(f.tps)]
    return runs, profiles, res.files, layers


def _warn(text: str) -> None:
    err.print(escape(f"warning: {text}"), highlight=False, soft_wrap=True)


def plot(
    results: Results,
    kind: Annotated[
        str,
        typer.Option(
            help="roofline, speedup, tflops, latency, schedules (MoE), profile (ncu tables), "
            "layer (`gemmbench layer` tables); "
            "comma-separated for several."
        ),
    ],
    baseline: RowBaseline = None,
    shapes: RowShapes = None,
    variants: RowVariants = None,
    dtype: RowDtype = None,
    tp: RowTp = None,
    gpu: RowGpu = None,
    out_path: PlotOut = Path("plots"),
    fmt: PlotFormat = "png",
    force: Force = False,
) -> None:
    """Draw figures from result files: one per GEMM and dtype (a roofline: one per dtype); prints each path written."""
    from gemmbench.plot import figures as plots  # heavy (matplotlib, pandas)

    kinds = plan.choices("--kind", kind, plots.KINDS)
    formats = plan.choices("--format", fmt, plots.FORMATS)
    if out_path.is_file():
        raise fail(f"--out {out_path}: give a folder (one file per figure goes inside it)")
    runs, profiles, _, layers = _selected(results, shapes, variants, dtype, tp, gpu, baseline)
    _kinds_have_rows(kinds, runs, profiles, layers)
    with err.status(f"drawing the {', '.join(kinds)} figures"):  # a folder of runs takes a while; silent when piped
        drawn = _draw(kinds, runs, profiles, layers)
    if not any(d.figure is not None for d in drawn):
        raise fail("nothing to draw: " + ("; ".join(d.note for d in drawn) or f"no rows that --kind {kind} draws"))
    refuse_existing([out_path / f"{d.stem}.{f}" for d in drawn if d.figure is not None for f in formats], force)
    with err.status("writing the figures") as status:
        for i, d in enumerate(drawn, 1):
            status.update(f"writing the figures: {i} of {len(drawn)}")
            if d.figure is None:
                _warn(d.note)
                continue
            for w in d.warnings:
                _warn(f"{d.stem}: {w}")
            try:
                paths = plots.save(d.figure, out_path, d.stem, formats)
            except OSError as exc:
                raise fail(f"--out {out_path}: cannot write ({exc.strerror or exc})") from None
            for p in paths:
                typer.echo(str(p))


def _kinds_have_rows(kinds: list, runs, profiles, layers) -> None:
    """One line when a --kind has no table of its sort among RESULTS."""
    if layers is None and "layer" in kinds:
        raise fail("--kind layer draws layer tables (`gemmbench layer` output); RESULTS hold none")
    if profiles is None and "profile" in kinds:
        raise fail("--kind profile draws profile tables (`gemmbench profile --ncu` output); RESULTS hold none")
    if runs is None and set(kinds) - {"profile", "layer"}:
        other = ", ".join(k for k in kinds if k not in ("profile", "layer"))
        held = " and ".join(n for n, d in (("profile tables", profiles), ("layer tables", layers)) if d is not None)
        raise fail(f"--kind {other} draws run files (`gemmbench run` output); RESULTS hold only {held}")
    if "schedules" in kinds and not (runs["E"] > 1).any():
        raise fail("--kind schedules draws MoE GEMMs (E > 1); the selected rows have none")


def _draw(kinds: list, runs, profiles, layers) -> list:
    from gemmbench.plot import figures as plots  # heavy (matplotlib, pandas), as the others are
    from gemmbench.plot import layer as plots_layer
    from gemmbench.results.store import StoreError

    try:
        return [d for k in kinds for d in (plots_layer.figures(layers) if k == "layer" else
                                           plots.figures(k, runs, profiles))]  # fmt: skip
    except StoreError as exc:
        raise fail(str(exc)) from None


def report(
    results: Results,
    baseline: RowBaseline = None,
    shapes: RowShapes = None,
    variants: RowVariants = None,
    dtype: RowDtype = None,
    tp: RowTp = None,
    gpu: RowGpu = None,
    out_path: ReportOut = Path("report"),
    fmt: ReportFormat = OutputFormat.table,
    force: Force = False,
    embed: Annotated[
        bool,
        typer.Option(
            "--embed/--no-embed",
            help="Put the figures inside report.html (one file to share), or link to img/ "
            "(a small page that needs its folder).",
            rich_help_panel=OUTPUT,
        ),
    ] = True,
    throughput: Annotated[
        bool,
        typer.Option(
            "--throughput",
            help="Draw the TFLOP/s of each GEMM by M too, beside its speedup (the tables hold the TFLOP/s of every cell either "
            "way): about twice the figures.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
) -> None:
    """Write a Markdown report and a self-contained HTML one; prints each path written.

    Per GEMM and dtype: the winner by M with its speedup and % of roofline, the tables and the figures."""
    from gemmbench.plot import report as rep_mod  # heavy (matplotlib, pandas), as store is
    from gemmbench.results.store import StoreError

    if out_path.is_file():
        raise fail(f"--out {out_path}: give a folder (report.md, report.html and img/ go inside it)")
    runs, profiles, files, _ = _selected(results, shapes, variants, dtype, tp, gpu, baseline)
    if runs is None and profiles is None:  # only `layer` tables: `plot --kind layer` draws them
        raise fail(f"nothing to report in {', '.join(map(str, results))}: no run file or profile table "
                   "(`gemmbench plot --kind layer` draws `layer` tables)")  # fmt: skip
    try:
        with err.status(f"building the report of {len(files)} files"):  # drawing every figure takes a while
            rep = rep_mod.build(runs, profiles, files, throughput)
    except StoreError as exc:
        raise fail(str(exc)) from None
    for w in rep.warnings:
        _warn(w)
    refuse_existing(rep_mod.paths(rep, out_path), force)
    try:
        paths = rep_mod.write(rep, out_path, embed)
    except OSError as exc:
        raise fail(f"--out {out_path}: cannot write ({exc.strerror or exc})") from None
    if fmt is OutputFormat.json:  # the paths and the winners tables, for scripts (docs/USAGE.md: JSON output)
        print_json({"schema": "gemmbench.report/1", "files": [str(p) for p in paths],
                    "winners": rep_mod.winner_records(runs)})  # fmt: skip
        return
    for p in paths:
        typer.echo(str(p))
    html = paths[-1].stat().st_size
    err.print(f"report: {len(paths)} files, {sum(p.stat().st_size for p in paths) / 1e6:.1f} MB; {paths[-1].name} "
              f"{html / 1e6:.1f} MB{' (figures inside)' if embed else ' (figures linked: keep img/ beside it)'}",
              highlight=False)  # fmt: skip
