"""Stored configs (JSON per GPU, variant and shape; nearest M bucket), the search that `gemmbench tune`
runs (a wrong config is never chosen), `run` taking stored configs and `--retune`, and the tune
command's input errors.  On the CPU the search times with wall clocks through Triton's interpreter."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import EPOCH, HAS_CUDA
from typer.testing import CliRunner

from gemmbench import registry
from gemmbench.cli import app
from gemmbench.configs import config_files, provenance, tuning
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.kernels.fused_moe import MoeConfig
from gemmbench.kernels.gluon_ws_config import GluonConfig
from gemmbench.kernels.persistent import PersistentConfig
from gemmbench.kernels.splitk import SplitKConfig
from gemmbench.kernels.streamk import StreamKConfig
from gemmbench.measure.check import reference
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

DEV = "cuda" if HAS_CUDA else "cpu"
GPU = "NVIDIA Test GPU 80GB"


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path))
    tuning._chosen.clear()
    yield tmp_path
    tuning._chosen.clear()


def test_m_buckets():
    assert [config_files.m_bucket(m) for m in (1, 2, 16, 17, 32, 33, 64, 100, 4096)] == [
        16,
        16,
        16,
        32,
        32,
        64,
        64,
        128,
        4096,
    ]
    # MoE: the tokens decide how many experts a call touches, so decode buckets are finer
    assert [config_files.m_bucket(m, moe=True) for m in (1, 2, 3, 5, 16, 17, 4096)] == [1, 2, 4, 8, 16, 32, 4096]


def test_store_and_nearest_bucket(config_dir):
    p = Problem("s", "qkv", 16, 1280, 8192, "fp8", tp=8)
    name = "triton_splitk_atomic"
    for M, bn in ((16, 32), (64, 128)):
        config = SplitKConfig.tile(16, bn, 128, 4, 3, SPLIT_K=2)
        config_files.save(name, p.with_(M=M), GPU, config, 5.0 + M, {"date": EPOCH.date().isoformat()})
    path = config_dir / "NVIDIA_Test_GPU_80GB" / name / "N=1280,K=8192,dtype=fp8.json"
    data = json.loads(path.read_text())
    assert list(data["buckets"]) == ["16", "64"] and data["buckets"]["64"]["time_us"] == 69.0
    # the file holds the config's JSON: the keys (and their order) the dict configs had
    assert list(data["buckets"]["16"]["config"].items()) == [
        ("BLOCK_M", 16),
        ("BLOCK_N", 32),
        ("BLOCK_K", 128),
        ("SPLIT_K", 2),
        ("GROUP_M", 8),
        ("schedule", "row"),
        ("num_warps", 4),
        ("num_stages", 3),
        ("TMA", False),
    ]
    assert config_files.stored(name, p.with_(M=1), GPU)[0].BLOCK_N == 32
    cfg, where = config_files.stored(name, p.with_(M=40), GPU)  # bucket 64 is nearest to 64
    assert cfg == SplitKConfig.tile(16, 128, 128, 4, 3, SPLIT_K=2)
    # a config from the user's folder is named by its full path (a shipped one relative to the package's folder)
    assert where == provenance.Provenance("stored", str(path), 64)
    assert where.to_dict() == {"source": "stored", "file": str(path), "bucket": 64}
    assert config_files.stored(name, p.with_(M=32), GPU)[1]["bucket"] == 64  # a tie goes to the larger bucket
    assert config_files.stored(name, p.with_(N=2560), GPU) is None  # another shape
    assert config_files.stored(name, p, "Other GPU") is None  # another GPU


def test_unreadable_config_file_is_one_clear_error(config_dir):
    p = Problem("s", "qkv", 16, 1280, 8192, "fp8")
    path = config_files.config_path("triton_dp_row", p, GPU)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(tuning.TuningError, match="unreadable"):
        config_files.stored("triton_dp_row", p, GPU)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"BLOCK_Q": 16}, "unknown key 'BLOCK_Q'"),
        ({"BLOCK_N": "64"}, "BLOCK_N must be an int, not '64'"),
        ({"TMA": 1}, "TMA must be true or false, not 1"),
        ({"BLOCK_K": 48}, "BLOCK_K must be a power of two >= 16"),
    ],
)
def test_a_stored_config_that_is_not_one_names_the_file_and_the_key(config_dir, change, message):
    p = Problem("s", "qkv", 16, 1280, 8192, "fp8")
    config_files.save("triton_dp_row", p, GPU, DenseConfig.tile(16, 64, 128, 4, 3), 1.0, {})
    path = config_files.config_path("triton_dp_row", p, GPU)
    data = json.loads(path.read_text())
    data["buckets"]["16"]["config"].update(change)
    path.write_text(json.dumps(data))
    with pytest.raises(tuning.TuningError, match=f"{path}, bucket 16: DenseConfig: {message}"):
        config_files.stored("triton_dp_row", p, GPU)


def test_search_never_picks_a_wrong_config():
    v = registry.get("triton_splitk_atomic")
    p = Problem("t", "g", 5, 48, 64, "fp16")
    inputs = make_inputs(p, 1, DEV)

    def build(problem, inp, config):
        launch = v.tunable.build(problem, inp, config)
        if config.BLOCK_N == 16:  # a "fast" config that drops half of K
            fn = launch.fn
            launch.fn = lambda: fn().mul_(0.5)
        return launch

    fake = tuning.Tunable("fake", v.tunable.space, build, SplitKConfig)
    configs = [SplitKConfig.tile(16, 16, 32, 4, 1, SPLIT_K=1), SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=2)]
    trials = tuning.search(fake, p, inputs, configs, reference(p, inputs))
    assert trials[0].params is configs[1] and trials[0].config == configs[1].to_dict() and not trials[0].error
    assert "wrong result" in trials[1].error and trials[1].time_us == float("inf")
    assert trials[1].wrong and not trials[0].wrong  # a wrong result is told apart from a config that cannot run


def test_a_tune_names_the_configs_that_computed_a_wrong_result():
    """The tune's line for a job whose search met a wrong result: the variant, the shape, how many, the first
    config's fields and the check's words; none for a job without."""
    from gemmbench.engine.tasks.tune_task import TuneSink

    v = registry.get("triton_dp_row")
    report = TuneSink.of([(Problem("s", "g", m, 256, 512, "fp16"), v) for m in (16, 32)])
    bad, good = list(report.jobs)
    wrong = [{"config": {"BLOCK_M": 32, "num_warps": 4}, "error": "TuningError: wrong result: max rel err 0.5"}] * 2
    for key, w in ((bad, wrong), (good, [])):
        report.result(None, key, [{"done": key, "us": 1.0, "config": {}, "tried": 3, "wrong": w}], True, None)
    label = report.jobs[bad][0].label
    assert report.wrong_lines() == [
        f"wrong result: triton_dp_row {label}: 2 config(s) of the search space failed the check (not stored), first "
        "BLOCK_M=32 num_warps=4: TuningError: wrong result: max rel err 0.5"
    ]


def test_run_uses_the_stored_config_and_retune_ignores_it(config_dir, monkeypatch):
    monkeypatch.setattr(tuning, "_gpu_name", lambda inputs: GPU)  # the CPU poses as a GPU with stored configs
    v = registry.get("triton_splitk_reduce")
    p = Problem("t", "g", 3, 48, 96, "fp16")
    stored_cfg = SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=3)
    config_files.save(v.name, p, GPU, stored_cfg, 1.0, {})
    inputs = make_inputs(p, 1, DEV)
    launch = v.make(p, inputs)
    assert launch.params == stored_cfg and launch.provenance.source == "stored"
    assert launch.config["source"] == "stored" and launch.config["SPLIT_K"] == 3
    assert launch.config["file"].endswith("N=48,K=96,dtype=fp16.json")
    tuning._chosen.clear()
    monkeypatch.setenv(tuning.RETUNE_ENV, "1")
    launch = v.make(p, inputs)
    assert launch.config["source"] in ("tuned", "only")


def test_config_files_in_the_repository_are_valid():
    """Every committed file parses, names its own shape and holds configs the kernels accept."""
    root = config_files.shipped_configs_root()
    files = sorted(root.glob("*/*/*.json"))
    for f in files:
        data = json.loads(f.read_text())
        assert f.parent.name == data["variant"] and f.parent.parent.name == config_files.gpu_dirname(data["gpu"])
        # E is the experts one rank holds; ep and a scaling other than per tensor are named only where they apply
        ep = f"ep={data['ep']}," if data.get("ep", 1) > 1 else ""
        moe = f"E={data['E']},{ep}topk={data['topk']}," if "E" in data else ""
        scaling = f",scaling={data['scaling']}" if data.get("scaling", "tensor") not in ("tensor", "none") else ""
        fast = ",fp8_accum=fast" if data.get("fp8_accum") == "fast" else ""  # tuned under fast accumulation
        assert f.name == f"{moe}N={data['N']},K={data['K']},dtype={data['dtype']}{scaling}{fast}.json"
        v = registry.get(data["variant"])
        for bucket, entry in data["buckets"].items():
            assert int(bucket) == config_files.m_bucket(int(bucket), bool(moe)) and entry["time_us"] > 0
            cfg = entry["config"]
            assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"} <= set(cfg)
            assert cfg["BLOCK_M"] >= min(int(bucket), 16) and v.tunable is not None


# each variant's family: the dataclass its stored configs must load into
CONFIG_TYPES = {
    "triton_dp": DenseConfig,
    "triton_splitk": SplitKConfig,
    "triton_moe": MoeConfig,
    "triton_persistent": PersistentConfig,
    "triton_streamk": StreamKConfig,
    "gluon": GluonConfig,
}


def test_every_committed_config_loads_into_its_family_dataclass():
    """Every committed config goes through from_dict into its variant's dataclass, and back to the same JSON: the
    keys it has, in their order (a SplitK file from before TMA existed gets only its false added)."""
    files = sorted(config_files.shipped_configs_root().glob("*/*/*.json"))
    assert files
    for f in files:
        data = json.loads(f.read_text())
        v = registry.get(data["variant"])
        assert v.tunable.config_type is CONFIG_TYPES[v.family]
        for bucket, entry in data["buckets"].items():
            config = v.tunable.config_type.from_dict(entry["config"])
            assert type(config) is CONFIG_TYPES[v.family]
            back = config.to_dict()
            if "TMA" not in entry["config"] and v.family == "triton_splitk":
                assert back.pop("TMA") is False
            assert list(back.items()) == list(entry["config"].items()), f"{f} bucket {bucket}"
            # a file's E is one rank's experts; under expert parallelism (ep) the model has E * ep
            E, topk, ep = data.get("E", 1), data.get("topk", 1), data.get("ep", 1)
            problem = Problem("s", "g", int(bucket), data["N"], data["K"], data["dtype"], E=E * ep, topk=topk, ep=ep,
                              scaling=data.get("scaling", "tensor"),
                              fp8_accum=data.get("fp8_accum", "precise"))  # fmt: skip
            assert config_files.stored(v.name, problem, data["gpu"])[0] == config


runner = CliRunner()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--shapes", "smoke", "--tp", "0"], "--tp"),
        (["--shapes", "smoke", "--tp", "two"], "--tp"),
        (["--shapes", "smoke", "--variants", "cublas_*"], "no tunable variant"),
        (["--shapes", "nosuchset"], "nosuchset"),
    ],
)
def test_tune_bad_input_is_one_line(args, message):
    r = runner.invoke(app, ["tune", *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


@pytest.mark.skipif(HAS_CUDA, reason="the CPU refusal")
def test_tune_needs_a_gpu():
    r = runner.invoke(app, ["tune", "--shapes", "smoke"])
    assert r.exit_code == 2 and "needs a CUDA GPU" in r.output


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_tune_writes_configs_run_reads_them(config_dir, tmp_path):
    r = runner.invoke(
        app,
        ["tune", "--shapes", "smoke", "--m", "1,32", "--dtype", "fp16", "--variants", "triton_splitk_atomic",
         "--format", "json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    # each job lists what it timed: the winner first, re-timed among the finalists (a space of more than one config)
    for job in json.loads(r.stdout)["jobs"]:
        first = job["trials"][0]
        assert job["status"] == "tuned" and len(job["trials"]) == job["tried"] > 1
        assert first["config"] == job["config"] and first["us"] == job["us"]
        assert first["retimed"] and first["error"] is None and first["spread"] >= 0
    files = list(config_dir.glob("*/triton_splitk_atomic/*.json"))
    assert files and all(set(json.loads(f.read_text())["buckets"]) == {"16", "32"} for f in files)
    out = tmp_path / "r.parquet"
    r = runner.invoke(
        app,
        [
            "run",
            "--shapes",
            "smoke",
            "--m",
            "1,32",
            "--dtype",
            "fp16",
            "--variants",
            "triton_splitk_atomic",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    from gemmbench.results.store import load

    df = load([out])
    df = df[df.E == 1]
    assert (df.status == "ok").all() and df.config.map(lambda c: json.loads(c)["source"] == "stored").all()


def test_a_runs_choice_of_config_is_per_accumulation_contract():
    """A run chooses a config once per shape and contract: fast's quick candidates differ from precise's (a tile that
    fits fast accumulation can need twice the registers with promotion), so one must not serve the other."""
    from gemmbench.shapes import Problem

    t = registry.get("gluon_ws").tunable
    precise = Problem("t", "g", 2048, 1280, 8192, "fp8")
    fast = Problem("t", "g", 2048, 1280, 8192, "fp8", fp8_accum="fast")
    assert tuning._choice_key(t, precise) != tuning._choice_key(t, fast)
    assert t.space(precise, True, False) != t.space(fast, True, False)


def test_candidates_make_their_first_calls_side_by_side_and_errors_stay_theirs(monkeypatch):
    """With several compile threads, every candidate's first call runs before any is checked, overlapping in time
    (each waits at a barrier that only all of them together pass), and a candidate whose calls raise is a trial with
    its own error while the others are timed."""
    import threading

    v = registry.get("triton_splitk_atomic")
    p = Problem("t", "g", 5, 48, 64, "fp16")
    inputs = make_inputs(p, 1, DEV)
    configs = [SplitKConfig.tile(16, n, 32, 4, 1, SPLIT_K=1) for n in (16, 32, 64)]
    barrier = threading.Barrier(len(configs), timeout=10)
    first_calls = []

    def build(problem, inp, config):
        launch = v.tunable.build(problem, inp, config)
        real, calls = launch.fn, []

        def fn():
            calls.append(1)
            if len(calls) == 1:  # the first call: all three are in flight at once, or the barrier times out
                first_calls.append(config.BLOCK_N)
                barrier.wait()
            if config.BLOCK_N == 64:
                raise RuntimeError("out of resource: shared memory")
            return real()

        launch.fn = fn
        return launch

    monkeypatch.setattr(tuning, "interpreter_on", lambda: False)
    monkeypatch.setenv(tuning.COMPILE_THREADS_ENV, "3")
    beats = []
    fake = tuning.Tunable("fake", v.tunable.space, build, SplitKConfig)
    trials = tuning.search(fake, p, inputs, configs, reference(p, inputs), beat=lambda: beats.append(1))
    assert sorted(first_calls) == [16, 32, 64]
    by_n = {x.params.BLOCK_N: x for x in trials}
    assert "out of resource" in by_n[64].error and by_n[64].time_us == float("inf")
    assert not by_n[16].error and not by_n[32].error and by_n[16].time_us < float("inf")
    assert len(beats) >= len(configs)
