"""One worker process of the pool (pool.py) and how it is started: worker.py in a subprocess of its own, on one GPU
(CUDA_VISIBLE_DEVICES), tasks as JSON lines on its stdin, events back on a pipe of their own.  Its options
(WorkerOptions: timing, plugins, the interpreter, --retune) are what its command line and environment carry.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

WORKER_START_TIMEOUT_S = 300  # a start-up phase's limit with no --cell-timeout (importing torch on a cold machine)
START_FLOOR_S = 60  # a start-up phase (imports, plugins, the GPU probe, ceilings) may take this long whatever the limit

# The watcher: a process of its own per worker, so that it runs while the worker's kernel holds the interpreter lock.
# It blocks on a pipe that only the sweep holds open: at end of file (the sweep closed it, or died however it died)
# it kills the worker's whole process group, a plugin's children included.
WATCHER = """import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
try:
    os.killpg(int(sys.argv[1]), signal.SIGKILL)
except OSError:
    pass
"""


class PoolError(RuntimeError):
    """The sweep cannot go on (no worker can start on any GPU); one line for the user."""


@dataclass
class WorkerOptions:
    """How workers start: what worker.py's command line and environment carry."""

    timing: str = "cold"
    budget_s: float = 0.5
    min_samples: int = 10
    inputs: str = "randn"  # the values timed calls run on (run --inputs; measure.inputs.VALUES)
    plugins: list = field(default_factory=list)
    cpu: bool = False  # no CUDA: Triton's interpreter, set at process start (read when @triton.jit runs)
    retune: bool = False  # ignore stored Triton configs (read by tuning.choose)
    ceilings: bool = False  # measure the GPU's ceilings at start-up (rows of `run` carry them)
    env: dict = field(default_factory=dict)
    # the pool's watchdog: a worker silent this long in one phase of a cell (no begin, result or done) is stopped
    # and the item in flight recorded as timed out; None: no limit (a cell's own Cell.timeout_s comes first)
    watchdog_s: Optional[float] = None


def visible_device(gpu: int) -> str:
    """CUDA_VISIBLE_DEVICES for the worker on GPU `gpu`.  --gpus counts the GPUs this process sees, so under an
    outer CUDA_VISIBLE_DEVICES (a Slurm allocation, say) index i means that list's i-th entry, not physical GPU i."""
    outer = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return outer[gpu] if gpu < len(outer) else str(gpu)


def exit_hint(output: str, code: int) -> str:
    """'exit code 1: RuntimeError: …' from a dead process's exit code and output: its last line naming an error,
    else its last line (a profiler's ==PROF== lines skipped)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("==PROF==")]
    hint = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "it printed nothing")
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return f"{how}: {hint[:300]}"


class WorkerProcess:
    """One worker subprocess: tasks as JSON lines on its stdin, events as JSON lines on a pipe of their own (so that
    whatever kernels, plugins or a profiler print on stdout never mixes with them), everything else to a log."""

    def __init__(self, opts: WorkerOptions, gpu: Optional[int], prefix: tuple = ()):
        self.log = tempfile.NamedTemporaryFile(prefix="gemmbench-worker-", suffix=".log", delete=False)
        read_fd, write_fd = os.pipe()
        env = dict(os.environ, GEMMBENCH_EVENT_FD=str(write_fd), PYTHONUNBUFFERED="1", **opts.env)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_device(gpu)
        if opts.retune:
            env["GEMMBENCH_RETUNE"] = "1"
        if opts.cpu:
            env["TRITON_INTERPRET"] = "1"
        cmd = [sys.executable, "-m", "gemmbench.engine.worker", "--timing", opts.timing, "--budget", str(opts.budget_s),
               "--min-samples", str(opts.min_samples), "--inputs", opts.inputs]  # fmt: skip
        cmd += ["--ceilings"] if opts.ceilings else []
        for p in opts.plugins:
            cmd += ["--plugin", str(p)]
        # a session of its own: a terminal's Ctrl-C reaches only the sweep's process, which stops the workers itself
        # (had the worker got it too, its death would be blamed on the cell in flight as a fault)
        self.proc = subprocess.Popen(
            [*prefix, *cmd], stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, env=env,
            pass_fds=(write_fd,), text=True, start_new_session=True,
        )  # fmt: skip
        os.close(write_fd)
        # the worker leads its own process group (a new session): the watcher and the watchdog kill the group
        self.watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHER, str(self.proc.pid)],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)  # fmt: skip
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(read_fd,), daemon=True).start()

    def _pump(self, fd: int) -> None:
        with os.fdopen(fd) as f:
            for line in f:
                self.events.put(json.loads(line))
        self.events.put(None)  # EOF: the worker exited

    def send(self, task: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(task) + "\n")
        self.proc.stdin.flush()

    def next_event(self, timeout: Optional[float] = None) -> Optional[dict]:
        """The next event; None when the worker has died; TimeoutError when it sent nothing for `timeout` s."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"sent nothing for {timeout:.0f} s") from None

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def death_reason(self) -> str:
        return f"worker died ({exit_hint(self.output(), self.wait())})"

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """The worker and everything it started in its process group (a plugin's children): nothing may keep the
        GPU busy after its cell is given up."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:  # the group is gone already
            self.proc.kill()

    def close(self, timeout: float = 10) -> None:
        """Ends the worker (stdin closed: it exits after its task) and removes its log."""
        if self.log.closed:
            return
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
                self.proc.wait()
        self._end_watcher()
        self.log.close()
        os.unlink(self.log.name)

    def _end_watcher(self) -> None:
        """The worker has exited: its watcher kills what is left of its group (a plugin's children), then exits."""
        if self.watcher.stdin is not None and not self.watcher.stdin.closed:
            self.watcher.stdin.close()
        try:
            self.watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.watcher.kill()
            self.watcher.wait()


def start_limit(watchdog_s: Optional[float]) -> float:
    """Seconds one start-up phase may stay silent: the cell limit, but never under START_FLOOR_S."""
    return max(watchdog_s if watchdog_s is not None else WORKER_START_TIMEOUT_S, START_FLOOR_S)


def start_worker(opts: WorkerOptions, gpu: Optional[int], prefix: tuple = ()) -> WorkerProcess:
    """A worker that has said it is ready; PoolError with its reason when it cannot start, or when one phase of its
    start-up (worker.py's `starting` events) stays silent longer than start_limit()."""
    w = WorkerProcess(opts, gpu, prefix)
    limit, phase = start_limit(opts.watchdog_s), "importing gemmbench and torch"
    while True:
        try:
            first = w.next_event(timeout=limit)
        except TimeoutError as exc:
            w.kill()
            w.close()
            raise PoolError(f"the benchmark worker {exc} while starting ({phase})") from None
        if first is None or first.get("ev") != "starting":
            break
        phase = first["phase"]
    if first is None or first.get("ev") != "ready":
        reason = first["error"] if first else w.death_reason()
        w.close()
        raise PoolError(f"the benchmark worker could not start: {reason}")
    if not opts.cpu and first.get("device", "cuda") != "cuda":  # the GPU this sweep measures is gone
        w.close()
        raise PoolError("the benchmark worker found no CUDA GPU (the device is lost)")
    return w
