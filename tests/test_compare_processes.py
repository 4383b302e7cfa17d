"""Verdicts that see what one process's samples cannot: config-changed cells, cells run on other
physical GPUs, per-process medians from `gemmbench run --repeat N`, and the `process` column of the store."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import TIMESTAMP, stamp
from test_cli import bad, invoke, text
from test_compare import row, samples, write

from gemmbench.results import compare as cmp
from gemmbench.results import store

CFG = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}


def cfg(**over) -> str:
    return json.dumps({**CFG, **over}, sort_keys=True)


def verdicts(tmp_path, base, cand, **kw) -> dict:
    rows = cmp.compare(store.load(write(tmp_path, "b", base)), store.load(write(tmp_path, "c", cand)), 0.05, **kw)
    return {r.variant: r for r in rows}


# ---------------------------------------------------------------- config-changed


def test_a_cell_whose_configs_differ_is_config_changed_never_slower(tmp_path):
    slow = samples(130, 0.01)  # 30% slower, 1% noise: `slower` had the configs been equal
    base = [row("a", config=cfg()), row("b", config=cfg(source="stored", file="x.json", bucket=16))]
    cand = [
        row("a", s=slow, config=cfg(BLOCK_M=32)),  # another kernel ran: not a code change
        # only the provenance moved (tuned here, not stored): the same kernel, so it is timed
        row("b", s=slow, config=cfg(source="tuned")),
    ]
    got = verdicts(tmp_path, base, cand)
    assert got["a"].verdict == "config-changed" and got["a"].p_value is None
    assert got["a"].ratio == pytest.approx(1.3, rel=0.02)  # shown, not tested
    assert got["a"].reason == "config BLOCK_M 16 -> 32"
    assert got["b"].verdict == "slower"


def test_a_config_on_one_side_only_is_a_change(tmp_path):
    # a cuBLAS-like row has no config; a row that gained one ran something else
    got = verdicts(tmp_path, [row("a"), row("b")], [row("a", config=cfg()), row("b")])
    assert got["a"].verdict == "config-changed" and got["b"].verdict == "same"


def test_provenance_keys_are_the_ones_tuning_writes():
    from gemmbench.configs.provenance import Provenance

    made = [
        Provenance("stored-neighbour", file="f.json", bucket=16, neighbours=((16, 1.0), (32, None))),
        Provenance("fitted", neighbours=((16, 1.0), (32, 2.0), ("fitted", 0.5))),
        Provenance("vllm", file="E=8.json", key=4),
        Provenance("searched"),
        Provenance("borrowed", file="f.json", bucket=16, borrowed="NVIDIA_H100_80GB_HBM3"),
    ]
    assert set().union(*(p.to_dict() for p in made)) == set(cmp.PROVENANCE_KEYS)


def test_config_changed_is_counted_styled_and_fails_only_when_asked(tmp_path):
    base = write(tmp_path, "base", [row("a", config=cfg()), row("b")])
    cand = write(tmp_path, "cand", [row("a", config=cfg(BLOCK_N=128)), row("b")])
    res = invoke("compare", base, cand)
    assert res.exit_code == 0, res.stderr
    assert "config-changed" in text(res.stdout) and "1 config-changed" in text(res.stderr)
    assert invoke("compare", base, cand, "--fail-on", "config-changed").exit_code == 1
    js = json.loads(invoke("compare", base, cand, "--format", "json").stdout)
    assert js["counts"] == {"config-changed": 1, "same": 1}
    md = invoke("compare", base, cand, "--format", "markdown").stdout
    assert "| config-changed | set g bf16 M16 N64 K64 | a |" in md and "config BLOCK_N 64 -> 128 |" in md, md


# ---------------------------------------------------------------- other physical GPUs


def test_cells_on_other_gpus_are_compared_only_when_asked(tmp_path):
    slow = samples(120, 0.01)
    base = [row("a", gpu_uuid="GPU-1"), row("b", gpu_uuid="GPU-1"), row("c", gpu_uuid=None)]
    cand = [row("a", s=slow, gpu_uuid="GPU-2"), row("b", s=slow, gpu_uuid="GPU-1"), row("c", s=slow, gpu_uuid="GPU-2")]
    got = verdicts(tmp_path, base, cand)
    assert got["a"].verdict == "other-gpu" and got["a"].ratio is None and "GPU-1" in got["a"].reason
    assert got["b"].verdict == "slower"  # one GPU
    assert got["c"].verdict == "slower"  # a side without a uuid (the CPU, an older file) cannot be told apart
    assert verdicts(tmp_path, base, cand, across_gpus=True)["a"].verdict == "slower"


def test_nothing_compared_on_one_gpu_is_exit_2_naming_the_flag(tmp_path):
    base = write(tmp_path, "base", [row("a", gpu_uuid="GPU-1")])
    cand = write(tmp_path, "cand", [row("a", s=samples(120, 0.01), gpu_uuid="GPU-2")])
    assert "--across-gpus" in bad(invoke("compare", base, cand))
    res = invoke("compare", base, cand, "--across-gpus")
    assert res.exit_code == 1 and "slower" in text(res.stdout)


# ---------------------------------------------------------------- per-process medians


def processes(variant: str, medians: list[float], run_id="r", ts=TIMESTAMP) -> list[dict]:
    """One row per process: 31 samples evenly within ±0.5% of that process's median, which is exactly `m`."""
    spread = np.linspace(0.995, 1.005, 31)
    return [dict(row(variant, s=list(m * spread), ts=ts), process=i, run_id=run_id)
            for i, m in enumerate(medians)]  # fmt: skip


