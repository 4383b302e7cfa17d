"""`gemmbench shapes from-config`: a shape set from a model's config.json."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gemmbench.cli.common import err, fail
from gemmbench.cli.options import OUTPUT, Force

shapes_app = typer.Typer(no_args_is_help=True, help="Make shape sets.")


@shapes_app.command("from-config")
def shapes_from_config(
    path: Annotated[Path, typer.Argument(help="A Hugging Face config.json on disk.")],
    name: Annotated[
        Optional[str], typer.Option(help="Name of the set (default: _name_or_path, else the file's or folder's).")
    ] = None,
    out_file: Annotated[
        Optional[Path], typer.Option("--out", help="Where to write the YAML (default: stdout).", rich_help_panel=OUTPUT)
    ] = None,
    family: Annotated[
        Optional[str],
        typer.Option(
            "--as",
            metavar="FAMILY",
            help="Read the config as this architecture (e.g. LlamaForCausalLM) when its own is one gemmbench does "
            "not know but is built the same way; every field read and ignored is listed on stderr.",
        ),
    ] = None,
    force: Force = False,
) -> None:
    """Write a shape set from a model's config.json (docs/USAGE.md: "from-config").

    Families: Llama, Mistral, Qwen2/3 dense; Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 (MLA), Llama 4, gpt-oss MoE."""
    from gemmbench import shapes  # not at --help (yaml)
    from gemmbench.models import hf_config, shape_sets

    if out_file is not None and out_file.exists() and not force:
        raise fail(f"--out {out_file} exists; --force replaces it")
    try:
        made = hf_config.convert(path, name, family=family)
        shape_sets.load_text(f"the set made from {path}", made.text)  # only a set `run --shapes` accepts is written
    except shapes.ShapeError as exc:
        raise fail(str(exc)) from None
    if family is not None:  # a family it was not written for: show what it took from the config, and what not
        err.print(escape(f"read as {made.family}: {', '.join(made.read)}"), highlight=False, soft_wrap=True)
        err.print(escape(f"ignored: {', '.join(made.ignored) or 'nothing'}"), highlight=False, soft_wrap=True)
    if out_file is None:
        sys.stdout.write(made.text)
        return
    made_folder = not out_file.parent.exists()
    try:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(made.text)
    except OSError as exc:
        raise fail(f"--out {out_file}: cannot write ({exc.strerror})") from None
    folder = f" (made the folder {out_file.parent})" if made_folder else ""
    err.print(escape(f"wrote shape set {made.name!r} to {out_file}{folder}; run it with: gemmbench run --shapes "
                     f"{out_file}"), highlight=False)  # fmt: skip
