"""`gemmbench shapes from-config`: a shape set from a model's config.json."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from gemmbench.cli.common import err, fail

shapes_app = typer.Typer(no_args_is_help=True, help="Make shape sets.")


@shapes_app.command("from-config")
def shapes_from_config(
    path: Annotated[Path, typer.Argument(help="A Hugging Face config.json on disk.")],
    name: Annotated[Optional[str], typer.Option(help="Name of the set (default: from the config).")] = None,
    out_file: Annotated[
        Optional[Path], typer.Option("--out", help="Where to write the YAML (default: stdout).")
    ] = None,
) -> None:
    """Write a shape set from a model's config.json (README: "from-config").

    Families: Llama, Mistral, Qwen2/3 dense; Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 (MLA), Llama 4, gpt-oss MoE."""
    from gemmbench import hf_config, shape_sets, shapes  # not at --help (yaml)

    try:
        set_name, text = hf_config.from_hf_config(path, name)
        shape_sets.load_text(f"the set made from {path}", text)  # only a set that `run --shapes` accepts is written
    except shapes.ShapeError as exc:
        raise fail(str(exc)) from None
    if out_file is None:
        sys.stdout.write(text)
        return
    try:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(text)
    except OSError as exc:
        raise fail(f"--out {out_file}: cannot write ({exc.strerror})") from None
    err.print(escape(f"wrote shape set {set_name!r} to {out_file}; run it with: gemmbench run --shapes {out_file}"))
