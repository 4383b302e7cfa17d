"""Sharded sweeps on the CPU: the partition (every cell exactly once for any N, the same on every host, balanced),
`run --shard I/N`, and `merge` with complete, missing and duplicated parts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_cli import bad, invoke, ok_rows, text

from gemmbench.models.shape_sets import load as load_set
from gemmbench.models.sharding import problems
from gemmbench.results import shard, store


def cells_of(set_name="llama70b", dtypes=("fp8", "bf16"), tp=1, variants=("cublas_x", "triton_a", "triton_b")):
    sset = load_set(set_name)
    return [(p, list(variants)) for p in problems(sset, list(dtypes), None, tp)]


def flat(cells):
    return [shard.cell_key(p, v) for p, names in cells for v in names]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 200])
def test_every_cell_in_exactly_one_shard(n):
    cells = cells_of()
    parts = shard.partition(cells, n)
    assert len(parts) == n
    keys = [k for part in parts for k in flat(part)]
    assert sorted(keys) == sorted(flat(cells)) and len(set(keys)) == len(keys)


def test_partition_is_the_same_on_every_host_and_keeps_run_order():
    a = shard.partition(cells_of(), 8)
    b = shard.partition(cells_of(), 8)  # built again from scratch: new Problem objects, same cells
    assert [flat(x) for x in a] == [flat(x) for x in b]
    order = {k: i for i, k in enumerate(flat(cells_of()))}
    for part in a:  # inside a shard, cells come in the sweep's order
        idx = [order[k] for k in flat(part)]
        assert idx == sorted(idx)
    assert shard.digest(cells_of()) == shard.digest(cells_of()) != shard.digest(cells_of(tp=2))


def test_shards_are_balanced_by_cost():
    cells = cells_of()
    for n in (2, 4, 8):
        loads = [sum(shard.cost(p) for p, names in part for _ in names) for part in shard.partition(cells, n)]
        heaviest = max(shard.cost(p) for p, _ in cells)
        assert max(loads) - min(loads) <= heaviest + 1e-9, loads  # the LPT rule's bound


@pytest.mark.parametrize("spec", ["3/3", "-1/2", "1", "a/b", "0/0", ""])
def test_bad_shard_is_one_line(spec, tmp_path):
    line = bad(invoke("run", "--shapes", "smoke", "--shard", spec, "--out", tmp_path))
    assert "--shard" in line and "I/N" in line


def _run_shard(tmp_path, spec, folder="parts"):
    res = invoke(
        "run",
        "--shapes",
        "smoke",
        "--m",
        "1,5",
        "--dtype",
        "fp16",
        "--variants",
        "cublas_fp16,torch_moe_loop",
        "--budget",
        "0.01",
        "--shard",
        spec,
        "--out",
        tmp_path / folder,
    )
    assert res.exit_code == 0, res.stderr
    ok_rows(tmp_path / folder)
    return res


@pytest.fixture(scope="module")
def three_parts(tmp_path_factory) -> list[Path]:
    """The three parts of _run_shard's sweep run with --shard I/3 (not to be changed: a test copies what it edits)."""
    tmp_path = tmp_path_factory.mktemp("shards")
    for i in range(3):
        _run_shard(tmp_path, f"{i}/3")
    # in shard order: runs in one second have names that differ only past the time (their random part)
    return sorted((tmp_path / "parts").glob("*.parquet"), key=lambda p: p.name.rsplit("-", 1)[-1])


def test_sharded_run_and_merge_equal_the_sweep(three_parts, tmp_path):
    parts = three_parts
    assert [p.name.rsplit("-", 1)[-1] for p in parts] == ["shard0of3.parquet", "shard1of3.parquet", "shard2of3.parquet"]
    metas = [shard.read_metadata(p) for p in parts]
    assert [m["shard"] for m in metas] == [0, 1, 2] and len({m["sweep"] for m in metas}) == 1
    res = invoke("merge", parts[0].parent, "--out", tmp_path / "all.parquet")
    assert res.exit_code == 0, res.stderr
    merged = store.load(tmp_path / "all.parquet")
    want = flat(
        [
            (p, ["cublas_fp16"] if not p.is_moe else ["torch_moe_loop"])
            for p in problems(load_set("smoke"), ["fp16"], [1, 5], 1)
        ]
    )
    assert sorted(store.cell_keys(merged)) == sorted(want) and (merged.status == "ok").all()


