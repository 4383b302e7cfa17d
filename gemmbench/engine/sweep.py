"""`gemmbench run` over the engine: a problem's variants are one `time` cell (checked, then timed side by side), the
pool runs the cells on one GPU or several, and every row goes to one writer as it lands.  Under --sanitize each
variant's check first runs alone in a worker under compute-sanitizer, and only the clean ones are timed."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Protocol

from gemmbench import registry
from gemmbench.engine.pool import Cell, Pool, PoolError, Sink
from gemmbench.engine.rows import cell_row
from gemmbench.engine.worker_process import WorkerOptions
from gemmbench.measure import device
from gemmbench.measure.inputs import cell_seed
from gemmbench.results import shard
from gemmbench.shapes import Problem

SANITIZER_PADDING = 1 << 20  # bytes of guard after every allocation under --sanitize


class RowWriter(Protocol):
    """Where the sweep's rows go (store.RunWriter); one that has .flush() is flushed when the sweep ends."""

    def append(self, row: dict, /) -> None: ...


@dataclass
class SweepOptions:
    run_id: str
    worker: WorkerOptions
    seed: int = 0
    sanitize: bool = False
    gpus: Optional[list[int]] = None  # None: this process's one device
    process: int = 0  # run --repeat N: which of the N sweeps (each with fresh workers) this is, stamped on its rows


@dataclass
class Progress:
    """What the command shows while the sweep runs (all optional)."""

    row: Callable[[dict], None] = lambda row: None
    begin: Callable[[str], None] = lambda what: None
    note: Callable[[str], None] = lambda text: None


def time_cells(cells: list, seed: int) -> list[Cell]:
    """[(problem, [variant names])] -> the engine's cells."""
    return [
        Cell(
            "time",
            {"problem": asdict(p), "seed": cell_seed(seed, p)},
            tuple(names),
            p.label,
            cost=shard.cost(p) * len(names),
        )  # fmt: skip
        for p, names in cells
    ]


def error_row(problem: Problem, variant: str, reason: str, worker: WorkerOptions, gpu: Optional[int] = None) -> dict:
    """The row of a cell whose worker died on it (the worker could not write it), naming the GPU it ran on."""
    return cell_row(problem, registry.get(variant), "error", reason, worker.timing, worker.inputs,
                    device.provenance(gpu or 0))  # fmt: skip


@dataclass
class _Sink(Sink):
    """Rows to the writer (stamped with the run and the time), progress to the command."""

    writer: RowWriter
    opts: SweepOptions
    progress: Progress
    passed: dict = field(default_factory=dict)  # sanitizer cells: label -> variants whose check passed
    held: dict = field(default_factory=dict)  # sanitizer cells: label -> their rows, kept until the log is read

    def _emit(self, row: dict) -> None:
        row = dict(
            row,
            run_id=self.opts.run_id,
            process=self.opts.process,
            timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        self.writer.append(row)
        self.progress.row(row)

    def begin(self, cell: Cell, item: str, phase: str, gpu: Optional[int]) -> None:
        self.progress.begin(f"{cell.label}  {item} ({phase})")

    def result(self, cell: Cell, item: str, rows: list, passed: bool, gpu: Optional[int]) -> None:
        if cell.task == "check":  # judged once compute-sanitizer's log is read (closed)
            self.held.setdefault(cell.label, []).extend(rows)
            if passed:
                self.passed.setdefault(cell.label, []).append(item)
            return
        for row in rows:
            self._emit(row)

    def lost(self, cell: Cell, item: str, reason: str, gpu: Optional[int]) -> None:
        row = error_row(Problem(**cell.payload["problem"]), item, reason, self.opts.worker, gpu)
        if cell.task == "check":  # compute-sanitizer's log, read when the worker has exited, may explain it
            self.held.setdefault(cell.label, []).append(row)
        else:
            self._emit(row)

    def note(self, text: str) -> None:
        self.progress.note(text)

    def closed(self, cell: Cell, log: str, code: int) -> None:
        """A sanitizer cell's worker has exited: compute-sanitizer's finding, if any, explains whatever happened."""
        path = cell.payload["sanitizer_log"]
        report = first_sanitizer_error(Path(path).read_text(errors="replace")) if os.path.exists(path) else ""
        rows = self.held.pop(cell.label, [])
        if report:
            self.passed.pop(cell.label, None)
            [name] = cell.items
            rows = [error_row(Problem(**cell.payload["problem"]), name, f"check: compute-sanitizer: {report}",
                              self.opts.worker)]  # fmt: skip
        for row in rows:
            self._emit(row)


def first_sanitizer_error(text: str) -> str:
    """'Invalid __global__ read of size 2 bytes at _overread_kernel+0x90 ...' from a memcheck log, or ''."""
    lines = [ln.strip("= ").strip() for ln in text.splitlines()]
    starts = ("Invalid", "Program hit", "Uninitialized", "Misaligned", "Out-of-range")
    for i, ln in enumerate(lines):
        if ln.startswith(starts):
            where = next((x for x in lines[i + 1 : i + 4] if x.startswith("at ")), "")
            return f"{ln} {where}".strip()[:400]
    return ""


def _sanitizer_cells(cells: list, seed: int, folder: Path) -> list[Cell]:
    """One cell per (problem, variant), each in a worker of its own under memcheck: its log is complete only when
    its process has exited."""
    out = []
    for i, (p, names) in enumerate(cells):
        for name in names:
            log = folder / f"{i}-{name}.log"
            # --padding: small allocations sit side by side, so an overread would land in a neighbour (valid
            # memory, no report); a guard region after each allocation makes it visible
            prefix = ("compute-sanitizer", "--tool", "memcheck", "--padding", str(SANITIZER_PADDING),
                      "--log-file", str(log), "--print-limit", "20")  # fmt: skip
            payload = {"problem": asdict(p), "seed": cell_seed(seed, p), "sanitizer_log": str(log)}
            out.append(Cell("check", payload, (name,), f"{p.label} {name}", prefix=prefix))
    return out


def sanitizer_worker(worker: WorkerOptions) -> WorkerOptions:
    """The options of a worker that runs checks under compute-sanitizer: every tensor its own allocation, so that an
    overread shows; no ceilings, which its rows do not carry and which memcheck cannot time."""
    env = dict(worker.env, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    return WorkerOptions(**{**asdict(worker), "env": env, "ceilings": False})


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
    sink = _Sink(writer, opts, progress or Progress())
    with Pool(opts.worker, sink, opts.gpus) as pool:
        if opts.sanitize:
            with (
                tempfile.TemporaryDirectory(prefix="gemmbench-sanitizer-") as folder,
                Pool(sanitizer_worker(opts.worker), sink, opts.gpus) as sp,
            ):
                sp.run(_sanitizer_cells(cells, opts.seed, Path(folder)))
            clean = [(p, [n for n in names if n in sink.passed.get(f"{p.label} {n}", [])]) for p, names in cells]
            cells = [(p, names) for p, names in clean if names]
        pool.run(time_cells(cells, opts.seed))
