"""`gemmbench merge` (registered on cli.app): the part files of a sharded sweep back into one run file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gemmbench.cli.common import err, fail, refuse_existing
from gemmbench.cli.options import OUTPUT, Force

SHOWN = 10  # cells named in a message; the rest are counted


def _named(keys: list) -> str:
    from gemmbench.results.shard import describe  # not at --help (hashlib)

    shown = "; ".join(describe(k) for k in keys[:SHOWN])
    return shown + (f"; and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def merge(
    parts: Annotated[list[Path], typer.Argument(help="Part files (or folders of them) of one sharded sweep.")],
    out_path: Annotated[Path, typer.Option("--out", help="The merged run file (.parquet).", rich_help_panel=OUTPUT)],
    allow_missing: Annotated[
        bool, typer.Option(help="Write the merged file even when cells or shards are missing.")
    ] = False,
    force: Force = False,
) -> None:
    """Join the parts of a sweep run with `--shard I/N` into one file, after checking that every cell is there once.

    Names the missing and duplicated cells (exit 1) and writes nothing then, unless --allow-missing (duplicates are never written: which copy is right is not the merger's call)."""
    from gemmbench.results import shard as shard_mod  # not at --help (hashlib); store is heavy (pandas, pyarrow)
    from gemmbench.results.store import StoreError, result_files, write_rows

    if out_path.suffix != ".parquet":
        raise fail(f"--out {out_path}: give a .parquet file path")
    refuse_existing([out_path], force)
    try:
        files = [f for p in parts for f in result_files(p)]
        if out_path.resolve() in {f.resolve() for f in files}:
            raise fail(f"--out {out_path}: is one of the parts; write the merged file elsewhere")
        rows, report = shard_mod.read_parts(files)
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
    if problems:
        raise typer.Exit(1)
