"""Problems x variants -> rows.  Cells run in a worker process (worker.py); a worker that dies costs
its in-flight cell, which is recorded as an error, and a fresh worker carries on with the rest.
Rows are saved as they complete (store.RunWriter), so an interrupted sweep keeps what it finished."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
import zlib
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional

from gemmbench.shapes import Problem

# Measured on a 2-core CPU machine: llama70b-attn took 8 min 51 s on the CPU path (torch's bf16/fp8 CPU
# matmul, 0.4-0.9 s per call at M=64, >= 10 samples a cell), so Llama-sized sets are refused there.
# (Triton variants have their own limit, tuning.INTERPRETER_MAX_MACS, for sets in between.)
CPU_MAX_MACS = 1 << 26
WORKER_START_TIMEOUT_S = 300
SANITIZER_PADDING = (
    1 << 20
)  # bytes of guard after every allocation under --sanitize  # importing torch and measuring ceilings on a cold machine


class RunError(RuntimeError):
    """The sweep cannot go on (the worker cannot start at all); one line for the user."""


@dataclass
class RunOptions:
    timing: str = "cold"
    plugins: list = field(default_factory=list)
    seed: int = 0
    budget_s: float = 0.5
    min_samples: int = 10
    sanitize: bool = False
    run_id: str = ""
    retune: bool = False  # ignore stored Triton configs: tune each problem anew (not stored)
    worker_env: dict = field(default_factory=dict)  # extra environment of the workers (e.g. CUDA_VISIBLE_DEVICES)


def new_run_id(shape_set: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", shape_set).strip(".") or "run"  # a set's name becomes a file name
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{safe}-{uuid.uuid4().hex[:4]}"


def cell_seed(seed: int, problem: Problem) -> int:
    """The seed of a problem's check inputs (timing uses the next one): each problem draws its own, and
    `gemmbench profile` draws the same as `run` for the same --seed."""
    return seed + zlib.crc32(problem.label.encode()) % 10**6


def cpu_too_large(problems: list) -> Optional[str]:
    """The reason a set is refused on the CPU path, or None."""
    from gemmbench.metrics import flops

    worst = max(problems, key=flops)
    macs = flops(worst) // 2
    if macs <= CPU_MAX_MACS:
        return None
    return (
        f"{worst.shape_set} is too large for the CPU path ({worst.gemm} M={worst.M}: {macs:.2g} multiply-adds, "
        f"limit {CPU_MAX_MACS:.2g}): run it on a GPU, choose smaller --m, or try --shapes smoke"
    )


def exit_hint(output: str, code: int) -> str:
    """'exit code 1: RuntimeError: …' from a dead process's exit code and output: its last line naming an error,
    else its last line (a profiler's ==PROF== lines skipped)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("==PROF==")]
    hint = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "")
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return f"{how}: {hint[:300]}"


class WorkerProcess:
    """One worker subprocess and the thread that reads its events."""

    def __init__(self, opts: RunOptions, cpu: bool, check_only: bool = False):
        self.log = tempfile.NamedTemporaryFile(prefix="gemmbench-worker-", suffix=".log", delete=False)
        read_fd, write_fd = os.pipe()
        env = dict(os.environ, GEMMBENCH_EVENT_FD=str(write_fd), PYTHONUNBUFFERED="1", **opts.worker_env)
        if opts.retune:
            env["GEMMBENCH_RETUNE"] = "1"  # read by gemmbench.tuning.choose
        if cpu:
            env["TRITON_INTERPRET"] = "1"  # must be set before any @triton.jit runs: set at process start
        cmd = [
            sys.executable,
            "-m",
            "gemmbench.worker",
            "--timing",
            opts.timing,
            "--budget",
            str(opts.budget_s),
            "--min-samples",
            str(opts.min_samples),
        ]
        for p in opts.plugins:
            cmd += ["--plugin", str(p)]
        self.sanitizer_log = None
        if check_only:
            cmd.append("--check-only")
            self.sanitizer_log = self.log.name + ".sanitizer"
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # every tensor its own allocation: overreads show
            # --padding: small allocations sit side by side, so an overread would land in a neighbour
            # (valid memory, no report); a guard region after each allocation makes it visible.
            cmd = [
                "compute-sanitizer",
                "--tool",
                "memcheck",
                "--padding",
                str(SANITIZER_PADDING),
                "--log-file",
                self.sanitizer_log,
                "--print-limit",
                "20",
            ] + cmd
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, env=env, pass_fds=(write_fd,), text=True
        )
        os.close(write_fd)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(read_fd,), daemon=True).start()

    def _pump(self, fd: int) -> None:
        with os.fdopen(fd) as f:
            for line in f:
                self.events.put(json.loads(line))
        self.events.put(None)  # EOF: the worker exited

    def send(self, task: dict) -> None:
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()

    def next_event(self, timeout: Optional[float] = None) -> Optional[dict]:
        """The next event, or None when the worker has died."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise RunError(f"the worker sent nothing for {timeout:.0f} s (log: {self.log.name})") from None

    def death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return f"worker died ({exit_hint(Path(self.log.name).read_text(errors='replace'), code)})"

    def close(self, timeout: float = 10) -> None:
        if self.log.closed:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.log.close()
        os.unlink(self.log.name)

    def sanitizer_report(self) -> str:
        """compute-sanitizer's first error, read after the process has exited (it writes its log then)."""
        if not self.sanitizer_log or not os.path.exists(self.sanitizer_log):
            return ""
        text = Path(self.sanitizer_log).read_text(errors="replace")
        os.unlink(self.sanitizer_log)
        return first_sanitizer_error(text)


