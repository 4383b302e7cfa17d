"""The one GPU pool: cells run in worker processes (worker.py), one worker per GPU at a time.

Why workers: a faulting kernel ends the CUDA context of its process and with it every later launch there, so no cell
runs in the process that owns the sweep.  A worker that dies costs only the item in flight (the one it said it
began; the next one in line when it died between items): that item's outcome is an error naming the cause, and a
fresh worker on the same GPU carries on with the rest of the cell.  However many cells hang or fault in a row, each
costs only itself: the fresh worker's start-up probes the GPU, and only a GPU where no worker can start any more (a
lost device) is given up on.  Its remaining cells go to the GPUs still working; with none left the sweep stops
(PoolError) and the cells never run have no outcome at all, so that `--resume` runs them.

The pool knows no task: a Cell is a task name, a JSON payload and the items it produces one outcome each (variant
names, a tuning job, a layer plan).  What a worker sends back goes to a Sink, which the command adapting the engine
provides (rows to a file, a progress bar, a table).  Tests drive the pool with fake workers (`start=`).
One worker process and how it starts (WorkerProcess, start_worker, WorkerOptions): worker_process.py.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, replace
from typing import Callable, Optional

from gemmbench.engine import worker_process
from gemmbench.engine.worker_process import PoolError, WorkerOptions, WorkerProcess


def _start(opts: WorkerOptions, gpu: Optional[int], prefix: tuple = ()) -> WorkerProcess:
    """worker_process.start_worker, looked up at each call (a test patches it there)."""
    return worker_process.start_worker(opts, gpu, prefix)


@dataclass(frozen=True)
class Cell:
    """One unit of scheduling: a task over one problem (or one layer plan), producing one outcome per item."""

    task: str  # "time" | "check" | "tune" | "profile" | "layer": what worker.py runs
    payload: dict  # JSON: the problem and the task's options
    items: tuple[str, ...]  # what it produces, one outcome each (variant names, or one job key)
    label: str  # for progress lines and for blame
    cost: float = 1.0  # for sharing cells among GPUs (shard.cost)
    prefix: tuple[str, ...] = ()  # a tool the worker runs under (ncu, nsys, compute-sanitizer): a worker of its own
    timeout_s: Optional[float] = None  # an item taking longer is stopped and blamed


class Sink:
    """Where a pool's events go (a command subclasses it; what it does not need stays a no-op).  Called under one
    lock, so a sink may update one progress bar and one file."""

    def begin(self, cell: Cell, item: str, phase: str, gpu: Optional[int]) -> None:
        """Work on `item` that could fault starts (phase: make, check, time, tune, profile, layer)."""

    def result(self, cell: Cell, item: str, rows: list, passed: bool, gpu: Optional[int]) -> None:
        """`item` is finished: its rows (any status)."""

    def lost(self, cell: Cell, item: str, reason: str, gpu: Optional[int]) -> None:
        """`item` has no outcome from its worker (it died or hung on it): why."""

    def note(self, text: str) -> None:
        """A line for the user (a GPU given up, a fresh worker)."""

    def closed(self, cell: Cell, log: str, code: int) -> None:
        """A cell's own worker (prefix) has exited; its output (the tool's too) and exit code."""


def parse_gpus(text: str, count: int) -> list[int]:
    """'all' or '0,1,3' -> indices of this host's GPUs (count of them visible)."""
    if count == 0:
        raise PoolError("--gpus needs CUDA GPUs, and this machine has none")
    if text.strip() == "all":
        return list(range(count))
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ids = []
    if not ids:
        raise PoolError(f"--gpus {text!r}: give 'all' or GPU indices, comma-separated (e.g. 0,1)")
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise PoolError(f"--gpus {text!r}: no GPU {bad[0]} here (this machine has {count}: 0..{count - 1})")
    return list(dict.fromkeys(ids))


# ---------------------------------------------------------------- the pool


def split(cells: list[Cell], n: int) -> list[list[Cell]]:
    """n lists, balanced by cost (largest first onto the least loaded), each in the cells' own order."""
    owner, load = {}, [0.0] * n
    for i in sorted(range(len(cells)), key=lambda i: -cells[i].cost):
        s = min(range(n), key=lambda j: (load[j], j))
        owner[i], load[s] = s, load[s] + cells[i].cost
    return [[c for i, c in enumerate(cells) if owner[i] == s] for s in range(n)]


