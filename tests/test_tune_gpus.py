"""`gemmbench tune --shard I/N` and `--gpus` on the CPU: the split of the tune jobs (every job exactly once, the same
on every host), the one-line input errors, the worker's `tune` task, and the whole `tune --gpus` command over the
engine's pool with fake workers (the pool itself: tests/test_pool.py).  Nothing here needs CUDA: where the command
asks for a GPU, torch is told there are some (monkeypatch) and the tuning itself is replaced."""

from __future__ import annotations

import collections
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import HAS_CUDA
from test_cli import bad, invoke, text

from gemmbench.configs import tuning
from gemmbench.engine.plan import deployment, tunable
from gemmbench.engine.tasks import tune_task
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.measure.device import DeviceInfo
from gemmbench.results import shard

FAKE_GPU = DeviceInfo(kind="cuda", name="NVIDIA Fake GPU 80GB", capability=(9, 0), sm_count=132)


def build_jobs(shapes="smoke", variants="triton_*", dtype="fp16,fp8", m="1,32", tp="1,2"):
    problems, chosen = tunable(shapes, variants, dtype, m, deployment(tp, "1", "1", "vllm"), None, print)
    return tune_task.jobs(problems, chosen, FAKE_GPU)


def keys(jobs) -> list[str]:
    return [shard.cell_key(p, v.name) for p, v in jobs]


# ---------------------------------------------------------------- the split


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_split_covers_every_job_once_and_is_the_same_on_every_host(n):
    jobs = build_jobs("llama70b", dtype="fp8,bf16", m="1,64", tp="1,2,8")
    assert len(set(keys(jobs))) == len(jobs) > 20
    parts = shard.split_jobs(jobs, n)
    assert len(parts) == n
    flat = [k for part in parts for k in keys(part)]
    assert sorted(flat) == sorted(keys(jobs)) and len(set(flat)) == len(flat)
    again = shard.split_jobs(build_jobs("llama70b", dtype="fp8,bf16", m="1,64", tp="1,2,8"), n)
    assert [keys(x) for x in again] == [keys(x) for x in parts]  # rebuilt from scratch: new objects, same split
    order = {k: i for i, k in enumerate(keys(jobs))}
    for part in parts:  # each part in the job list's order: a problem's variants share its inputs one after another
        assert [order[k] for k in keys(part)] == sorted(order[k] for k in keys(part))
    if n > 1:
        assert all(parts), [len(x) for x in parts]


def test_jobs_take_each_m_bucket_once():
    jobs = build_jobs(m="1,5,16,32", tp="1")  # 1, 5 and 16 share bucket 16 (dense; MoE buckets are finer)
    assert len(set(keys(jobs))) == len(jobs)
    dense = {p.M for p, _ in jobs if not p.is_moe}
    assert dense == {16, 32}


# ---------------------------------------------------------------- input errors


@pytest.mark.parametrize("spec", ["3/3", "-1/2", "1", "a/b", "0/0", ""])
def test_bad_shard_is_one_line(spec):
    line = bad(invoke("tune", "--shapes", "smoke", "--shard", spec))
    assert "--shard" in line and "I/N" in line


@pytest.mark.skipif(HAS_CUDA, reason="the CPU refusal")
def test_gpus_on_a_machine_without_cuda_is_one_line():
    line = bad(invoke("tune", "--shapes", "smoke", "--gpus", "all"))
    assert line == "error: --gpus needs CUDA GPUs, and this machine has none"


@pytest.fixture
def two_fake_gpus(monkeypatch, tmp_path):
    """torch says there are two GPUs of one model; the configs folder is a temporary one."""
    build_jobs()  # the registry is loaded before torch is told there is CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr("gemmbench.measure.device.detect", lambda i=0: FAKE_GPU)
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("spec,message", [("2", "no GPU 2 here (this machine has 2: 0..1)"), ("0,x", "give 'all'")])
def test_gpus_out_of_range_is_one_line(two_fake_gpus, spec, message):
    assert message in bad(invoke("tune", "--shapes", "smoke", "--gpus", spec))


def test_gpus_of_two_models_are_refused(two_fake_gpus, monkeypatch):
    other = DeviceInfo(kind="cuda", name="NVIDIA Other GPU", capability=(8, 0))
    monkeypatch.setattr("gemmbench.measure.device.detect", lambda i=0: FAKE_GPU if i == 0 else other)
    assert "mixes GPU models" in bad(invoke("tune", "--shapes", "smoke", "--gpus", "all"))


# ---------------------------------------------------------------- the worker's tune task


class FakeCtx:
    """What tune_task.work sees of its worker: results collected, no CUDA."""

    def __init__(self):
        self.devname, self.cache, self.results, self.begun = "cpu", {}, {}, []

    def begin(self, item, phase):
        self.begun.append((item, phase))

    def result(self, item, rows=None, passed=False):
        self.results[item] = rows

    def failed(self, item, rows_for, phase, exc):
        self.results[item] = rows_for(f"{phase}: {type(exc).__name__}: {exc}")


