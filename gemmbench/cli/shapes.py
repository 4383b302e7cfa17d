"""`gemmbench shapes from-config`: a shape set from a model's config.json."""

from __future__ import annotations

import sys
import tempfile
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
    """Write a shape set (Llama-family dense or Mixtral-family MoE) from a model's config.json."""
    from gemmbench import shapes as shapes_mod  # not at --help (yaml)

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