def first_sanitizer_error(text: str) -> str:
    """'Invalid __global__ read of size 2 bytes at _overread_kernel+0x90 ...' from a memcheck log, or ''."""
    lines = [ln.strip("= ").strip() for ln in text.splitlines()]
    starts = ("Invalid", "Program hit", "Uninitialized", "Misaligned", "Out-of-range")
    for i, ln in enumerate(lines):
        if ln.startswith(starts):
            where = next((x for x in lines[i + 1 : i + 4] if x.startswith("at ")), "")
            return f"{ln} {where}".strip()[:400]
    return ""


class Runner:
    def __init__(
        self,
        opts: RunOptions,
        cpu: bool,
        on_row: Callable[[dict], None],
        on_begin: Callable[[Problem, str, str], None] = lambda p, v, ph: None,
    ):
        self.opts, self.cpu, self.on_row, self.on_begin = opts, cpu, on_row, on_begin
        self.worker: Optional[WorkerProcess] = None
        self.sanitizer: Optional[WorkerProcess] = None
        if opts.sanitize and not shutil.which("compute-sanitizer"):
            raise RunError(
                "--sanitize needs compute-sanitizer on the PATH (it ships with the CUDA toolkit, "
                "in <cuda>/bin or the Nsight Compute install)"
            )

    def _start(self, check_only: bool = False) -> WorkerProcess:
        w = WorkerProcess(self.opts, self.cpu, check_only)
        try:
            first = w.next_event(timeout=WORKER_START_TIMEOUT_S)
        except RunError:
            w.proc.kill()
            w.close()
            raise
        if first is None or first.get("ev") != "ready":
            reason = first["error"] if first else w.death_reason()
            w.close()
            raise RunError(f"the benchmark worker could not start: {reason}")
        return w

    def _emit(self, problem: Problem, row: dict) -> None:
        row = dict(row, run_id=self.opts.run_id, timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.on_row(row)

    def _error_row(self, problem: Problem, variant: str, reason: str) -> dict:
        from gemmbench import device, registry
        from gemmbench.store import cell_columns
        from gemmbench.timing import L2_STATE

        return dict(
            cell_columns(problem, registry.get(variant)),
            status="error",
            reason=reason,
            timing_mode=self.opts.timing,
            l2_state=L2_STATE[self.opts.timing],
            **device.provenance(),
        )

    def _drive(self, kind: str, problem: Problem, names: list, check_only: bool, emit=None) -> list:
        """Run one task to completion across worker deaths; returns the names that passed (check-only)."""
        emit = emit or self._emit
        left, passed = list(names), []
        while left:
            w = getattr(self, kind)
            if w is None:
                w = self._start(check_only)
                setattr(self, kind, w)
            task = dict(
                problem=asdict(problem), variants=left, seed=cell_seed(self.opts.seed, problem), check_only=check_only
            )
            w.send(task)
            current, fatal = None, False
            while True:
                ev = w.next_event()
                if ev is None:  # the worker died: its in-flight cell is the casualty
                    reason = w.death_reason()
                    w.close()
                    setattr(self, kind, None)
                    if fatal or not left:  # it reported its casualty itself before exiting
                        break
                    if current is None:  # died between cells: the next one in line takes the row,
                        current, phase = left[0], "before start"  # so a deterministic crash cannot loop
                    emit(problem, self._error_row(problem, current, f"{phase}: {reason}"))
                    left.remove(current)
                    break
                if ev["ev"] == "fatal":
                    fatal = True
                elif ev["ev"] == "begin":
                    current, phase = ev["variant"], ev["phase"]
                    self.on_begin(problem, current, phase)
                elif ev["ev"] == "row":
                    emit(problem, ev["row"])
                    left.remove(ev["row"]["variant"])
                    if ev["row"]["variant"] == current:
                        current = None
                elif ev["ev"] == "passed":
                    passed.append(ev["variant"])
                    left.remove(ev["variant"])
                    current = None
                elif ev["ev"] == "done":
                    left = []
                    break
        return passed

    def _sanitize(self, problem: Problem, names: list) -> list:
        """Check each variant in its own process under compute-sanitizer; returns those that are clean.
        One process per cell: the sanitizer's log is complete only when its process has exited."""
        clean = []
        for name in names:
            w = self.sanitizer = self._start(check_only=True)
            rows = []
            passed = self._drive(
                "sanitizer", problem, [name], check_only=True, emit=lambda p, row, rows=rows: rows.append(row)
            )
            w.close(timeout=120)
            report = w.sanitizer_report()
            if report:  # the sanitizer's finding explains any crash that followed it: one row
                self._emit(problem, self._error_row(problem, name, f"check: compute-sanitizer: {report}"))
                continue
            if passed:
                clean.append(name)
            for row in rows:
                self._emit(problem, row)
        self.sanitizer = None
        return clean

    def run_problem(self, problem: Problem, variants: list) -> None:
        """Check and time the named variants on one problem; every one of them ends as a row."""
        names = list(variants)
        if self.opts.sanitize:
            names = self._sanitize(problem, names)
        if names:
            self._drive("worker", problem, names, check_only=False)

    def close(self) -> None:
        for w in (self.worker, self.sanitizer):
            if w is not None:
                w.close()