def test_merge_names_missing_and_duplicated_cells(three_parts, tmp_path):
    parts = three_parts
    # a shard that never ran: nothing written, exit 1, the shard named
    (tmp_path / "one").mkdir()
    for part in (parts[0], parts[2]):
        shutil.copy(part, tmp_path / "one")
    res = invoke("merge", tmp_path / "one", "--out", tmp_path / "m1.parquet")
    assert res.exit_code == 1 and "shard 1" in text(res.stderr) and "has no part" in text(res.stderr)
    assert not (tmp_path / "m1.parquet").exists()
    res = invoke("merge", tmp_path / "one", "--out", tmp_path / "m2.parquet", "--allow-missing")
    assert res.exit_code == 1 and (tmp_path / "m2.parquet").exists()
    # a part whose run died half way: its missing cells are named
    part = store.load(parts[1])
    store.write_rows(tmp_path / "half.parquet", store.records(part)[:1], {shard.META_KEY: store_meta(parts[1])})
    res = invoke("merge", parts[0], tmp_path / "half.parquet", parts[2], "--out", tmp_path / "m3.parquet")
    assert res.exit_code == 1 and "cells missing" in text(res.stderr)
    missing = shard.describe(store.cell_keys(part).iloc[1])
    assert missing.startswith("smoke ") and " M" in missing and "|" not in missing
    assert missing in " ".join(text(res.stderr).split())
    # the same part twice: duplicates, never written even with --allow-missing
    res = invoke("merge", parts[0], parts[0], parts[1], parts[2], "--out", tmp_path / "m4.parquet", "--allow-missing")
    assert res.exit_code == 1 and "in more than one part" in text(res.stderr)
    assert not (tmp_path / "m4.parquet").exists()


def test_a_cell_once_per_process_of_one_part_is_no_duplicate():
    """A --repeat 3 sweep's file holds each cell three times (one per process): one part, nothing duplicated; the same
    cell in two parts still is."""
    repeated = shard.check_parts([(Path("a"), None)], {Path("a"): ["x", "y"] * 3})
    assert repeated.duplicated == [] and repeated.rows == 6
    two = shard.check_parts([(Path("a"), None), (Path("b"), None)], {Path("a"): ["x", "x"], Path("b"): ["x", "y"]})
    assert two.duplicated == ["x"]


def store_meta(path) -> bytes:
    import pyarrow.parquet as pq

    return pq.read_schema(path).metadata[shard.META_KEY]


def test_parts_of_different_sweeps_are_refused(three_parts, tmp_path):
    (tmp_path / "a").mkdir()
    shutil.copy(three_parts[0], tmp_path / "a")
    res = invoke(
        "run",
        "--shapes",
        "smoke",
        "--m",
        "1",
        "--dtype",
        "fp16",
        "--variants",
        "cublas_fp16",
        "--budget",
        "0.01",
        "--shard",
        "1/3",
        "--out",
        tmp_path / "b",
    )
    assert res.exit_code == 0, res.stderr
    line = bad(invoke("merge", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "m.parquet"))
    assert "different sweeps" in line


def test_runs_of_different_sweeps_are_refused_unless_allowed_and_then_named(smoke_run, tmp_path):
    """Two whole runs (no shard parts) of other cells: one line and exit 2; --allow-mixed joins them and says so."""
    (tmp_path / "a").mkdir()
    shutil.move(smoke_run, tmp_path / "a")  # smoke at M 1, cuBLAS fp16
    res = invoke("run", "--shapes", "smoke", "--m", "5", "--dtype", "fp16", "--variants", "cublas_fp16",
                 "--budget", "0.01", "--out", tmp_path / "b")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    for folder in ("a", "b"):
        ok_rows(tmp_path / folder)
    line = bad(invoke("merge", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "m.parquet"))
    assert "2 different sweeps" in line and "--allow-mixed" in line
    assert not (tmp_path / "m.parquet").exists()
    res = invoke("merge", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "m.parquet", "--allow-mixed")
    assert res.exit_code == 0, res.stderr
    assert "joining 2 files of 2 different sweeps: smoke (3 cells" in text(res.stderr)
    assert len(store.load([tmp_path / "m.parquet"])) == 6  # 3 dense smoke GEMMs at M 1, and at M 5


