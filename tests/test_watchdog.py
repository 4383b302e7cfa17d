"""A hanging kernel costs its cell, not the sweep (the watchdog), and a stopped or killed sweep leaves no worker
behind (SIGTERM and SIGHUP as Ctrl-C, the worker's watch on its owner).  Real processes, on the CPU path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
from conftest import PINNED_SHA, SMOKE_RUN_ARGS
from test_cli import _alive, _children, gemmbench_cmd_parts_every, invoke, ok_rows

from gemmbench.results import store

PLUGIN = Path(__file__).parent / "plugins" / "hang_plugin.py"
# the first GEMM's cells finish (cuBLAS ok, test_hang skipped); the second's test_hang hangs
ONE_GEMM = (
    "name: one\nm: [1]\ngemms: [{id: first, N: 32, K: 32, parallel: none}, {id: hang, N: 32, K: 32, parallel: none}]\n"
)


@pytest.fixture
def one(tmp_path) -> Path:
    path = tmp_path / "one.yaml"
    path.write_text(ONE_GEMM)
    return path


def test_a_hanging_cell_is_a_timeout_row_and_the_sweep_goes_on(one, tmp_path):
    out = tmp_path / "r.parquet"
    args = ("run", "--shapes", one, "--dtype", "fp16", "--variants", "test_hang,cublas_fp16", "--plugin", PLUGIN,
            "--budget", "0.01", "--cell-timeout", "3", "--out", out)  # fmt: skip
    res = invoke(*args)
    assert res.exit_code == 0, res.stderr
    rows = {r.variant: r for r in store.load([out]).itertuples() if r.gemm == "hang"}
    # the hang was in the check's launch: stopped after 3 silent seconds; cuBLAS checked and timed beside it
    assert rows["test_hang"].status == "error" and rows["test_hang"].reason == "timeout after 3 s (check)"
    assert rows["cublas_fp16"].status == "ok"
    # --strict counts it: a sweep of the hang alone shows that (one worker, no restart after it)
    hang = tmp_path / "hang.yaml"
    hang.write_text("name: hang\nm: [1]\ngemms: [{id: hang, N: 32, K: 32, parallel: none}]\n")
    strict = invoke("run", "--shapes", hang, "--dtype", "fp16", "--variants", "test_hang", "--plugin", PLUGIN,
                    "--budget", "0.01", "--cell-timeout", "2", "--out", tmp_path / "s.parquet", "--strict")  # fmt: skip
    assert strict.exit_code == 1, strict.stderr
    assert store.load([tmp_path / "s.parquet"]).reason.tolist() == ["timeout after 2 s (check)"]


@pytest.mark.parametrize("value, line", [("-1", ">= 0 (0: no limit), got -1.0"), ("inf", "got inf")])
def test_a_bad_cell_timeout_is_one_line(value, line):
    res = invoke("run", "--shapes", "smoke", "--cell-timeout", value)
    assert res.exit_code == 2 and line in res.stderr and "Traceback" not in res.stderr


def _hung_sweep(
    tmp_path: Path, one: Path, fmt: str = "table", part_s: Optional[float] = None
) -> tuple[subprocess.Popen, set[int]]:
    """A sweep whose worker is stuck in test_hang's kernel (no watchdog): the process and its workers.  part_s: its
    run writer's part period (store.PART_S) instead of the product's."""
    marker = tmp_path / "spinning"
    env = dict(os.environ, GEMMBENCH_TEST_HANG_MARKER=str(marker))
    args = ["run", "--shapes", str(one), "--dtype", "fp16", "--variants", "cublas_fp16,test_hang", "--plugin",
            str(PLUGIN), "--budget", "0.01", "--cell-timeout", "0", "--out", str(tmp_path / "r.parquet"), "--format",
            fmt]  # fmt: skip
    cmd = [sys.executable, "-m", "gemmbench", *args] if part_s is None else gemmbench_cmd_parts_every(part_s, *args)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the worker never reached the hanging kernel"
        time.sleep(0.1)
    workers = set(_children(proc.pid))
    assert workers
    return proc, workers


def _gone_within(pids: set[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_like_ctrl_c_and_end_by_the_signal(tmp_path, one, sig, code):
    proc, workers = _hung_sweep(tmp_path, one, fmt="json")
    start = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - start < 5  # cleanup within 5 s
    assert proc.returncode == -sig and 128 + sig == code  # the shell sees 128 + the signal
    assert _gone_within(workers, 5), "a worker outlived the sweep"
    assert '"interrupted": true' in stdout  # the JSON document still printed
    assert "interrupted: 2 finished rows in" in stderr  # the first GEMM's rows were kept
    assert len(store.load([tmp_path / "r.parquet"])) == 2


def test_a_killed_sweep_leaves_no_worker_behind(tmp_path, one):
    proc, workers = _hung_sweep(tmp_path, one)
    proc.kill()  # SIGKILL: no handler runs; the worker notices its owner is gone
    proc.communicate(timeout=30)
    assert _gone_within(workers, 5), "a worker outlived a SIGKILLed sweep"


def test_a_second_signal_ends_the_sweep_at_once(tmp_path, one):
    proc, workers = _hung_sweep(tmp_path, one)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode in (130, -signal.SIGINT)
    assert _gone_within(workers, 5)


def _rows_so_far(out: Path) -> int:
    """The rows a running sweep's file holds so far (its parts); 0 before the first part is written."""
    try:
        return len(store.load([out]))
    except store.StoreError:
        return 0


