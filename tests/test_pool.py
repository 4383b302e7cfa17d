"""The engine's GPU pool with fake workers (no process, no CUDA): every item ends as exactly one outcome; a worker that
dies or hangs costs only the item in flight, blamed by name, however many in a row; a fresh worker carries on; a GPU
where no worker can start any more hands its cells to the other GPUs, and with none left the items never run have no
outcome (PoolError says how many)."""

from __future__ import annotations

import collections

import pytest

from gemmbench.engine import pool as pool_mod
from gemmbench.engine.pool import Cell, Pool, PoolError, split
from gemmbench.engine.worker_process import WorkerOptions, exit_hint, visible_device

KEYS = [f"job{i}" for i in range(10)]


class FakeWorker:
    """Answers a task item by item as plan says: `crash_on` (dies on that item, killed by SIGSEGV), `hang_on` (goes
    silent on it: the pool's watchdog), `fail` (its own error outcome), else a done outcome naming the GPU."""

    def __init__(self, plan: dict, gpu):
        self.plan, self.gpu, self.events = plan, gpu, collections.deque()
        self.code, self.out = 0, ""

    def send(self, task: dict) -> None:
        for item in task["items"]:
            self.events.append({"ev": "begin", "item": item, "phase": "tune"})
            if item in self.plan.get("crash_on", ()):
                self.events.append(None)
                self.code, self.out = -11, "compiling...\ntriton: an illegal memory access was encountered\n"
                return
            if item in self.plan.get("hang_on", ()):
                self.events.append("silent")
                return
            if item in self.plan.get("fail", ()):
                row = {"failed": item, "reason": "no config runs it"}
            else:
                row = {"done": item, "gpu": self.gpu}
            self.events.append({"ev": "result", "item": item, "rows": [row]})
        self.events.append({"ev": "done"})

    def next_event(self, timeout=None):
        ev = self.events.popleft()
        if ev == "silent":
            self.events.appendleft(None)  # what the pool reads once it has killed the worker
            raise TimeoutError(f"sent nothing for {timeout:.0f} s")
        return ev

    def death_reason(self) -> str:
        return f"worker died ({exit_hint(self.out, self.code)})"

    def output(self) -> str:
        return self.out

    def wait(self) -> int:
        return self.code

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass


class Fakes:
    """start(opts, gpu, prefix) for Pool; plans[gpu] says what that GPU's workers do; records what ran where."""

    def __init__(self, plans: dict):
        self.plans, self.started = plans, []
        self.results, self.lost_, self.notes = {}, {}, []

    def start(self, opts, gpu, prefix=()):
        self.started.append(gpu)
        plan = self.plans.get(gpu, {})
        if plan.get("die_at_start") or self.started.count(gpu) > plan.get("starts", len(self.started)):
            raise PoolError("the benchmark worker could not start: exit code 3: RuntimeError: CUDA error: "
                            "uncorrectable ECC error encountered")  # fmt: skip
        return FakeWorker(self.plans.get(gpu, {}), gpu)

    # the Sink
    def begin(self, cell, item, phase, gpu):
        pass

    def result(self, cell, item, rows, passed, gpu):
        assert item not in self.results and item not in self.lost_
        self.results[item] = (gpu, rows)

    def lost(self, cell, item, reason, gpu):
        assert item not in self.results
        self.lost_[item] = reason

    def note(self, text):
        self.notes.append(text)

    def closed(self, cell, log, code):
        pass

    def run(self, gpus=(0, 1), keys=KEYS, timeout=None, **kw):
        cells = [Cell("tune", {}, (k,), k, timeout_s=timeout) for k in keys]
        with Pool(WorkerOptions(), self, list(gpus) if gpus else None, start=self.start, **kw) as pool:
            pool.run(cells)
        return self

    def done_on(self, gpu):
        return sorted(k for k, (g, rows) in self.results.items() if g == gpu and "done" in rows[0])


def test_split_is_balanced_by_cost_and_keeps_order():
    cells = [Cell("x", {}, (str(i),), str(i), cost=c) for i, c in enumerate([5, 1, 1, 1, 1, 1])]
    parts = split(cells, 2)
    assert [[c.label for c in p] for p in parts] == [["0"], ["1", "2", "3", "4", "5"]]
    assert sorted(c.label for p in split(cells, 3) for c in p) == [str(i) for i in range(6)]