def test_more_shards_than_cells_leaves_an_empty_part(tmp_path):
    res = invoke(
        "run",
        "--shapes",
        "smoke",
        "--m",
        "1",
        "--dtype",
        "fp16",
        "--variants",
        "cublas_fp16",
        "--budget",
        "0.01",
        "--shard",
        "7/9",
        "--out",
        tmp_path / "p",
    )
    assert res.exit_code == 0 and "no cells" in text(res.stderr)
    (part,) = (tmp_path / "p").glob("*.parquet")
    assert len(store.load(part)) == 0 and shard.read_metadata(part)["shard"] == 7


def test_merge_misuse(tmp_path):
    assert "--out" in bad(invoke("merge", tmp_path, "--out", tmp_path / "x.csv"))
    assert "no such file" in bad(invoke("merge", tmp_path / "nope", "--out", tmp_path / "x.parquet"))


# ---------------------------------------------------------------- one worker per GPU (simulated on the CPU)


def test_gpus_on_a_machine_without_one_is_one_line(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on the GPU machine
    assert "has none" in bad(invoke("run", "--shapes", "smoke", "--gpus", "all", "--out", tmp_path))
    assert "has none" in bad(invoke("run", "--shapes", "smoke", "--gpus", "0", "--out", tmp_path))


def _multi(tmp_path, variants, plugins=(), ms=(1, 5)):
    """sweep.run over two 'GPUs' on the CPU path (the workers ignore CUDA_VISIBLE_DEVICES there): one row writer."""
    from gemmbench import registry
    from gemmbench.engine import sweep
    from gemmbench.engine.worker_process import WorkerOptions

    for p in plugins:
        registry.load_plugin(p)
    probs = problems(load_set("smoke"), ["fp16"], list(ms), 1)
    cells = [(p, [v for v in variants if registry.get(v).moe == p.is_moe]) for p in probs]
    cells = [(p, n) for p, n in cells if n]
    worker = WorkerOptions(timing="wall", budget_s=0.01, min_samples=3, plugins=list(plugins), cpu=True)
    notes = []
    writer = store.RunWriter(tmp_path / "run.parquet")
    sweep.run(cells, sweep.SweepOptions("r", worker, gpus=[0, 1]), writer, sweep.Progress(note=notes.append))
    return cells, writer.rows, notes


def test_two_workers_run_every_cell_once_into_one_file(tmp_path):
    from conftest import PLUGINS

    # M 1 only: three crashes (each one a worker restart) over the two workers
    cells, rows, _ = _multi(
        tmp_path, ["cublas_fp16", "torch_moe_loop", "test_crash"], [PLUGINS / "crash_plugin.py"], [1]
    )
    assert len(rows) == sum(len(n) for _, n in cells)
    crashed = [r for r in rows if r["variant"] == "test_crash"]
    assert crashed and all(r["status"] == "error" and "worker died" in r["reason"] for r in crashed)
    assert all(r["status"] == "ok" for r in rows if r["variant"] != "test_crash")  # a crash costs its cell only
    merged = store.load(tmp_path / "run.parquet")
    assert len(merged) == len(rows) and sorted(store.cell_keys(merged)) == sorted(flat(cells))


def test_a_gpu_whose_worker_cannot_start_hands_its_cells_over(tmp_path):
    from conftest import PLUGINS

    cells, rows, notes = _multi(tmp_path, ["cublas_fp16"], [PLUGINS / "gpu1_broken_plugin.py"])
    assert sorted(store.cell_key(r) for r in rows) == sorted(flat(cells)) and all(r["status"] == "ok" for r in rows)
    assert any(n.startswith("GPU 1 given up (the benchmark worker could not start") for n in notes), notes


def test_gpu_indices_are_positions_in_an_outer_cuda_visible_devices(tmp_path, monkeypatch):
    """Under CUDA_VISIBLE_DEVICES=1,7 (a Slurm allocation, say) --gpus 0 means physical GPU 1: that worker gets the
    broken 'GPU 1' of the plugin and hands its cells to --gpus 1 (physical 7)."""
    from conftest import PLUGINS

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7")
    cells, rows, notes = _multi(tmp_path, ["cublas_fp16"], [PLUGINS / "gpu1_broken_plugin.py"])
    assert sorted(store.cell_key(r) for r in rows) == sorted(flat(cells))
    assert any(n.startswith("GPU 0 given up") for n in notes) and not any("GPU 1 given up" in n for n in notes)
