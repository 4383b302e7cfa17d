"""One worker per GPU of this host (`gemmbench run --gpus 0,1,…`).

The cells are split across the GPUs by shard.partition (deterministic, balanced by estimated cost).  Each GPU gets
a thread driving its own Runner, whose worker processes see only that GPU (CUDA_VISIBLE_DEVICES), so a fault costs
one cell on one GPU and a fresh worker takes over there (runner.py).  Each GPU's rows go to its own part file as they
complete; at the end the parts are merged into the run's file (shard.check_parts: every cell exactly once) and removed.
A GPU whose worker cannot start at all hands its remaining cells to the others.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable

from gemmbench import shard, store
from gemmbench.runner import RunError, Runner


class GpuError(ValueError):
    """One line for the user."""


def parse_gpus(text: str, count: int) -> list[int]:
    """'all' or '0,1,3' -> indices of this host's GPUs (count of them visible)."""
    if count == 0:
        raise GpuError("--gpus needs CUDA GPUs, and this machine has none")
    if text.strip() == "all":
        return list(range(count))
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ids = []
    if not ids:
        raise GpuError(f"--gpus {text!r}: give 'all' or GPU indices, comma-separated (e.g. 0,1)")
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise GpuError(f"--gpus {text!r}: no GPU {bad[0]} here (this machine has {count}: 0..{count - 1})")
    return list(dict.fromkeys(ids))


def visible_device(gpu: int) -> str:
    """CUDA_VISIBLE_DEVICES for the child on GPU `gpu`.  --gpus counts the GPUs this process sees, so under an
    outer CUDA_VISIBLE_DEVICES (a Slurm allocation, say) index i means that list's i-th entry, not physical GPU i."""
    outer = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return outer[gpu] if gpu < len(outer) else str(gpu)


def run_on_gpus(
    opts,
    cpu: bool,
    cells: list,
    gpus: list[int],
    parts_dir: Path,
    on_row: Callable[[dict], None],
    on_begin: Callable = lambda p, v, ph: None,
) -> list[Path]:
    """Run `cells` with one Runner per GPU; rows are written to parts_dir/<run_id>-gpu<i>.parquet and passed to
    on_row (under a lock: it may update one progress bar).  Returns the part files."""
    lock = threading.Lock()
    parts = [parts_dir / f"{opts.run_id}-gpu{g}.parquet" for g in gpus]
    writers = [store.RunWriter(p) for p in parts]  # one per GPU for the whole run: a part is never restarted
    leftover: list = []  # cells of a GPU whose worker could not start, for the others to take
    failed: dict = {}  # slot -> why its worker could not start

    def drive(slot: int, todo: list) -> None:
        def row(r):
            with lock:
                writers[slot].append(r)
                on_row(r)

        runner = None
        try:
            runner = Runner(
                replace(opts, worker_env={"CUDA_VISIBLE_DEVICES": visible_device(gpus[slot])}), cpu, row, on_begin
            )
            while True:
                with lock:
                    if not todo and leftover:
                        todo.append(leftover.pop(0))
                if not todo:
                    break
                runner.run_problem(*todo[0])
                todo.pop(0)
        except RunError as exc:
            with lock:
                leftover.extend(todo)  # the cell in hand too: none of its variants produced a row
                failed[slot] = f"GPU {gpus[slot]}: {exc}"
        finally:
            if runner is not None:
                runner.close()

    plans = shard.partition(cells, len(gpus))
    while True:
        slots = [i for i in range(len(gpus)) if i not in failed]
        if not slots:
            raise RunError("no GPU could start a worker: " + "; ".join(failed.values()))
        threads = [
            threading.Thread(target=drive, args=(i, list(plans[i]) if plans else []), daemon=True) for i in slots
        ]
        plans = None  # later rounds only share out what a failed GPU left
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not leftover:
            return [p for p in parts if p.exists()]


def merge_parts(parts: list[Path], out: Path) -> int:
    """The parts' rows into `out` (each cell exactly once, or a RunError), then the parts removed."""
    rows, report = shard.read_parts(parts)
    if report.duplicated:
        raise RunError(f"{len(report.duplicated)} cells ran on two GPUs; the parts are kept in {parts[0].parent}")
    store.write_rows(out, rows)
    shutil.rmtree(parts[0].parent, ignore_errors=True)
    return len(rows)
