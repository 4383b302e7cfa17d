"""The one builder of a run row's cell part, used on both sides of the worker pipe: a worker's rows (tasks/time_task.py) and
the rows the sweep writes for what no worker could answer (a death, a hang: sweep.py).  Every row then carries the
same columns by construction: the cell, its outcome, how it was timed, on which inputs, and where."""

from __future__ import annotations

from typing import Any, Optional

from gemmbench.measure.timing import L2_STATE
from gemmbench.results.cells import cell_columns
from gemmbench.shapes import Problem


def cell_row(problem: Problem, variant: Any, status: str, reason: Optional[str], timing: str, inputs: str,
             provenance: dict, **measured: Any) -> dict:  # fmt: skip
    """A row of `variant` on `problem`: its cell columns, status and reason (None when empty), timing mode and the
    L2 state it implies (a cell may report its own in `measured`), input values, the GPU and build it ran on, then
    what was measured."""
    row = dict(cell_columns(problem, variant), status=status, reason=reason or None, timing_mode=timing,
               l2_state=L2_STATE.get(timing, "cold"), inputs=inputs, **provenance)  # fmt: skip
    row.update(measured)
    return row