@pytest.fixture
def fake_tuning(monkeypatch):
    """tune_and_store replaced: 'triton_dp_col' has no runnable config, 'triton_dp_grouped' faults, the rest tune."""
    calls = []

    def tune_and_store(t, p, inputs, ref, beat=lambda: None, budget_s=None, exhaustive=False):
        calls.append(shard.cell_key(p, t.name))
        if t.name == "triton_dp_col":
            raise tuning.TuningError(f"no config of {t.name} runs {p.label}")
        if t.name == "triton_dp_grouped":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        wrong = tuning.Trial(DenseConfig.tile(32, 64, 128, 4, 3), error="TuningError: wrong result: x", wrong=True)
        slow = tuning.Trial(DenseConfig.tile(16, 128, 64, 4, 3), 3.0)
        ran = [tuning.Trial(DenseConfig.tile(16, 64, 128, 4, 3), 2.5, retimed=True, spread=0.04)] + [slow] * 5
        return ran + [wrong], Path("x.json"), DenseConfig.tile(16, 64, 128, 4, 3)

    monkeypatch.setattr(tuning, "tune_and_store", tune_and_store)
    return calls


def _task(p, v, seed=0):
    from dataclasses import asdict

    return {"task": "tune", "items": [shard.cell_key(p, v.name)], "problem": asdict(p), "variant": v.name, "seed": seed}


