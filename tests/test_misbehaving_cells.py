"""What a misbehaving cell may cost, with real worker processes on the CPU path: hangs in a row (in a kernel or in a
plugin's supports()) and a plugin's sys.exit cost only their own cells, the watchdog kills a hung kernel's children,
a lost device stops the sweep with the cells never run left for --resume, a worker that hangs at start-up is
stopped at the start-up limit, and a worker whose kernel holds the interpreter lock still dies with its sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import PINNED_SHA
from test_cli import _alive, invoke
from test_watchdog import _gone_within

from gemmbench.engine import worker_process
from gemmbench.measure import device
from gemmbench.results import store

PLUGIN = Path(__file__).parent / "plugins" / "misbehave_plugin.py"


def _shapes(tmp_path: Path, *gemms: str) -> Path:
    path = tmp_path / "s.yaml"
    listed = ", ".join(f"{{id: {g}, N: 32, K: 32, parallel: none}}" for g in gemms)
    path.write_text(f"name: misbehave\nm: [1]\ngemms: [{listed}]\n")
    return path


def _rows(out: Path) -> dict:
    return {(r.gemm, r.variant): (r.status, r.reason) for r in store.load([out]).itertuples()}


def _same_build(monkeypatch, request) -> None:
    """One build id for a sweep and its resume (a checkout edited while the suite runs changes its dirty hash)."""
    monkeypatch.setenv("GEMMBENCH_GIT_SHA", PINNED_SHA)
    for cached in (device.git_sha, device.provenance):  # the rows this process makes (a lost cell's) carry both
        cached.cache_clear()
        request.addfinalizer(cached.cache_clear)


def test_three_hangs_in_a_row_and_a_plugins_exit_cost_only_their_cells(tmp_path, monkeypatch):
    pids = tmp_path / "children"
    monkeypatch.setenv("GEMMBENCH_TEST_CHILD_PIDS", str(pids))
    out = tmp_path / "r.parquet"
    shapes = _shapes(tmp_path, "hang1", "hang2", "sup", "exit", "last")
    res = invoke("run", "--shapes", shapes, "--dtype", "fp16", "--plugin", PLUGIN, "--variants",
                 "cublas_fp16,test_hang_child,test_supports_hang,test_exit", "--budget", "0.01", "--cell-timeout", "2",
                 "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    rows = _rows(out)
    assert len(rows) == 5 * 4  # every (GEMM, variant): nothing given up, nothing lost
    # three timeouts in a row (two kernels, then a supports()), each blamed on its own variant only
    assert (
        rows["hang1", "test_hang_child"] == rows["hang2", "test_hang_child"] == ("error", "timeout after 2 s (check)")
    )
    assert rows["sup", "test_supports_hang"] == ("error", "timeout after 2 s (supports)")
    status, reason = rows["exit", "test_exit"]
    assert status == "error" and reason.startswith("make: PluginExit: sys.exit(0) called inside the benchmark worker")
    assert "misbehave_plugin.py:" in reason  # the plugin's own line
    blamed = {("hang1", "test_hang_child"), ("hang2", "test_hang_child"), ("sup", "test_supports_hang"),
              ("exit", "test_exit")}  # fmt: skip
    skipped = {(g, "test_hang_child") for g in ("sup", "exit", "last")}
    assert {k for k, (s, _) in rows.items() if s == "ok"} == set(rows) - blamed - skipped
    children = [int(x) for x in pids.read_text().split()]
    assert len(children) == 2 and _gone_within(set(children), 5), "a hung kernel's child outlived the watchdog"


def test_a_lost_device_stops_the_sweep_and_resume_runs_the_cells_never_run(tmp_path, monkeypatch, request):
    _same_build(monkeypatch, request)
    lost = tmp_path / "lost"
    monkeypatch.setenv("GEMMBENCH_TEST_LOSE_DEVICE", str(lost))
    monkeypatch.setenv("GEMMBENCH_TEST_CHILD_PIDS", str(tmp_path / "children"))
    out = tmp_path / "r.parquet"
    args = ("run", "--shapes", _shapes(tmp_path, "first", "hang1", "after1", "after2"), "--dtype", "fp16", "--plugin",
            PLUGIN, "--variants", "cublas_fp16,test_hang_child", "--budget", "0.01", "--cell-timeout", "2")  # fmt: skip
    res = invoke(*args, "--out", out)
    # first: 2 rows; hang1: the hang's timeout, then no worker starts (hang1's cuBLAS, after1 and after2 never run)
    assert res.exit_code == 2
    line = " ".join(res.stderr.split())
    assert "the benchmark worker could not start: " in line and "CUDA error: unspecified launch failure" in line
    assert f"; 5 still to run (3 rows saved to {out}; --resume {out} runs the rest)" in line
    rows = _rows(out)
    assert len(rows) == 3 and rows["hang1", "test_hang_child"] == ("error", "timeout after 2 s (check)")
    lost.unlink()  # the GPU is back
    res = invoke(*args, "--resume", out)
    assert res.exit_code == 0, res.stderr
    rows = _rows(out)
    assert len(store.load([out])) == len(rows) == 8  # each (GEMM, variant) once
    assert rows["hang1", "cublas_fp16"][0] == rows["after2", "cublas_fp16"][0] == "ok"


def test_a_worker_silent_at_start_up_is_stopped_at_the_start_up_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_process, "START_FLOOR_S", 10)  # the limit is max(--cell-timeout, this floor)
    monkeypatch.setenv("GEMMBENCH_TEST_GIL_MARKER", str(tmp_path / "held"))
    start = time.monotonic()
    res = invoke("run", "--shapes", _shapes(tmp_path, "one"), "--dtype", "fp16", "--plugin", PLUGIN, "--variants",
                 "cublas_fp16", "--cell-timeout", "1", "--out", tmp_path / "r.parquet")  # fmt: skip
    assert res.exit_code == 2 and time.monotonic() - start < 60
    assert "the benchmark worker sent nothing for 10 s while starting (loading plugins)" in " ".join(res.stderr.split())


def test_a_worker_holding_the_interpreter_lock_dies_with_its_killed_sweep(tmp_path):
    held = tmp_path / "held"
    parent = (
        "import sys, time\n"
        "from gemmbench.engine.worker_process import WorkerOptions, WorkerProcess\n"
        f"w = WorkerProcess(WorkerOptions(plugins=[{str(PLUGIN)!r}], cpu=True), None)\n"
        "print(w.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ, GEMMBENCH_TEST_GIL_MARKER=str(held))
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    worker = int(proc.stdout.readline())
    deadline = time.monotonic() + 120
    while not held.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the worker never reached the plugin"
        time.sleep(0.1)
    time.sleep(0.5)  # the worker is inside the C call now
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _gone_within({worker}, 5), "a worker holding the interpreter lock outlived its killed sweep"
    assert not _alive(worker)