def test_between_process_spread_makes_a_7_percent_change_noisy(tmp_path):
    # Process medians 100, 103, 97 against 107, 110, 104: the ratio of their medians is 107/100 = 1.07, beyond 5%.
    # Welch's t on the logs: the means differ by 0.0677, each side's sd is 0.0300 (log 1.03 around log 1), so
    # t = 0.0677 / sqrt(2 * 0.0300**2 / 3) = 2.85 on ~4 degrees of freedom: p = 0.046, not below 0.01, so `noisy`.
    # Pooled, the 3 x 30 tight samples a side would call it `slower` (the within-process verdict, checked below).
    base, cand = processes("a", [100, 103, 97]), processes("a", [107, 110, 104])
    got = verdicts(tmp_path, base, cand)["a"]
    assert (got.verdict, got.within_process, got.base_processes, got.cand_processes) == ("noisy", False, 3, 3)
    assert got.ratio == pytest.approx(1.07, rel=0.002) and got.p_value == pytest.approx(0.046, abs=0.002)
    two = verdicts(tmp_path, base[:2], cand[:2])["a"]  # 2 processes a side: too few, so the pooled samples
    assert (two.verdict, two.within_process) == ("slower", True)


def test_a_change_beyond_the_process_spread_is_slower(tmp_path):
    # 100, 101, 99 against 110, 111, 109: log means differ by 0.0953, sds 0.0100, t = 0.0953 / sqrt(2 * 0.01**2 / 3)
    # = 11.7 (scipy 12.2: the logs' sd is a little under 0.01) on ~4 degrees of freedom: p = 0.0003 < 0.01
    got = verdicts(tmp_path, processes("a", [100, 101, 99]), processes("a", [110, 111, 109]))["a"]
    assert (got.verdict, got.within_process) == ("slower", False) and got.p_value < 0.001


def test_the_latest_run_of_a_cell_is_used_with_all_its_processes(tmp_path):
    old = processes("a", [200], run_id="old", ts=stamp(days=-1))  # an earlier run in the same folder
    base = old + processes("a", [100, 101, 99], run_id="new")
    got = verdicts(tmp_path, base, processes("a", [100, 101, 99]))["a"]
    assert (got.verdict, got.base_processes) == ("same", 3)


def test_within_process_only_is_in_the_json_and_the_table(tmp_path):
    base = write(tmp_path, "base", processes("a", [100, 101]))
    cand = write(tmp_path, "cand", processes("a", [100, 101]))
    js = json.loads(invoke("compare", base, cand, "--format", "json").stdout)
    assert js["within_process_only"] is True and js["rows"][0]["within_process"] is True
    assert js["rows"][0]["base_processes"] == 2
    assert "1 within-process only" in text(invoke("compare", base, cand).stdout)
    base3 = write(tmp_path, "base3", processes("a", [100, 101, 99]))
    cand3 = write(tmp_path, "cand3", processes("a", [100, 101, 99]))
    js = json.loads(invoke("compare", base3, cand3, "--format", "json").stdout)
    assert js["within_process_only"] is False and js["rows"][0]["within_process"] is False


# ---------------------------------------------------------------- the store and run --repeat


def test_run_repeat_2_writes_each_cell_once_per_process(tmp_path):
    # the smoke set's smoke_square alone (its YAML line), one cheap variant at one M: 2 rows
    (tmp_path / "one.yaml").write_text(
        "name: one\nm: [1]\ngemms:\n  - {id: smoke_square, N: 64, K: 64, parallel: column}\n"
    )
    out = tmp_path / "r.parquet"
    args = ["run", "--shapes", tmp_path / "one.yaml", "--dtype", "fp16", "--variants", "cublas_fp16"]
    res = invoke(*args, "--budget", "0.01", "--repeat", "2", "--out", out)
    assert res.exit_code == 0, res.stderr
    df = store.load([out])
    assert sorted(df["process"]) == [0, 1] and df["run_id"].nunique() == 1 and (df["status"] == "ok").all()
    assert "process 2 of 2" in text(res.stderr)
    assert "--repeat 0" in bad(invoke(*args, "--repeat", "0", "--out", tmp_path / "x.parquet"))
    assert "--resume" in bad(invoke(*args, "--repeat", "2", "--resume", out))
    assert not (tmp_path / "x.parquet").exists()


def test_a_comparison_of_identical_processes_is_valid_json(tmp_path):
    """Three processes a side, each median exactly 100: Welch's t has no spread to divide by, so its p-value is NaN,
    which JSON cannot hold; the document says null there and parses under a reader that refuses NaN."""
    base, cand = write(tmp_path, "b", processes("a", [100, 100, 100])), write(tmp_path, "c", processes("a", [100] * 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = invoke("compare", base, cand, "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert not [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]  # nothing on the terminal

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    doc = json.loads(res.stdout, parse_constant=refuse)
    [got] = doc["rows"]
    assert got["verdict"] == "same" and got["p_raw"] is None and got["p_value"] is None
