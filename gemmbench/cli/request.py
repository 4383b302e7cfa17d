"""The sweep a `run` asks for, as one frozen value built once from its options: what it measures and how, never where
it writes or what it prints.  `run`'s options take their defaults from it, and `--ab` gives another build the same
sweep from it (argv), so the options and their defaults are written once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gemmbench.cli.formats import InputValues, LayoutChoice
from gemmbench.measure.timing_modes import TimingMode


@dataclass(frozen=True)
class SweepRequest:
    """One field per sweep option of `run`, named as its parameter (the flag is --name with '-' for '_')."""

    shapes: str
    variants: Optional[str] = None
    dtype: str = "fp8,bf16"
    m: Optional[str] = None
    routing: str = "uniform"
    scaling: Optional[str] = None
    fp8_accum: Optional[str] = None
    plugin: tuple[Path, ...] = field(default=())
    import_config: tuple[str, ...] = field(default=())
    retune: bool = False
    borrow: bool = False
    no_store: bool = False
    no_own: bool = False
    seed: int = 0
    tp: str = "1"
    dp: str = "1"
    ep: str = "1"
    layout: LayoutChoice = LayoutChoice.vllm
    timing: TimingMode = TimingMode.cold
    inputs: InputValues = InputValues.randn
    budget: float = 0.5
    shard: Optional[str] = None
    gpus: Optional[str] = None
    cell_timeout: Optional[float] = None
    sanitize: bool = False

    @classmethod
    def of(cls, given: dict[str, Any]) -> SweepRequest:
        """The request of a command's parameters (its locals(): the fields are picked out, lists become tuples)."""
        values = {f.name: given[f.name] for f in dataclasses.fields(cls)}
        for name in ("plugin", "import_config"):
            values[name] = tuple(values[name] or ())
        return cls(**values)

    def options(self) -> list[tuple[str, Any, Any]]:
        """(flag, value, default) of every option, in field order: what cli.ab.sweep_args turns into words."""
        out = []
        for f in dataclasses.fields(self):
            value, default = getattr(self, f.name), f.default
            if isinstance(value, tuple):
                value, default = [str(v) for v in value], []
            elif hasattr(value, "value"):  # the single-choice Enums: their word
                value, default = value.value, getattr(default, "value", default)
            out.append((f"--{f.name.replace('_', '-')}", value, default))
        return out
