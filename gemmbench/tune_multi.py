"""`gemmbench tune --gpus`: one child process per GPU, each tuning its share of the jobs.

Why children: a faulting config kills the CUDA context of the process it runs in, and with it every later job
there.  A child per GPU (pinned with CUDA_VISIBLE_DEVICES) confines a fault to the job it was on: the driver
records that job as failed and starts a fresh child on the same GPU for the jobs the dead one had left.  A GPU
whose children die MAX_DEATHS times in a row without tuning anything is broken rather than unlucky, so it is
given up on and its remaining jobs go to the other GPUs.

Each winning config is its own file written atomically (tuning.save), so children need no merge step; what comes
back to the parent is only what it shows: one JSON object per line on the child's stdout,
{"begin": key}, {"done": key, "us": ..., "config": {...}, "tried": n} or {"failed": key, "reason": ...}.

The driver (run_jobs) knows nothing of CUDA or tuning: it is given a spawn(gpu, keys) factory returning a
Popen-like object, so tests drive it with fake children.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from gemmbench import shard
from gemmbench.multi import visible_device

MAX_DEATHS = 3

Spawn = Callable[[int, list], "subprocess.Popen"]
Split = Callable[[list, int], list]
OnEvent = Callable[[Optional[int], dict], None]  # gpu None: about no GPU in particular


# ---------------------------------------------------------------- the jobs


def job_key(problem, variant: str) -> str:
    """One job's name, the same in the parent and its children (both rebuild the job list from the options)."""
    return shard.cell_key(problem, variant)


def split_jobs(jobs: list, n: int) -> list[list]:
    """jobs: [(problem, variant)] -> n lists of them, through shard.partition (deterministic, cost-balanced), so
    every host of a --shard array computes the same split.  Each list keeps the jobs' order."""
    cells, names_of = [], {}
    variants = {v.name: v for _, v in jobs}
    for p, v in jobs:
        if p.label not in names_of:  # the variants of a problem share its inputs: keep them together
            names_of[p.label] = []
            cells.append((p, names_of[p.label]))
        names_of[p.label].append(v.name)
    return [[(p, variants[name]) for p, names in part for name in names] for part in shard.partition(cells, n)]


# ---------------------------------------------------------------- the children


