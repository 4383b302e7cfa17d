"""The options that take tuned fused-MoE configs to and from the inference engines: `tune --export ENGINE DIR`
(gemmbench.configs.engine_export) and `run`/`layer --import-config ENGINE:FILE` (gemmbench.configs.engine_import;
the option is cli.options.ImportConfig)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import err, fail, out
from gemmbench.cli.options import OUTPUT
from gemmbench.configs.inference_engines import InferenceEngine, device_name

Export = Annotated[
    Optional[tuple[InferenceEngine, Path]],
    typer.Option(
        metavar="ENGINE DIR",
        help="Then write the stored fused-MoE configs of the selected expert GEMMs as vllm's or sglang's config "
        "files into DIR (every GPU that has some; docs/USAGE.md says which variants map, and how).",
        rich_help_panel=OUTPUT,
    ),  # fmt: skip
]
ExportOnly = Annotated[
    bool,
    typer.Option(
        help="With --export: write the stored configs without tuning (no GPU needed).", rich_help_panel=OUTPUT
    ),
]
ExportForce = Annotated[
    bool, typer.Option("--force", help="With --export: replace files that exist in DIR.", rich_help_panel=OUTPUT)
]


# ---------------------------------------------------------------- tune --export


def export_plan(export: tuple[InferenceEngine, Path], shapes: str, problems: list, variants: list) -> tuple:
    """(the files the export names, lines on the GEMMs it leaves out), checked before any tuning: one line and exit 2
    where nothing could be exported."""
    from gemmbench.configs import engine_export
    from gemmbench.models import shape_sets  # not at --help (torch through tuning, yaml)

    try:
        return engine_export.plan(export[0], shape_sets.load(shapes), problems, variants)
    except engine_export.ExportError as exc:
        raise fail(str(exc)) from None


def export(export: tuple[InferenceEngine, Path], plan: tuple, variants: list, force: bool, tuned: bool) -> None:
    """Write the engine's files from the stored configs, print what went where; one line and exit 2 where nothing
    is stored or a file exists without --force."""
    from gemmbench.configs import engine_export, tuning  # not at --help

    engine, out_dir = export
    try:
        files, notes = engine_export.build(engine, plan[0], variants)
        engine_export.write(files, out_dir, force)
    except (engine_export.ExportError, tuning.TuningError) as exc:
        again = " (the tuned configs are stored: --export-only writes them without tuning again)" if tuned else ""
        raise fail(f"{exc}{again}") from None
    except OSError as exc:
        raise fail(f"--export {engine.value} {out_dir}: cannot write ({exc.strerror or exc})") from None
    table = Table(title=f"{engine.value} config files written to {out_dir}")
    for col in ("file", "GPU", "entries of", "keys (tokens)", "winners of"):
        table.add_column(col, overflow="fold")
    for f in files:
        keys = f"{f.keys[0]} … {f.keys[-1]} ({len(f.keys)} keys, {len(set(f.buckets.values()))} buckets)"
        table.add_row(escape(f.path), f.gpu, f.gemm, keys, ", ".join(f"{v} {n}" for v, n in f.variants.items()))
    out.print(table)
    how = (f"VLLM_TUNED_CONFIG_FOLDER={out_dir.resolve()} (before its shipped configs)" if engine is InferenceEngine.vllm
           else f"SGLANG_MOE_CONFIG_DIR={out_dir.resolve()} (in place of its shipped configs: copy those in beside)")  # fmt: skip
    err.print(escape(f"{engine.value} reads them with {how}"), highlight=False, soft_wrap=True)
    for f in files:
        for line in f.notes:
            err.print(escape(f"note: {f.path}: {line}"), highlight=False, soft_wrap=True)
    for line in [*plan[1], *notes]:
        err.print(escape(f"not exported: {line}"), highlight=False, soft_wrap=True)


# ---------------------------------------------------------------- run / layer --import-config


def import_configs(specs: Optional[list[str]], variants: Optional[str]) -> tuple[Optional[str], dict]:
    """Register the imported variants (one line and exit 2 for a bad file); say on stderr what each file is and where
    it runs.  Returns the --variants globs with the imported variants added (they always run) and the environment
    the workers need to register them too."""
    from gemmbench.configs import engine_import  # only when --import-config is given
    from gemmbench.measure.device import detect

    if not specs:
        return variants, {}
    try:
        tables = engine_import.register_imports(specs)
    except engine_import.EngineConfigError as exc:
        raise fail(str(exc)) from None
    dev = detect()
    for t in tables:
        name = engine_import.variant_name(t.engine)
        keys = list(t.entries)
        down = f" (w2: {t.down.path.name})" if t.down else ""
        err.print(escape(f"--import-config {t.engine.value}: {t.path.name}{down}: {t.label}, {len(keys)} entries "
                         f"{min(keys)} … {max(keys)} tokens -> {name}"), highlight=False, soft_wrap=True)  # fmt: skip
        here = device_name(t.engine, dev.name) if dev.kind == "cuda" else None
        if here is not None and here != t.device:
            err.print(escape(f"warning: {t.path.name} was tuned on {t.device}; this GPU is {here}"), highlight=False,
                      soft_wrap=True)  # fmt: skip
    names = sorted({engine_import.variant_name(t.engine) for t in tables})
    if variants is not None:
        variants = ",".join([variants, *names])
    return variants, engine_import.worker_env(specs)
