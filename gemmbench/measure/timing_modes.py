"""The names of the timing modes and the L2 state each leaves a kernel in: what gemmbench.measure.timing measures (its
docstring says how), and what `gemmbench run --timing` offers.  Apart from gemmbench.measure.timing because that one imports
torch, and `gemmbench --help` lists the modes without importing it."""

from __future__ import annotations

from gemmbench.choices import Choice


class TimingMode(Choice):
    cold = "cold"  # the default: L2 emptied by a read before every sample
    stream = "stream"  # a CUDA graph over distinct copies of the inputs
    graph = "graph"  # a CUDA graph of [eviction, call] replayed
    wall = "wall"  # host wall time per eager call (the only mode on a CPU)
    cupti = "cupti"  # kernel-only: the call's kernel durations from CUPTI activity records, L2 emptied before each


MODES = tuple(m.value for m in TimingMode)
L2_STATE = {"cold": "cold", "graph": "cold", "stream": "streaming", "wall": "warm", "cupti": "cold"}
