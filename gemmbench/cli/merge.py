"""`gemmbench merge` (registered on cli.app): the part files of a sharded sweep back into one run file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gemmbench.cli.common import err, fail
from gemmbench.cli.formats import OutputFormat, print_json
from gemmbench.cli.options import OUTPUT, DocFormat, Force
from gemmbench.results.run_file import lock, refuse_existing

SHOWN = 10  # cells named in a message; the rest are counted


def _named(keys: list) -> str:
    from gemmbench.results.shard import describe  # not at --help (hashlib)

    shown = "; ".join(describe(k) for k in keys[:SHOWN])
    return shown + (f"; and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def _sweeps(files: list) -> dict[Path, Optional[str]]:
    """{file: what sweep it holds}: a shard part's sweep (its shard metadata), else the run's own fingerprint (the
    set, the cells and how they were measured: engine.sweep_fingerprint), else None (a file written without one)."""
    import pyarrow.parquet as pq  # not at --help

    from gemmbench.engine import sweep_fingerprint
    from gemmbench.results import shard as shard_mod

    out: dict[Path, Optional[str]] = {}
    for f in files:
        part = shard_mod.read_metadata(f)
        if part is not None:
            out[f] = f"shards of sweep {part['sweep']}"
            continue
        fp = sweep_fingerprint.decode(pq.read_schema(f).metadata)
        out[f] = None if fp is None else f"{fp.get('shape_set')} ({fp.get('n_cells')} cells, {fp.get('cells')})"
    return out


def _mixed(files: list, allow_mixed: bool) -> None:
    """Files of more than one sweep (whole runs, or whole runs beside shard parts) are refused in one line, or, with
    --allow-mixed, joined with one line saying what was joined."""
    sweeps = _sweeps(files)
    kinds = sorted({s or "a run without a sweep fingerprint" for s in sweeps.values()})
    if len(kinds) < 2:
        return
    what = "; ".join(kinds[:SHOWN]) + (f"; and {len(kinds) - SHOWN} more" if len(kinds) > SHOWN else "")
    if not allow_mixed:
        raise fail(f"merge: the files hold {len(kinds)} different sweeps ({what}): merge the parts of one sweep, or "
                   "pass --allow-mixed to join them")  # fmt: skip
    err.print(escape(f"merge: joining {len(files)} files of {len(kinds)} different sweeps: {what}"), highlight=False,
              soft_wrap=True)  # fmt: skip


def merge(
    parts: Annotated[list[Path], typer.Argument(help="Part files (or folders of them) of one sharded sweep.")],
    out_path: Annotated[Path, typer.Option("--out", help="The merged run file (.parquet).", rich_help_panel=OUTPUT)],
    allow_missing: Annotated[
        bool, typer.Option(help="Write the merged file even when cells or shards are missing.")
    ] = False,
    allow_mixed: Annotated[
        bool, typer.Option(help="Join runs of different sweeps (other sets, cells or timing) into one file.")
    ] = False,
    force: Force = False,
    fmt: DocFormat = OutputFormat.table,
) -> None:
    """Join the parts of a sweep run with `--shard I/N` into one file, after checking that every cell is there once.

    Names the missing and duplicated cells (exit 1) and writes nothing then, unless --allow-missing (duplicates are never written: which copy is right is not the merger's call)."""
    from gemmbench.results import shard as shard_mod  # not at --help (hashlib); store is heavy (pandas, pyarrow)
    from gemmbench.results.store import StoreError, result_files, write_rows

    if out_path.suffix != ".parquet":
        raise fail(f"--out {out_path}: give a .parquet file path")
    lock(out_path)  # a run or another merge writing it now is refused, before anything is read
    refuse_existing([out_path], force)
    try:
        files = [f for p in parts for f in result_files(p)]
        if out_path.resolve() in {f.resolve() for f in files}:
            raise fail(f"--out {out_path}: is one of the parts; write the merged file elsewhere")
        rows, report = shard_mod.read_parts(files)
        _mixed(files, allow_mixed)
    except (StoreError, shard_mod.ShardError) as exc:
        raise fail(str(exc)) from None
    problems = []
    for i, n in report.shards_missing:
        problems.append(f"shard {i} ({n} cells) has no part")
    if report.missing:
        problems.append(f"{len(report.missing)} cells missing: {_named(report.missing)}")
    if report.duplicated:
        problems.append(f"{len(report.duplicated)} cells in more than one part: {_named(report.duplicated)}")
    for line in problems:
        err.print(escape(f"merge: {line}"), highlight=False, soft_wrap=True)
    if report.duplicated or (problems and not allow_missing):
        err.print(
            escape(
                f"nothing written to {out_path}"
                + ("" if report.duplicated else " (--allow-missing writes what is there)")
            )
        )
        raise typer.Exit(1)
    try:
        write_rows(out_path, rows)
    except (OSError, StoreError) as exc:
        raise fail(f"cannot write {out_path}: {exc}") from None
    err.print(escape(f"{len(rows)} rows from {len(files)} parts -> {out_path}"), highlight=False)
    if fmt is OutputFormat.json:
        print_json({"schema": "gemmbench.merge/1", "file": str(out_path), "rows": len(rows),
                    "parts": [str(f) for f in files], "problems": problems})  # fmt: skip
    if problems:
        raise typer.Exit(1)