def test_a_killed_sweeps_rows_are_kept_and_resume_finishes_the_file(tmp_path, one, monkeypatch, request):
    from gemmbench.measure import device

    # one build for the killed sweep (its own process) and the resume (this one): a checkout edited while the suite
    # runs has another "-dirty" hash each time it is asked
    monkeypatch.setenv("GEMMBENCH_GIT_SHA", PINNED_SHA)
    device.git_sha.cache_clear()
    request.addfinalizer(device.git_sha.cache_clear)
    proc, _ = _hung_sweep(tmp_path, one, part_s=1)
    out = tmp_path / "r.parquet"
    deadline = time.monotonic() + 60
    while _rows_so_far(out) < 2:  # the writer's clock writes the first GEMM's rows while the second hangs
        assert time.monotonic() < deadline, "the finished rows were never written"
        time.sleep(0.2)
    proc.kill()
    proc.communicate(timeout=30)
    assert not out.exists() and len(store.load([out])) == 2  # the file's rows so far: its parts
    args = ("run", "--shapes", one, "--dtype", "fp16", "--variants", "cublas_fp16,test_hang", "--plugin", PLUGIN,
            "--budget", "0.01")  # fmt: skip
    assert "an unfinished sweep's rows are in" in invoke(*args, "--out", out).stderr  # not replaced in silence
    res = invoke(*args, "--resume", out, "--cell-timeout", "2")  # the watchdog ends the hang this time
    assert res.exit_code == 0, res.stderr
    df = store.load([out])
    assert len(df) == 4 and df.run_id.nunique() == 1 and not store.parts_dir(out).exists()
    assert df.set_index(["gemm", "variant"]).loc[("hang", "test_hang"), "reason"] == "timeout after 2 s (check)"


def test_the_cpu_path_times_on_one_thread(tmp_path, one):
    """A small matmul timed on a loaded many-thread CPU measures the scheduler's ticks: the CPU path uses one thread."""
    plugin = tmp_path / "threads_plugin.py"
    plugin.write_text(
        "import torch\nfrom gemmbench.registry import Launch, Variant, register\n"
        "def make(p, i):\n    return Launch(lambda: i.a @ i.b.t(), config={'threads': torch.get_num_threads()})\n"
        "register(Variant('test_threads', 't', ('fp16',), 'says its threads', make))\n"
    )  # fmt: skip
    out = tmp_path / "t.parquet"
    res = invoke("run", "--shapes", one, "--dtype", "fp16", "--variants", "test_threads", "--plugin", plugin,
                 "--budget", "0.01", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "on one thread" in res.stderr  # the banner says so
    configs = store.load([out]).query("status == 'ok'")["config"]
    assert len(configs) and all('"threads": 1' in c for c in configs)


def test_a_sweep_killed_after_its_last_part_is_finished_by_resume(smoke_run, monkeypatch, request):
    from gemmbench.measure import device

    monkeypatch.setenv("GEMMBENCH_GIT_SHA", PINNED_SHA)  # one build for both runs (see above)
    device.git_sha.cache_clear()
    request.addfinalizer(device.git_sha.cache_clear)
    out, args = smoke_run, SMOKE_RUN_ARGS
    ok_rows(out)
    parts = store.parts_dir(out)
    parts.mkdir()
    out.rename(parts / "part-00001.parquet")  # every row written, the join never happened
    res = invoke(*args, "--resume", out)
    assert res.exit_code == 0 and "every cell is already in" in res.stderr
    assert out.is_file() and not parts.exists() and len(store.load([out])) == 3
    # --force replaces at once: the old rows and any parts go before this sweep writes
    assert invoke(*args, "--out", out, "--force").exit_code == 0 and len(store.load([out])) == 3
