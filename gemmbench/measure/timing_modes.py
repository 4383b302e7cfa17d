"""What a timing mode means to gemmbench, in one table that every module reads (as gemmbench.dtypes is for dtypes): the
L2 state its rows record, the sampler gemmbench.measure.timing takes its samples with (its docstring says how each
measures), the calls one sample runs (telemetry's energy per call), the measured bandwidth ladder that bounds its rows
(gemmbench.measure.ceilings), its words in a figure's title (gemmbench.plot.style) and in `run --timing`'s help.

No torch here: `gemmbench --help` lists the modes and their help without importing it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gemmbench.choices import Choice

# Calls one sample runs
ONE = "one"  # one call
PER_COPY = "per copy"  # a graph of one call per distinct input copy, the sample divided by the copies
CHOSEN = "chosen"  # as many as fill ~1 ms, chosen inside the sampler (not known outside it)


@dataclass(frozen=True)
class Mode:
    name: str  # the `timing_mode` column and --timing value
    l2_state: str  # the `l2_state` column: what L2 holds when a timed call starts
    sampler: str  # how timing.Timer takes its samples: a key of timing.SAMPLERS (names, so no torch import here)
    calls: str  # calls one sample runs: ONE, PER_COPY or CHOSEN
    energy_per_call: bool  # the energy counter around its batches divides into calls (else no J/call: telemetry)
    ladder: str  # the bandwidth ladder that bounds its rows: the mode ceilings measures it in, and caches it under
    label: str  # how a figure's title names it (plot.style.subtitle)
    help: str  # its words in `run --timing`'s help
    gpu: bool = True  # needs a CUDA GPU
    captures_graph: bool = False  # times a CUDA graph: a launch that syncs with or copies from the host cannot run

    @property
    def over_copies(self) -> bool:
        """Cycles through distinct input copies (timing.plan_copies sizes them)."""
        return self.calls == PER_COPY

    def calls_per_sample(self, copies: int) -> Optional[int]:
        """Calls one sample runs when the launch has `copies` input copies; None where the sampler chooses them."""
        return {ONE: 1, PER_COPY: copies}.get(self.calls)


COLD = Mode("cold", "cold", "events", ONE, energy_per_call=True, ladder="cold",
            label="cold timing (L2 emptied before each call)", help="L2 emptied by a read")  # fmt: skip
STREAM = Mode("stream", "streaming", "copies_graph", PER_COPY, energy_per_call=True, ladder="stream",
              label="stream timing (CUDA graph over distinct input copies)", help="CUDA graph over distinct copies",
              captures_graph=True)  # fmt: skip
GRAPH = Mode("graph", "cold", "eviction_graph", ONE, energy_per_call=True, ladder="cold",
             label="graph timing (CUDA graph of eviction + call)", help="CUDA graph of eviction + call",
             captures_graph=True)  # fmt: skip
# no J/call: wall's calls per sample are chosen inside its sampler; cupti's batches hold the profiler's idle host time
WALL = Mode("wall", "warm", "host", CHOSEN, energy_per_call=False, ladder="cold",
            label="wall timing (host clock, launch included)", help="host clock per eager call, launch included",
            gpu=False)  # fmt: skip
CUPTI = Mode("cupti", "cold", "activity_records", ONE, energy_per_call=False, ladder="cold",
             label="cupti timing (kernel durations only, L2 emptied before each call)",
             help="kernel durations only, from CUPTI activity records, L2 emptied")  # fmt: skip
ALL = {m.name: m for m in (COLD, STREAM, GRAPH, WALL, CUPTI)}  # in --timing's order
MODES = tuple(ALL)
L2_STATE = {m.name: m.l2_state for m in ALL.values()}
DEFAULT = COLD.name  # --timing's default, and the mode whose rows `layer --best-from` prefers
CPU = WALL.name  # the only mode on a CPU


class TimingMode(Choice):
    """--timing's choices: the names of ALL (a test holds the two equal)."""

    cold = "cold"
    stream = "stream"
    graph = "graph"
    wall = "wall"
    cupti = "cupti"


def get(name: str) -> Mode:
    try:
        return ALL[name]
    except KeyError:
        raise ValueError(f"unknown timing mode {name!r} (choose from {', '.join(ALL)})") from None


def default(gpu: bool) -> str:
    """The mode a measurement takes where none is asked: cold on a GPU, wall on a CPU."""
    return DEFAULT if gpu else CPU


def help_text() -> str:
    """`run --timing`'s help: each mode and its words."""
    return ", ".join(f"{m.name} ({m.help})" for m in ALL.values()) + "."