def test_all_workers_succeed_one_per_gpu():
    f = Fakes({}).run()
    assert sorted(f.results) == sorted(KEYS) and not f.lost_
    assert sorted(f.started) == [0, 1]  # one worker per GPU, kept for all its cells
    assert f.done_on(0) and f.done_on(1)


def test_a_worker_killed_mid_way_costs_only_its_item():
    f = Fakes({0: {"crash_on": ["job4"]}}).run(gpus=[0])
    assert list(f.lost_) == ["job4"]
    assert f.lost_["job4"].startswith("tune: worker died (killed by signal 11: ")
    assert "illegal memory access" in f.lost_["job4"]
    assert sorted(f.results) == sorted(set(KEYS) - {"job4"})
    assert f.started == [0, 0]  # a fresh worker for the rest


def test_an_item_the_worker_reports_failed_is_not_retried():
    f = Fakes({1: {"fail": ["job3"]}}).run()
    assert f.results["job3"][1] == [{"failed": "job3", "reason": "no config runs it"}] and len(f.started) == 2


def test_a_gpu_whose_worker_cannot_start_hands_its_cells_to_the_other():
    f = Fakes({1: {"die_at_start": True}}).run()
    assert sorted(f.results) == sorted(KEYS) and not f.lost_  # nothing was in flight: nothing lost
    assert f.done_on(0) == sorted(KEYS)
    assert any("GPU 1 given up" in n and "ECC error" in n for n in f.notes)


def test_a_gpu_that_faults_on_every_item_costs_each_item_alone_and_keeps_its_cells():
    # 10 cells of one cost on 2 GPUs: split hands them out alternately (0, 1, 0, ...), so GPU 1 has the odd ones
    f = Fakes({1: {"crash_on": KEYS}}).run()
    assert sorted(f.lost_) == [f"job{i}" for i in (1, 3, 5, 7, 9)]
    assert all(r.startswith("tune: worker died (killed by signal 11") for r in f.lost_.values())
    assert f.done_on(0) == [f"job{i}" for i in (0, 2, 4, 6, 8)] and not any("given up" in n for n in f.notes)


def test_three_hangs_in_a_row_cost_only_their_three_items():
    f = Fakes({0: {"hang_on": ["job1", "job2", "job3"]}}).run(gpus=[0], timeout=5)
    assert f.lost_ == {k: "timeout after 5 s (tune)" for k in ("job1", "job2", "job3")}
    assert sorted(f.results) == sorted(set(KEYS) - set(f.lost_))
    assert f.started == [0] * 4  # the first worker, and a fresh one after each hang


def test_a_lost_device_stops_the_sweep_and_the_items_never_run_have_no_outcome():
    # the worker dies on job3; the fresh worker cannot start (the GPU probe fails): job4..job9 never ran
    f = Fakes({0: {"crash_on": ["job3"], "starts": 1}})
    with pytest.raises(PoolError, match=r"^no GPU can start a worker: GPU 0: .*ECC error encountered; 6 still to run$"):
        f.run(gpus=[0])
    assert sorted(f.results) == ["job0", "job1", "job2"] and list(f.lost_) == ["job3"]


def test_a_lost_device_hands_its_cells_to_the_gpus_still_working():
    f = Fakes({1: {"crash_on": ["job1"], "starts": 1}}).run()
    assert list(f.lost_) == ["job1"]
    assert f.done_on(0) == sorted(set(KEYS) - {"job1"})
    assert any("GPU 1 given up" in n and "ECC error" in n for n in f.notes)


def test_when_no_gpu_can_start_a_worker_the_sweep_stops_with_the_reasons():
    with pytest.raises(PoolError, match=r"^no GPU can start a worker: GPU 0: .*ECC.*GPU 1: .*ECC error encountered$"):
        Fakes({0: {"die_at_start": True}, 1: {"die_at_start": True}}).run()
    with pytest.raises(PoolError, match=r"^the benchmark worker could not start: exit code 3"):
        Fakes({None: {"die_at_start": True}}).run(gpus=None)


def test_a_task_that_answers_no_outcome_for_an_item_loses_it_by_name():
    class Silent(FakeWorker):
        def send(self, task):
            self.events.append({"ev": "done"})

    f = Fakes({})
    with Pool(WorkerOptions(), f, start=lambda o, g, p=(): Silent({}, g)) as pool:
        pool.run([Cell("tune", {}, ("a", "b"), "ab")])
    assert f.lost_ == {k: "the worker finished its task without an outcome for it" for k in ("a", "b")}