def spawner(command: list[str], folder: Path) -> Spawn:
    """spawn(gpu, keys): `command --worker-jobs FILE` pinned to that GPU, FILE (in `folder`) listing the keys."""
    serial = itertools.count()

    def spawn(gpu: int, keys: list) -> subprocess.Popen:
        jobs_file = folder / f"gpu{gpu}-{next(serial)}.json"
        jobs_file.write_text(json.dumps(keys))
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible_device(gpu), PYTHONUNBUFFERED="1")
        return subprocess.Popen(
            [*command, "--worker-jobs", str(jobs_file)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    return spawn


def parse_event(line: str) -> Optional[tuple[str, str, dict]]:
    """(kind, key, event) of a child's line, or None for anything else a library may have printed."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict):
        for kind in ("begin", "done", "failed"):
            if isinstance(event.get(kind), str):
                return kind, event[kind], event
    return None


class _Tail(threading.Thread):
    """Drains a child's stderr (a full pipe would block it) and keeps the end, which says why it died."""

    def __init__(self, stream, keep: int = 40):
        super().__init__(daemon=True)
        self.stream, self.lines = stream, collections.deque(maxlen=keep)
        self.start()

    def run(self) -> None:
        if self.stream is not None:
            for line in self.stream:
                self.lines.append(line)

    def text(self) -> str:
        self.join(5)
        return "".join(self.lines)


# ---------------------------------------------------------------- the driver


@dataclass
class Outcome:
    done: dict = field(default_factory=dict)  # key -> the child's "done" event
    failed: dict = field(default_factory=dict)  # key -> reason
    lost: dict = field(default_factory=dict)  # gpu -> why it was given up on


class _Driver:
    def __init__(self, spawn: Spawn, on_event: OnEvent, max_deaths: int):
        self.spawn, self.on_event, self.max_deaths = spawn, on_event, max_deaths
        self.lock = threading.Lock()
        self.live: set = set()  # children running now, killed if the parent is interrupted
        self.outcome = Outcome()

    def emit(self, gpu: Optional[int], event: dict) -> None:
        with self.lock:  # one progress bar for every GPU's thread
            if "done" in event:
                self.outcome.done[event["done"]] = event
            elif "failed" in event:
                self.outcome.failed[event["failed"]] = event.get("reason", "")
            self.on_event(gpu, event)

    def drive_gpu(self, gpu: int, todo: list) -> Optional[str]:
        """Runs `todo` (consumed in place) on one GPU, a fresh child after each death; returns why the GPU was
        given up on, or None when its jobs are all finished."""
        deaths = 0
        while todo:
            why, tuned = self.one_child(gpu, todo)
            if why is None:
                continue
            deaths = 1 if tuned else deaths + 1
            if deaths >= self.max_deaths:
                return why
            if todo:
                self.emit(gpu, {"died": why, "left": len(todo)})
        return None

    def one_child(self, gpu: int, todo: list) -> tuple[Optional[str], bool]:
        """One child over `todo`: (why it died, or None; whether it tuned any job).  Only the job in flight when
        it died is lost: it is recorded as failed."""
        try:
            proc = self.spawn(gpu, list(todo))
        except OSError as exc:
            return f"GPU {gpu}: cannot start a child: {exc}", False
        with self.lock:
            self.live.add(proc)
        tail, in_flight, tuned = _Tail(proc.stderr), None, False
        for line in proc.stdout:
            parsed = parse_event(line)
            if parsed is None or parsed[1] not in todo:
                continue
            kind, key, event = parsed
            if kind == "begin":
                in_flight = key
            else:
                todo.remove(key)
                in_flight, tuned = None, tuned or kind == "done"
            self.emit(gpu, event)
        code = proc.wait()
        with self.lock:
            self.live.discard(proc)
        if not todo:  # a crash on the way out (CUDA teardown) after the last job costs nothing
            return None, tuned
        from gemmbench.runner import exit_hint

        why = f"GPU {gpu}: {exit_hint(tail.text(), code)}"
        if code == 0 and in_flight is None:
            why += f" (the child ended with {len(todo)} jobs left)"
        if in_flight is not None:
            todo.remove(in_flight)
            self.emit(gpu, {"failed": in_flight, "reason": why})
        return why, tuned

    def kill_children(self) -> None:
        with self.lock:
            for proc in self.live:
                proc.kill()


def run_jobs(
    gpus: list[int],
    keys: list,
    spawn: Spawn,
    split: Split,
    on_event: OnEvent = lambda g, e: None,
    max_deaths: int = MAX_DEATHS,
) -> Outcome:
    """Every key run once on one of `gpus` (split(keys, n) -> n lists of keys), one child per GPU at a time.
    on_event(gpu, event) sees the children's events (under a lock) plus the driver's own: a "failed" for a job a
    dead child was on, {"died": why, "left": n} before a relaunch, {"lost": why, "left": n} for a GPU given up on.
    Jobs that no GPU is left to run end as failed."""
    driver = _Driver(spawn, on_event, max_deaths)
    plans = dict(zip(gpus, split(list(keys), len(gpus)), strict=False))
    try:
        while plans:
            leftover = _round(driver, plans)
            alive = [g for g in gpus if g not in driver.outcome.lost]
            if leftover and not alive:
                why = "; ".join(driver.outcome.lost.values())
                for key in leftover:
                    driver.emit(None, {"failed": key, "reason": f"no GPU left to tune it ({why})"})
                break
            # a later round only shares out what the GPUs given up on left
            plans = dict(zip(alive, split(leftover, len(alive)), strict=False)) if leftover else {}
    except BaseException:  # Ctrl-C: no child may outlive the parent and keep a GPU busy
        driver.kill_children()
        raise
    return driver.outcome


def _round(driver: _Driver, plans: dict) -> list:
    """One thread per GPU over its plan; returns the keys left by the GPUs given up on."""
    leftover: list = []

    def work(gpu: int, todo: list) -> None:
        why = driver.drive_gpu(gpu, todo)
        if why is not None:
            with driver.lock:
                driver.outcome.lost[gpu] = why
                leftover.extend(todo)
            driver.emit(gpu, {"lost": why, "left": len(todo)})

    threads = [threading.Thread(target=work, args=(g, list(todo)), daemon=True) for g, todo in plans.items() if todo]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # a timed join lets Ctrl-C reach the main thread
            t.join(0.2)
    return leftover