def test_the_tune_task_answers_each_job_with_done_or_failed(fake_tuning):
    jobs = build_jobs(variants="triton_dp_row,triton_dp_col,triton_dp_grouped", dtype="fp16", m="1", tp="1")[:3]
    ctx = FakeCtx()
    for p, v in jobs:
        tune_task.work(ctx, _task(p, v))
    by_variant = {k.rsplit("|", 1)[1]: rows for k, rows in ctx.results.items()}
    [row] = by_variant["triton_dp_row"]
    assert row["us"] == 2.5 and row["tried"] == 7 and row["config"]["BLOCK_M"] == 16 and "done" in row
    assert row["before"] == row["config"]  # the stored config it raced
    assert row["wrong"] == [
        {"config": DenseConfig.tile(32, 64, 128, 4, 3).to_dict(), "error": "TuningError: wrong result: x"}
    ]
    # every config timed, in the search's order: the winner (a finalist), the others, the failed one without a time
    # a finalist's spread (what decides its ties) is listed; a config timed once has none
    assert row["trials"][0] == {"config": row["config"], "us": 2.5, "retimed": True, "spread": 0.04, "error": None}
    assert row["trials"][1] == {"config": DenseConfig.tile(16, 128, 64, 4, 3).to_dict(), "us": 3.0, "retimed": False,
                                "spread": None, "error": None}  # fmt: skip
    assert len(row["trials"]) == 7
    assert row["trials"][-1] == {**row["wrong"][0], "us": None, "retimed": False, "spread": None}
    assert "no config of triton_dp_col" in by_variant["triton_dp_col"][0]["reason"]
    assert by_variant["triton_dp_grouped"][0]["reason"] == (
        "tune: RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert sorted(fake_tuning) == sorted(keys(jobs)) and all(ph == "tune" for _, ph in ctx.begun)


# ---------------------------------------------------------------- `tune` over the pool, with fake workers


class FakeTuneWorker:
    """Answers tune tasks as a worker would: done (config names the GPU it was pinned to; the config stored before:
    none at M bucket 16, the same for triton_dp_row, another for the others), failed for triton_dp_col, and (crash)
    killed once on that key."""

    def __init__(self, gpu, crash):
        self.gpu, self.crash, self.events = gpu, crash, collections.deque()

    def send(self, task):
        [key] = task["items"]
        self.events.append({"ev": "begin", "item": key, "phase": "tune"})
        if key == self.crash.get("key") and not self.crash.get("done"):
            self.crash["done"] = True
            self.events.append(None)
            return
        if task["variant"] == "triton_dp_col":
            row = {"failed": key, "reason": "no config of triton_dp_col runs it"}
        else:
            config = {"gpu": str(self.gpu)}
            before = None if task["problem"]["M"] == 16 else config if task["variant"] == "triton_dp_row" else {}
            row = {"done": key, "us": 3.25, "config": config, "tried": 5, "before": before}
        self.events.extend([{"ev": "result", "item": key, "rows": [row]}, {"ev": "done"}])

    def next_event(self, timeout=None):
        return self.events.popleft()

    def death_reason(self):
        return "worker died (killed by signal 11: CUDA error: an illegal memory access was encountered)"

    def close(self):
        pass

    def kill(self):
        pass


ARGS = ("tune", "--shapes", "smoke", "--variants", "triton_dp_row,triton_moe_row", "--dtype", "fp16", "--m", "1,32")


@pytest.fixture
def fake_workers(two_fake_gpus, monkeypatch):
    crash: dict = {}
    started = []

    def start(opts, gpu, prefix=()):
        started.append(gpu)
        return FakeTuneWorker(gpu, crash)

    monkeypatch.setattr("gemmbench.engine.worker_process.start_worker", start)
    jobs = build_jobs(variants="triton_dp_row,triton_moe_row", dtype="fp16", m="1,32", tp="1")
    return SimpleNamespace(jobs=jobs, crash=crash, started=started)


def result_rows(r) -> list[list[str]]:
    from test_cli import table_rows

    return [row for row in table_rows(r.stdout) if row[0].startswith("triton_")]


def test_tune_on_two_gpus_combines_both_workers(fake_workers):
    r = invoke(*ARGS, "--gpus", "all")
    assert r.exit_code == 0, text(r.stderr)
    rows = result_rows(r)
    assert len(rows) == len(fake_workers.jobs)
    assert {row[7] for row in rows} == {"gpu=0", "gpu=1"}  # each worker pinned to its own GPU
    assert "GPUs 0,1" in " ".join(text(r.stdout).split()) and "failed" not in text(r.stderr)
    # the search each job runs: the budget is the fine rounds' (10 s unless --time-budget)
    jobs_line = f"{len(fake_workers.jobs)} jobs, each a coarse pass, then fine rounds begun within 10 s of its end"
    assert jobs_line in text(r.stderr)


def test_tune_on_two_gpus_a_killed_worker_costs_one_job(fake_workers):
    p, v = fake_workers.jobs[3]
    fake_workers.crash["key"] = shard.cell_key(p, v.name)
    r = invoke(*ARGS, "--gpus", "0,1")
    err = text(r.stderr)
    assert r.exit_code == 1, err
    failed = [ln for ln in err.splitlines() if ln.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed: {v.name} {p.label}: GPU ")
    assert "killed by signal 11: CUDA error: an illegal memory access" in failed[0]
    assert "Traceback" not in err
    assert len(result_rows(r)) == len(fake_workers.jobs) - 1


def test_tune_without_gpus_runs_in_one_worker_too(fake_workers):
    r = invoke(*ARGS)
    assert r.exit_code == 0, text(r.stderr)
    assert fake_workers.started == [None] and len(result_rows(r)) == len(fake_workers.jobs)


def test_tune_says_which_stored_configs_it_kept_replaced_or_found_none(fake_workers):
    r = invoke(*ARGS)
    assert r.exit_code == 0, text(r.stderr)
    # the fake's rule: bucket 16 had none; at 32 triton_dp_row's stored config is its winner, triton_moe_row's another
    want = ["new" if p.M == 16 else "kept" if v.name == "triton_dp_row" else "replaced" for p, v in fake_workers.jobs]
    assert sorted(row[-1] for row in result_rows(r)) == sorted(want)
    n = {w: want.count(w) for w in ("kept", "replaced", "new")}
    assert n["kept"] and n["replaced"] and n["new"]
    line = f"{len(want)} tuned: {n['kept']} kept the stored config, {n['replaced']} replaced it, {n['new']} had none"
    assert line in text(r.stderr)


def test_tune_gpus_with_shard_splits_the_shard(fake_workers):
    r = invoke(*ARGS, "--gpus", "1", "--shard", "0/3")
    assert r.exit_code == 0, text(r.stderr)
    shard0 = shard.split_jobs(fake_workers.jobs, 3)[0]
    rows = result_rows(r)
    assert len(rows) == len(shard0) and {row[7] for row in rows} == {"gpu=1"}
    assert f"shard 0/3: {len(shard0)} of {len(fake_workers.jobs)} jobs" in text(r.stderr)


def test_tune_reports_failures_and_exits_1(fake_workers):
    jobs = build_jobs(variants="triton_dp_row,triton_dp_col", dtype="fp16", m="1,32", tp="1")
    shards = shard.split_jobs(jobs, 3)
    i = next(i for i, part in enumerate(shards) if any(v.name == "triton_dp_col" for _, v in part))
    r = invoke("tune", "--shapes", "smoke", "--variants", "triton_dp_row,triton_dp_col", "--dtype", "fp16",
               "--m", "1,32", "--shard", f"{i}/3")  # fmt: skip
    err = text(r.stderr)
    assert r.exit_code == 1, err
    assert f"shard {i}/3: {len(shards[i])} of 12 jobs" in err
    assert f"shard {i}/3 ({len(shards[i])} of 12 jobs)" in " ".join(text(r.stdout).split())  # the table's title
    failed = [ln for ln in err.splitlines() if ln.startswith("failed: ")]
    assert len(failed) == sum(v.name == "triton_dp_col" for _, v in shards[i]) > 0
    assert all(ln.startswith("failed: triton_dp_col smoke_") for ln in failed)
    assert len(result_rows(r)) == len(shards[i]) - len(failed)