def test_a_gpu_index_is_a_position_in_an_outer_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert [visible_device(g) for g in (0, 1)] == ["4", "6"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_device(1) == "1"


@pytest.mark.parametrize(
    "text,count,message",
    [
        ("all", 0, "--gpus needs CUDA GPUs, and this machine has none"),
        ("2", 2, "no GPU 2 here (this machine has 2: 0..1)"),
        ("0,x", 2, "give 'all' or GPU indices"),
        ("-1", 2, "no GPU -1 here"),
    ],
)
def test_parse_gpus_errors(text, count, message):
    with pytest.raises(PoolError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pool_mod.parse_gpus(text, count)
    assert pool_mod.parse_gpus("all", 3) == [0, 1, 2] and pool_mod.parse_gpus("2, 0,2", 3) == [2, 0]


def test_a_real_worker_process_runs_a_task_and_a_crash_costs_its_item(tmp_path):
    """The real protocol end to end on the CPU: a `time` cell of two variants, the plugin's one kills its worker in
    its check; the other is timed by a fresh worker."""
    from dataclasses import asdict

    from conftest import PLUGINS

    from gemmbench.shapes import Problem

    p = Problem("t", "g", 2, 16, 16, "fp16")
    f = Fakes({})
    opts = WorkerOptions(timing="wall", budget_s=0.01, min_samples=3, plugins=[PLUGINS / "crash_plugin.py"], cpu=True)
    with Pool(opts, f) as pool:
        pool.run([Cell("time", {"problem": asdict(p), "seed": 0}, ("test_crash", "cublas_fp16"), p.label)])
    assert list(f.lost_) == ["test_crash"] and f.lost_["test_crash"].startswith("check: worker died (killed by signal")
    [row] = f.results["cublas_fp16"][1]
    assert row["status"] == "ok" and row["n_samples"] >= 3 and row["variant"] == "cublas_fp16"


def test_the_sanitizer_worker_measures_no_ceilings_and_allocates_every_tensor_alone():
    """memcheck's worker runs checks only: their rows carry no ceilings, and a ceiling ladder timed under memcheck
    fails; without the caching allocator each tensor has its own guard region (an overread lands outside it)."""
    from gemmbench.engine.tasks.time_task import sanitizer_worker

    timed = WorkerOptions(ceilings=True, env={"A": "1"}, budget_s=0.2)
    checked = sanitizer_worker(timed)
    assert checked.ceilings is False and checked.budget_s == 0.2
    assert checked.env == {"A": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    assert timed.ceilings is True and timed.env == {"A": "1"}  # the timing pool's options are left as they were


def test_a_worker_the_sweep_killed_on_ctrl_c_is_no_cells_fault():
    # Ctrl-C: the pool kills its workers itself (Pool.kill sets `stopping`); the item in flight then has no outcome (no
    # error row blaming it) and no fresh worker starts for the rest
    pools: list = []

    class KilledOnCtrlC(FakeWorker):
        def next_event(self, timeout=None):
            ev = super().next_event(timeout)
            if ev is None:
                pools[0].stopping = True  # what Pool.kill does, from the main thread, as the worker dies
            return ev

    f = Fakes({})
    pool = Pool(WorkerOptions(), f, [0], start=lambda o, g, p=(): KilledOnCtrlC({"crash_on": ["job1"]}, g))
    pools.append(pool)
    pool.run([Cell("tune", {}, ("job0", "job1", "job2"), "c")])
    assert list(f.results) == ["job0"] and not f.lost_  # job1 killed by the sweep, job2 never run: no outcome


def test_a_gpu_sweep_refuses_a_worker_that_finds_no_gpu():
    """A GPU that fell off the bus: a fresh worker sees no CUDA device and would run the rest on the CPU path."""
    import torch

    from gemmbench.engine.worker_process import start_worker

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the worker finds it")
    with pytest.raises(PoolError, match=r"^the benchmark worker found no CUDA GPU \(the device is lost\)$"):
        start_worker(WorkerOptions(cpu=False), None)
    start_worker(WorkerOptions(cpu=True), None).close()  # the CPU path asks for no GPU


def test_a_worker_starts_without_the_results_tables_libraries():
    """A worker imports what it runs (its tasks, the kernels, the device probe), not pandas or pyarrow: only the
    sweep's process writes result files, and every worker's start-up would pay their import."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from gemmbench.engine import tasks; tasks.load_all(); "
        "from gemmbench import registry; registry.all_variants(); "
        "from gemmbench.measure import ceilings, device; from gemmbench.configs import engine_import; "
        "print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out == "[]\n"
