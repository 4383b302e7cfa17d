"""`gemmbench run` over the engine: a problem's variants are one `time` cell (checked, then timed side by side), the
pool runs the cells on one GPU or several, and every row goes to one writer as it lands.  Under --sanitize each
variant's check first runs alone in a worker under compute-sanitizer, and only the clean ones are timed."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gemmbench.engine.pool import Pool, PoolError
from gemmbench.engine.tasks.time_task import Progress, RowWriter, TimeSink, sanitizer_cells, sanitizer_worker
from gemmbench.engine.tasks.time_task import cells as time_cells
from gemmbench.engine.worker_process import WorkerOptions


@dataclass
class SweepOptions:
    run_id: str
    worker: WorkerOptions
    seed: int = 0
    sanitize: bool = False
    gpus: Optional[list[int]] = None  # None: this process's one device
    process: int = 0  # run --repeat N: which of the N sweeps (each with fresh workers) this is, stamped on its rows


def run(cells: list, opts: SweepOptions, writer: RowWriter, progress: Optional[Progress] = None) -> None:
    """Every (problem, variant) of `cells` ends as one row in `writer`, on disk when this returns (its parts: the
    command joins them, store.RunWriter.close).  PoolError when no worker can start."""
    try:
        _run(cells, opts, writer, progress)
    finally:  # whatever ended it (Ctrl-C too), the rows so far are written
        flush = getattr(writer, "flush", None)
        if flush is not None:
            flush()


def _run(cells: list, opts: SweepOptions, writer: RowWriter, progress: Optional[Progress]) -> None:
    if opts.sanitize and not shutil.which("compute-sanitizer"):
        raise PoolError("--sanitize needs compute-sanitizer on the PATH (it ships with the CUDA toolkit, in "
                        "<cuda>/bin or the Nsight Compute install)")  # fmt: skip
    sink = TimeSink(writer, opts.run_id, opts.process, opts.worker, progress or Progress())
    with Pool(opts.worker, sink, opts.gpus) as pool:
        if opts.sanitize:
            with (
                tempfile.TemporaryDirectory(prefix="gemmbench-sanitizer-") as folder,
                Pool(sanitizer_worker(opts.worker), sink, opts.gpus) as sp,
            ):
                sp.run(sanitizer_cells(cells, opts.seed, Path(folder)))
            clean = [(p, [n for n in names if n in sink.passed.get(f"{p.label} {n}", [])]) for p, names in cells]
            cells = [(p, names) for p, names in clean if names]
        pool.run(time_cells(cells, opts.seed))