class _SlotLost(Exception):
    """A GPU is given up on (no worker can start on it); `rest`: what is left of the cell it was on."""

    def __init__(self, why: str, rest: Optional[Cell]):
        super().__init__(why)
        self.why, self.rest = why, rest


def _rest(cell: Cell, left: list) -> Optional[Cell]:
    return replace(cell, items=tuple(left)) if left else None


class Pool:
    """Runs cells on `gpus` (None: this process's one device), one worker per GPU at a time.  Workers are kept
    between run() calls; close() ends them."""

    def __init__(self, opts: WorkerOptions, sink: Sink, gpus: Optional[list[int]] = None,
                 start: Optional[Callable[..., WorkerProcess]] = None):  # fmt: skip
        # worker_process.start_worker looked up when a worker starts, not at import: tests replace it
        self.opts, self.sink, self.start = opts, sink, start or _start
        self.slots: list[Optional[int]] = list(gpus) if gpus else [None]
        self.lock = threading.RLock()
        self.workers: dict[Optional[int], WorkerProcess] = {}
        self.lost: dict[Optional[int], _SlotLost] = {}
        self.leftover: collections.deque = collections.deque()
        self.ran = False  # some item has an outcome: a later loss leaves items "not run", not the whole sweep
        self.stopping = False  # Ctrl-C: the workers are killed on purpose, and what they were doing is no one's fault

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for w in list(self.workers.values()):
            w.close()
        self.workers.clear()

    def kill(self) -> None:
        """Ctrl-C: no worker may outlive the sweep and keep a GPU busy."""
        self.stopping = True
        for w in list(self.workers.values()):
            w.kill()
        self.close()

    # -- events ---------------------------------------------------------------------------
    def _call(self, name: str, *args) -> None:
        with self.lock:
            self.ran = self.ran or name in ("result", "lost")
            getattr(self.sink, name)(*args)

    # -- the sweep ------------------------------------------------------------------------
    def run(self, cells: list[Cell]) -> None:
        """Every item of every cell ends as exactly one result or lost event, unless no GPU is left: then PoolError
        says why and how many items never ran (they have no outcome)."""
        alive = [s for s in self.slots if s not in self.lost]
        plans = dict(zip(alive, split(list(cells), len(alive)), strict=True)) if alive else {}
        try:
            while plans:
                if len(plans) == 1:  # one GPU: in this thread, so that Ctrl-C lands where it is expected
                    [(slot, todo)] = plans.items()
                    self._slot(slot, collections.deque(todo))
                else:
                    self._threads(plans)
                alive = [s for s in self.slots if s not in self.lost]
                todo = list(self.leftover)
                self.leftover.clear()
                plans = dict(zip(alive, split(todo, len(alive)), strict=True)) if todo and alive else {}
                if todo and not alive:
                    self._no_gpu_left(todo)
        except BaseException:
            self.kill()
            raise

    def _threads(self, plans: dict) -> None:
        raised: list = []  # a sink's exception (a file that cannot be written) ends the sweep in the main thread

        def slot(s: Optional[int], todo: list) -> None:
            try:
                self._slot(s, collections.deque(todo))
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the main thread
                raised.append(exc)

        threads = [threading.Thread(target=slot, args=(s, t), daemon=True) for s, t in plans.items() if t]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():  # a timed join lets Ctrl-C reach the main thread
                t.join(0.2)
        if raised:
            raise raised[0]

    def _no_gpu_left(self, cells: list[Cell]) -> None:
        why = "; ".join(self._where(s) + lost.why for s, lost in self.lost.items())
        if self.slots != [None]:
            why = f"no GPU can start a worker: {why}"
        items = sum(len(c.items) for c in cells)
        raise PoolError(f"{why}; {items} still to run" if self.ran else why)

    @staticmethod
    def _where(slot: Optional[int]) -> str:
        return "" if slot is None else f"GPU {slot}: "

    def _slot(self, slot: Optional[int], todo: collections.deque) -> None:
        """One GPU's cells, then what lost GPUs left; on giving up, its remaining cells go to the leftover."""
        while True:
            with self.lock:
                if not todo and self.leftover:
                    todo.append(self.leftover.popleft())
            if not todo:
                return
            try:
                self._cell(slot, todo[0])
            except _SlotLost as lost:
                with self.lock:
                    self.lost[slot] = lost
                    left = ([lost.rest] if lost.rest else []) + list(todo)[1:]
                    self.leftover.extend(left)
                if slot is not None:
                    self._call("note", f"GPU {slot} given up ({lost.why}); its {len(left)} remaining cells go to "
                                       "the GPUs still working, if any")  # fmt: skip
                return
            todo.popleft()

    def _worker(self, slot: Optional[int], cell: Cell) -> WorkerProcess:
        if cell.prefix:  # a tool around the worker: one worker per cell, so that its report is the cell's
            return self.start(self.opts, slot, cell.prefix)
        if slot not in self.workers:
            self.workers[slot] = self.start(self.opts, slot, ())
        return self.workers[slot]

    def _cell(self, slot: Optional[int], cell: Cell) -> None:
        """Runs `cell` to completion across worker deaths (each costs the item in flight)."""
        left, resent = list(cell.items), False
        while left and not self.stopping:
            try:
                w = self._worker(slot, cell)
            except PoolError as exc:
                if not cell.prefix:
                    raise _SlotLost(str(exc), _rest(cell, left)) from None
                for item in left:  # the tool around the worker failed (no permission, say): this cell's outcome
                    self._call("lost", cell, item, f"before start: {exc}", slot)
                self._call("closed", cell, str(exc), -1)
                return
            try:
                w.send(dict(cell.payload, task=cell.task, items=list(left)))
            except OSError:  # the worker died between cells, with nothing of this cell in flight: a fresh one, once
                if not resent:
                    self.workers.pop(slot, None)
                    w.close()
                    resent = True
                    continue
            if self._events(slot, cell, w, left):  # the task ended normally
                if cell.prefix:
                    self._close_own(cell, w)
                return None
            self.workers.pop(slot, None)  # the next start probes the GPU: a lost device ends this slot there
            if left and slot is not None:
                self._call("note", f"GPU {slot}: a worker died; a fresh one takes the rest of {cell.label}")
        return None

    def _close_own(self, cell: Cell, w: WorkerProcess) -> None:
        """A cell's own worker: ended after its task, so that its tool writes its report; then the sink is told."""
        assert w.proc.stdin is not None
        w.proc.stdin.close()
        self._call("closed", cell, w.output(), w.wait())
        w.close()

    def _events(self, slot: Optional[int], cell: Cell, w: WorkerProcess, left: list) -> bool:
        """Reads one task's events.  True when the task completed; False when the worker died (or was stopped) and
        its in-flight item was recorded as lost."""
        current, phase, fatal = None, "before start", False
        limit = cell.timeout_s if cell.timeout_s is not None else self.opts.watchdog_s
        while True:
            why: Optional[str]  # the watchdog's reason, or None while the worker answers
            try:
                ev = w.next_event(limit)
            except TimeoutError:  # the watchdog: a phase silent this long is a hang, not a slow cell
                w.kill()
                ev, why = None, f"timeout after {limit:.0f} s ({phase})"
            else:
                why = None
            if ev is None and self.stopping:  # killed by the sweep's own Ctrl-C: no outcome, no blame
                w.close()
                return False
            if ev is None:
                why = why or w.death_reason()
                lost = why if why.startswith("timeout after") else f"{phase}: {why}"
                if not fatal and left:  # the worker reports its own casualty before a fatal exit
                    blame = current if current in left else left[0]
                    self._call("lost", cell, blame, lost, slot)
                    left.remove(blame)
                if cell.prefix:  # after `lost`: the tool's own report (a sanitizer's finding) may explain the death
                    self._call("closed", cell, w.output(), w.wait())
                w.close()
                return False
            kind = ev["ev"]
            if kind == "begin":
                current, phase = ev["item"], ev["phase"]
                self._call("begin", cell, current, phase, slot)
            elif kind == "result":
                if ev["item"] in left:
                    left.remove(ev["item"])
                    self._call("result", cell, ev["item"], ev.get("rows", []), bool(ev.get("passed")), slot)
                current = None if current == ev["item"] else current
            elif kind == "fatal":
                fatal = True
            elif kind == "done":
                for item in list(left):  # a task must answer every item: one that did not is lost, by name
                    self._call("lost", cell, item, "the worker finished its task without an outcome for it", slot)
                    left.remove(item)
                return True
