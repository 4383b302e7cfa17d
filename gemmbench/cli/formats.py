"""Output formats and single-choice options: the Enums Typer shows in --help (`<table|json>`) and completes in the
shell, the parser that refuses any other value in one line (exit 2) worded like every other gemmbench option, and
the one writer of the JSON documents that `--format json` prints.

A JSON document is one object on stdout and nothing else there (progress, banners and warnings stay on stderr); its
first key, `schema`, names the document and its version ("gemmbench.run/1"): a field is only ever added within a
version, and a change that could break a reader makes a new version.  NaN and missing values are null."""

from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any, Callable, Optional

import typer

from gemmbench.choices import Choice

try:  # Typer >= 0.29 carries its own copy of click (as in common.py)
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older Typer on click
    from click.exceptions import UsageError  # type: ignore[assignment]


class OutputFormat(Choice):
    table = "table"  # rich tables for people
    json = "json"  # one JSON document for scripts


class LayoutChoice(Choice):
    """--layout: whose GEMMs (gemmbench.models.sharding.LAYOUTS, which this must list)."""

    vllm = "vllm"
    sglang = "sglang"
    hf = "hf"


class InputValues(Choice):
    """--inputs: the values timed calls run on (gemmbench.measure.inputs.VALUES, which this must list)."""

    randn = "randn"
    uniform = "uniform"
    ones = "ones"


class CompareFormat(Choice):
    table = "table"
    markdown = "markdown"  # a PR comment
    json = "json"


def choice(kind: type[Enum], option: str) -> Callable[[Any], Enum]:
    """Typer's `parser` for an Enum option: the member named by the value, or a usage error of one line,
    "--timing 'fast': choose from cold, stream, graph, wall" (Typer's own says "Value error, 'fast' is not one
    of …").  The choices in --help and the shell's completions still come from the Enum annotation."""
    names = [m.value for m in kind]

    def parse(value: Any) -> Enum:
        if isinstance(value, kind):
            return value
        try:
            return kind(value)
        except ValueError:
            raise UsageError(f"{option} {value!r}: choose from {', '.join(names)}") from None

    return parse


def format_option(help: str, panel: Optional[str] = None) -> Any:
    """`--format table|json`; `help` says what each prints; `panel`: its --help panel (cli.options)."""
    return typer.Option("--format", parser=choice(OutputFormat, "--format"), help=help, rich_help_panel=panel)


def plain(value: Any) -> Any:
    """`value` with NaN, pandas' NA and numpy's scalars as JSON has them (null, numbers); containers recursively."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return None if str(value) in ("<NA>", "NaT") else str(value)  # pandas' NA; anything else as its text


def print_json(doc: dict) -> None:
    """The document on stdout, alone (one line per field, for diffs and `jq`)."""
    typer.echo(json.dumps(plain(doc), indent=1, ensure_ascii=False, allow_nan=False))
