"""`gemmbench tune --shard I/N` and `--gpus` on the CPU: the split of the tune jobs (every job exactly once, the same
on every host), the one-line input errors, the driver of one child per GPU with fake children (all fine, a child
killed mid-way, a GPU whose children always die), the child's side of the protocol and the whole `tune --gpus`
command with fake children.  Nothing here needs CUDA: where the command asks for a GPU, torch is told there are
some (monkeypatch) and the tuning itself is replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA
from test_cli import bad, invoke, text

from gemmbench import tune_multi, tuning
from gemmbench.cli import tune as cli_tune
from gemmbench.device import DeviceInfo
from gemmbench.kernels.dense_dp import DenseConfig

FAKE_GPU = DeviceInfo(kind="cuda", name="NVIDIA Fake GPU 80GB", capability=(9, 0), sm_count=132)


def build_jobs(shapes="smoke", variants="triton_*", dtype="fp16,fp8", m="1,32", tp="1,2"):
    problems, chosen = cli_tune._select(shapes, variants, dtype, m, tp, None)
    return cli_tune._jobs(problems, chosen, FAKE_GPU)


def keys(jobs) -> list[str]:
    return [tune_multi.job_key(p, v.name) for p, v in jobs]


# ---------------------------------------------------------------- the split


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_split_covers_every_job_once_and_is_the_same_on_every_host(n):
    jobs = build_jobs("llama70b", dtype="fp8,bf16", m="1,64", tp="1,2,8")
    assert len(set(keys(jobs))) == len(jobs) > 20
    parts = tune_multi.split_jobs(jobs, n)
    assert len(parts) == n
    flat = [k for part in parts for k in keys(part)]
    assert sorted(flat) == sorted(keys(jobs)) and len(set(flat)) == len(flat)
    again = tune_multi.split_jobs(build_jobs("llama70b", dtype="fp8,bf16", m="1,64", tp="1,2,8"), n)
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
    monkeypatch.setattr("gemmbench.device.detect", lambda i=0: FAKE_GPU)
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("spec,message", [("2", "no GPU 2 here (this machine has 2: 0..1)"), ("0,x", "give 'all'")])
def test_gpus_out_of_range_is_one_line(two_fake_gpus, spec, message):
    assert message in bad(invoke("tune", "--shapes", "smoke", "--gpus", spec))


def test_gpus_of_two_models_are_refused(two_fake_gpus, monkeypatch):
    other = DeviceInfo(kind="cuda", name="NVIDIA Other GPU", capability=(8, 0))
    monkeypatch.setattr("gemmbench.device.detect", lambda i=0: FAKE_GPU if i == 0 else other)
    assert "mixes GPU models" in bad(invoke("tune", "--shapes", "smoke", "--gpus", "all"))


def test_a_child_is_pinned_to_its_gpu_under_an_outer_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert [tune_multi.visible_device(g) for g in (0, 1)] == ["4", "6"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert tune_multi.visible_device(1) == "1"


# ---------------------------------------------------------------- the driver, with fake children

# argv: the keys, then what to do (JSON).  Lines that are not events (a library's chatter) must be ignored.
FAKE_CHILD = r"""
import json, os, signal, sys
keys, plan = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if plan.get("die_at_start"):
    sys.stderr.write("RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    sys.exit(3)
for k in keys:
    print(json.dumps({"begin": k}), flush=True)
    if k in plan.get("crash_on", []):
        sys.stderr.write("triton: an illegal memory access was encountered\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if k in plan.get("fail", []):
        print(json.dumps({"failed": k, "reason": "no config runs it"}), flush=True)
        continue
    print("compiling... some library chatter on stdout", flush=True)
    print(json.dumps({"done": k, "us": 1.5, "config": {"BLOCK_M": 16}, "tried": 3}), flush=True)
if plan.get("crash_at_exit"):
    os.kill(os.getpid(), signal.SIGSEGV)
"""

KEYS = [f"job{i}" for i in range(10)]


def round_robin(keys_: list, n: int) -> list:
    return [keys_[i::n] for i in range(n)]


class Fakes:
    """spawn(gpu, keys) for run_jobs; plans[gpu] says what that GPU's children do; records every spawn."""

    def __init__(self, plans: dict):
        self.plans, self.spawned, self.events = plans, [], []

    def spawn(self, gpu, keys_):
        self.spawned.append((gpu, list(keys_)))
        return subprocess.Popen(
            [sys.executable, "-c", FAKE_CHILD, json.dumps(keys_), json.dumps(self.plans.get(gpu, {}))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def on_event(self, gpu, event):
        self.events.append((gpu, event))

    def run(self, gpus=(0, 1), keys_=KEYS, **kw):
        return tune_multi.run_jobs(list(gpus), list(keys_), self.spawn, round_robin, self.on_event, **kw)

    def spawns_of(self, gpu):
        return [k for g, k in self.spawned if g == gpu]


def test_all_children_succeed():
    fakes = Fakes({})
    outcome = fakes.run()
    assert sorted(outcome.done) == sorted(KEYS) and not outcome.failed and not outcome.lost
    assert sorted(fakes.spawned) == [(0, KEYS[0::2]), (1, KEYS[1::2])]  # one child per GPU, its share of the split
    assert outcome.done["job3"]["config"] == {"BLOCK_M": 16} and outcome.done["job3"]["us"] == 1.5
    assert sorted(e["begin"] for _, e in fakes.events if "begin" in e) == sorted(KEYS)
    assert all(e.get("begin", e.get("done")) in KEYS[g::2] for g, e in fakes.events)  # each event names its GPU


def test_a_child_killed_mid_way_costs_only_its_job():
    fakes = Fakes({0: {"crash_on": ["job4"]}})  # GPU 0 has job0, 2, 4, 6, 8
    outcome = fakes.run()
    assert list(outcome.failed) == ["job4"]
    assert outcome.failed["job4"].startswith("GPU 0: killed by signal 11: ")
    assert "illegal memory access" in outcome.failed["job4"]
    assert sorted(outcome.done) == sorted(set(KEYS) - {"job4"}) and not outcome.lost
    assert fakes.spawns_of(0) == [["job0", "job2", "job4", "job6", "job8"], ["job6", "job8"]]  # relaunched for the rest
    assert fakes.spawns_of(1) == [KEYS[1::2]]
    assert (0, {"died": outcome.failed["job4"], "left": 2}) in fakes.events


def test_a_job_the_child_reports_failed_is_not_retried():
    fakes = Fakes({1: {"fail": ["job3"]}})
    outcome = fakes.run()
    assert outcome.failed == {"job3": "no config runs it"} and len(outcome.done) == 9 and len(fakes.spawned) == 2


def test_a_gpu_whose_children_always_die_hands_its_jobs_to_the_other():
    fakes = Fakes({1: {"die_at_start": True}})
    outcome = fakes.run()
    assert sorted(outcome.done) == sorted(KEYS) and not outcome.failed  # nothing was in flight: nothing lost
    assert list(outcome.lost) == [1] and "exit code 3: RuntimeError: CUDA error" in outcome.lost[1]
    assert fakes.spawns_of(1) == [KEYS[1::2]] * tune_multi.MAX_DEATHS
    assert fakes.spawns_of(0) == [KEYS[0::2], KEYS[1::2]]  # the second round: GPU 1's jobs
    assert (1, {"lost": outcome.lost[1], "left": 5}) in fakes.events


def test_a_gpu_that_faults_on_every_job_loses_max_deaths_jobs_then_hands_over():
    fakes = Fakes({1: {"crash_on": KEYS}})
    outcome = fakes.run()
    assert sorted(outcome.failed) == ["job1", "job3", "job5"]  # three deaths in a row, one job each
    assert sorted(outcome.done) == sorted(set(KEYS) - {"job1", "job3", "job5"})
    assert list(outcome.lost) == [1] and fakes.spawns_of(0)[-1] == ["job7", "job9"]


def test_deaths_in_a_row_are_counted_between_tuned_jobs():
    # each child tunes one job, then dies on the next: never three deaths in a row without progress
    fakes = Fakes({0: {"crash_on": ["job2", "job6"]}})
    outcome = fakes.run(gpus=[0], max_deaths=2)
    assert sorted(outcome.failed) == ["job2", "job6"] and len(outcome.done) == 8 and not outcome.lost


def test_when_every_gpu_is_given_up_the_rest_fail_with_the_reasons():
    fakes = Fakes({0: {"die_at_start": True}, 1: {"die_at_start": True}})
    outcome = fakes.run()
    assert sorted(outcome.failed) == sorted(KEYS) and not outcome.done
    assert all(r.startswith("no GPU left to tune it (GPU ") for r in outcome.failed.values())
    assert len(fakes.spawned) == 2 * tune_multi.MAX_DEATHS


def test_a_crash_after_the_last_job_costs_nothing():
    fakes = Fakes({0: {"crash_at_exit": True}})
    outcome = fakes.run()
    assert sorted(outcome.done) == sorted(KEYS) and not outcome.failed and len(fakes.spawned) == 2


def test_a_child_that_cannot_start_counts_as_a_death():
    def spawn(gpu, keys_):
        raise OSError("no such file: python")

    outcome = tune_multi.run_jobs([0], ["a", "b"], spawn, round_robin)
    assert sorted(outcome.failed) == ["a", "b"] and "cannot start a child" in outcome.lost[0]


# ---------------------------------------------------------------- the child's side


@pytest.fixture
def fake_tuning(monkeypatch):
    """_tune_job replaced: 'triton_dp_col' has no runnable config, 'triton_dp_grouped' faults, the rest tune."""
    calls = []

    def tune_job(p, v, seed, cache):
        calls.append(tune_multi.job_key(p, v.name))
        if v.name == "triton_dp_col":
            raise tuning.TuningError(f"no config of {v.name} runs {p.label}")
        if v.name == "triton_dp_grouped":
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
        return tuning.Trial(DenseConfig.tile(16, 64, 128, 4, 3), 2.5), Path("x.json"), 7

    monkeypatch.setattr(cli_tune, "_tune_job", tune_job)
    return calls


def worker_events(result) -> list[dict]:
    return [json.loads(ln) for ln in result.stdout.splitlines()]


def test_a_child_tunes_the_listed_jobs_in_their_order(two_fake_gpus, fake_tuning, tmp_path):
    jobs = build_jobs(variants="triton_dp_row,triton_dp_col", dtype="fp16", m="1", tp="1")
    listed = [keys(jobs)[i] for i in (2, 0, 3)] + ["smoke|nosuch|1|1|1|1|1||1|fp16|triton_dp_row"]
    (tmp_path / "jobs.json").write_text(json.dumps(listed))
    r = invoke(
        "tune",
        "--shapes",
        "smoke",
        "--variants",
        "triton_dp_row,triton_dp_col",
        "--dtype",
        "fp16",
        "--m",
        "1",
        "--worker-jobs",
        tmp_path / "jobs.json",
    )
    assert r.exit_code == 0, r.stderr
    events = worker_events(r)
    assert events[0] == {"failed": listed[3], "reason": events[0]["reason"]}
    assert [e.get("begin") for e in events[1::2]] == listed[:3] and fake_tuning == listed[:3]
    for key, e in zip(listed[:3], events[2::2], strict=False):
        if key.endswith("triton_dp_col"):
            assert e == {"failed": key, "reason": e["reason"]} and "no config of triton_dp_col" in e["reason"]
        else:
            assert e["done"] == key and e["us"] == 2.5 and e["tried"] == 7


def test_a_child_stops_after_a_fault_with_exit_code_1(two_fake_gpus, fake_tuning, tmp_path):
    jobs = build_jobs(variants="triton_dp_row,triton_dp_grouped", dtype="fp16", m="1", tp="1")
    (tmp_path / "jobs.json").write_text(json.dumps(keys(jobs)))
    r = invoke(
        "tune",
        "--shapes",
        "smoke",
        "--variants",
        "triton_dp_row,triton_dp_grouped",
        "--dtype",
        "fp16",
        "--m",
        "1",
        "--worker-jobs",
        tmp_path / "jobs.json",
    )
    events = worker_events(r)
    assert r.exit_code == 1
    assert events[-1] == {"failed": keys(jobs)[1], "reason": "CUDA error: an illegal memory access was encountered"}
    assert len(fake_tuning) == 2  # the job after the fault was not tried in this (now broken) process


def test_in_process_tune_reports_failures_and_exits_1(two_fake_gpus, fake_tuning):
    shards = tune_multi.split_jobs(
        build_jobs(variants="triton_dp_row,triton_dp_col", dtype="fp16", m="1,32", tp="1"), 3
    )
    i = next(i for i, jobs in enumerate(shards) if any(v.name == "triton_dp_col" for _, v in jobs))
    r = invoke(
        "tune",
        "--shapes",
        "smoke",
        "--variants",
        "triton_dp_row,triton_dp_col",
        "--dtype",
        "fp16",
        "--m",
        "1,32",
        "--shard",
        f"{i}/3",
    )
    err = text(r.stderr)
    assert r.exit_code == 1, err
    assert f"shard {i}/3: {len(shards[i])} of 12 jobs" in err
    assert f"shard {i}/3 ({len(shards[i])} of 12 jobs)" in " ".join(text(r.stdout).split())  # the table's title
    failed = [ln for ln in err.splitlines() if ln.startswith("failed: ")]
    assert len(failed) == sum(v.name == "triton_dp_col" for _, v in shards[i]) > 0
    assert all(ln.startswith("failed: triton_dp_col smoke_") for ln in failed)
    assert sorted(fake_tuning) == sorted(keys(shards[i]))
    assert len(result_rows(r)) == len(shards[i]) - len(failed)


# ---------------------------------------------------------------- `tune --gpus` with fake children

# Stands in for `python -m gemmbench tune ... --worker-jobs FILE`: tunes nothing, says which GPU it was pinned to,
# and (FAKE_CRASH_KEY) is killed once on that job.
FAKE_WORKER = r"""
import json, os, signal, sys
keys = json.loads(open(sys.argv[sys.argv.index("--worker-jobs") + 1]).read())
crash, marker = os.environ.get("FAKE_CRASH_KEY"), os.environ["FAKE_MARKER"]
for k in keys:
    print(json.dumps({"begin": k}), flush=True)
    if k == crash and not os.path.exists(marker):
        open(marker, "w").close()
        print("CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    print(json.dumps({"done": k, "us": 3.25, "config": {"gpu": os.environ["CUDA_VISIBLE_DEVICES"]}, "tried": 5}),
          flush=True)
"""

ARGS = ("tune", "--shapes", "smoke", "--variants", "triton_dp_row,triton_moe_row", "--dtype", "fp16", "--m", "1,32")


@pytest.fixture
def fake_workers(two_fake_gpus, monkeypatch, tmp_path):
    monkeypatch.setattr(cli_tune, "_child_command", lambda *a: [sys.executable, "-c", FAKE_WORKER])
    monkeypatch.setenv("FAKE_MARKER", str(tmp_path / "crashed"))
    return build_jobs(variants="triton_dp_row,triton_moe_row", dtype="fp16", m="1,32", tp="1")


def result_rows(r) -> list[list[str]]:
    from test_cli import table_rows

    return [row for row in table_rows(r.stdout) if row[0].startswith("triton_")]


def test_tune_on_two_gpus_combines_both_children(fake_workers):
    r = invoke(*ARGS, "--gpus", "all")
    assert r.exit_code == 0, text(r.stderr)
    rows = result_rows(r)
    assert len(rows) == len(fake_workers)
    assert {row[7] for row in rows} == {"gpu=0", "gpu=1"}  # each child pinned to its own GPU
    assert "GPUs 0,1" in " ".join(text(r.stdout).split()) and "failed" not in text(r.stderr)


def test_tune_on_two_gpus_a_killed_child_costs_one_job(fake_workers, monkeypatch):
    p, v = fake_workers[3]
    monkeypatch.setenv("FAKE_CRASH_KEY", tune_multi.job_key(p, v.name))
    r = invoke(*ARGS, "--gpus", "0,1")
    err = text(r.stderr)
    assert r.exit_code == 1, err
    failed = [ln for ln in err.splitlines() if ln.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed: {v.name} {p.label}: GPU ")
    assert "killed by signal 11: CUDA error: an illegal memory access" in failed[0]
    assert "a child died" in err and "Traceback" not in err
    assert len(result_rows(r)) == len(fake_workers) - 1


def test_tune_gpus_with_shard_splits_the_shard(fake_workers):
    r = invoke(*ARGS, "--gpus", "1", "--shard", "0/3")
    assert r.exit_code == 0, text(r.stderr)
    shard0 = tune_multi.split_jobs(fake_workers, 3)[0]
    rows = result_rows(r)
    assert len(rows) == len(shard0) and {row[7] for row in rows} == {"gpu=1"}
    assert f"shard 0/3: {len(shard0)} of {len(fake_workers)} jobs" in text(r.stderr)


def test_child_command_rebuilds_the_same_selection():
    cmd = cli_tune._child_command("smoke", "triton_*", "fp16", "1,32", "1,2", [Path("p.py")], 7)
    assert cmd[:4] == [sys.executable, "-m", "gemmbench", "tune"]
    opts = dict(zip(cmd[4::2], cmd[5::2], strict=False))
    assert opts == {
        "--shapes": "smoke",
        "--variants": "triton_*",
        "--dtype": "fp16",
        "--tp": "1,2",
        "--seed": "7",
        "--m": "1,32",
        "--plugin": str(Path("p.py").resolve()),
    }
    assert "--gpus" not in cmd and "--shard" not in cmd and os.path.isabs(opts["--plugin"])
