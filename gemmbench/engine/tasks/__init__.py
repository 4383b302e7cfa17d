"""The engine's tasks, one module each, holding the cells it is sent as (its payload), the parent's side of its results
(its Sink of pool.py) and the worker's side (`work`):

  time     time_task     a problem's variants: check each, then time those that passed side by side (run rows)
  check    time_task     the same check alone (compute-sanitizer runs it in a worker of its own, one variant at a time)
  tune     tune_task     one (problem at its M bucket, variant): search its configs, checked, and store the winner
  profile  profile_task  one (problem, variant): check, warm up, then one launch inside its NVTX range for a profiler
  layer    layer_task    one layer plan: build, check every GEMM, time kernels, eager launches and one CUDA graph

Every task checks with the one `check.check_cell()` before anything is timed, tuned or profiled, and answers each of
its items with exactly one result, sent as soon as it is known."""

from __future__ import annotations

import importlib
from typing import Any, Callable

MODULES = {"time": "time_task", "check": "time_task", "tune": "tune_task", "profile": "profile_task",
           "layer": "layer_task"}  # fmt: skip


def load_all() -> dict[str, Callable[[Any, dict], None]]:
    """task name -> its worker function; a worker imports them all at start-up, where a failed import is reported
    once (startup_failed) rather than as every cell's error."""
    modules = {m: importlib.import_module(f"{__name__}.{m}") for m in set(MODULES.values())}
    return {task: modules[m].work for task, m in MODULES.items()}
