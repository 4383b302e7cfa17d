"""Result files: schema, round trip, crash safety, and the errors users see."""

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gemmbench.results import store
from gemmbench.results.run_schema import COLUMNS, SCHEMA, SCHEMA_VERSION, TELEMETRY_COLUMNS
from gemmbench.results.store import (
    RunWriter,
    StoreError,
    load,
    normalize_row,
    write_rows,
)


def row(**over):
    r = dict(
        run_id="run1",
        shape_set="llama3-8b",
        gemm="attn_qkv",
        M=16,
        N=6144,
        K=4096,
        E=1,
        topk=1,
        tp=1,
        dtype="fp8",
        variant="torch_scaled_mm",
        status="ok",
    )
    r.update(over)
    return r


def test_schema_columns_and_nullability():
    assert COLUMNS[:4] == ["run_id", "timestamp", "shape_set", "gemm"]
    assert COLUMNS[-1] == "schema_version" and len(COLUMNS) == 66
    assert SCHEMA.names == COLUMNS
    assert SCHEMA.field("samples_us").type == pa.list_(pa.float64())
    assert not SCHEMA.field("M").nullable and not SCHEMA.field("status").nullable
    assert SCHEMA.field("timestamp").nullable and SCHEMA.field("n_samples").nullable


def test_round_trip_through_runwriter(tmp_path):
    path = tmp_path / "sub" / "run1.parquet"
    w = RunWriter(path)
    assert not path.exists()  # nothing written before the first row
    w.append(
        row(
            timestamp="2024-06-01T12:00:00Z",
            config={"BLOCK_M": 64, "num_warps": 4},
            time_us_median=6.5,
            time_us_p20=6.25,
            time_us_p80=7.0,
            n_samples=3,
            samples_us=np.array([6.25, 6.5, 7.0]),
            flops=805306368,
            sm_count=132,
            timing_mode="graph",
            l2_state="cold",
            device="cuda",
        )
    )
    w.append(row(gemm="mlp_down", status="skipped", reason="K not a multiple of 16"))
    assert len(w.rows) == 2 and w.rows[1]["schema_version"] == SCHEMA_VERSION
    w.close()  # the rows joined into the file

    df = load([path])
    assert list(df.columns) == COLUMNS
    assert df["gemm"].tolist() == ["attn_qkv", "mlp_down"]
    assert df["M"].dtype == np.int64 and df["schema_version"].dtype == np.int64
    assert df["n_samples"].dtype == pd.Int64Dtype() and df["sm_count"].dtype == pd.Int64Dtype()
    assert df["time_us_median"].dtype == np.float64
    assert pd.api.types.is_string_dtype(df["status"])
    assert df.loc[0, "config"] == '{"BLOCK_M": 64, "num_warps": 4}'
    assert df.loc[0, "samples_us"].tolist() == [6.25, 6.5, 7.0]
    assert df.loc[0, "n_samples"] == 3 and df.loc[0, "flops"] == 805306368
    # None values come back as missing
    assert df.loc[1, "samples_us"] is None
    assert pd.isna(df.loc[1, "time_us_median"]) and pd.isna(df.loc[1, "n_samples"])
    assert pd.isna(df.loc[1, "timestamp"]) and pd.isna(df.loc[0, "reason"])
    assert df.loc[1, "reason"] == "K not a multiple of 16"


def test_normalize_fills_and_sets_version():
    r = normalize_row(row(schema_version=0))
    assert list(r) == COLUMNS
    assert r["schema_version"] == SCHEMA_VERSION and r["gpu"] is None and r["samples_us"] is None


@pytest.mark.parametrize(
    "bad, message",
    [
        (row(colour="red"), "unknown column 'colour'"),
        (row(status="fast"), "bad status 'fast'"),
        (row(variant=None), "missing required column 'variant'"),
        ({k: v for k, v in row().items() if k != "M"}, "missing required column 'M'"),
        (row(N="big"), "column 'N': bad value 'big'"),
    ],
)
def test_normalize_errors(bad, message):
    with pytest.raises(StoreError, match=message):
        normalize_row(bad)


def test_failed_write_keeps_what_was_written(tmp_path, monkeypatch):
    path = tmp_path / "run.parquet"
    w = RunWriter(path)
    w.append(row())
    w.flush()  # the first part

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", interrupted)
    w.append(row(gemm="second"))
    with pytest.raises(KeyboardInterrupt):
        w.flush()
    monkeypatch.undo()
    assert load([path])["gemm"].tolist() == ["attn_qkv"]  # the file's rows so far: its parts
    parts = store.parts_dir(path)
    assert sorted(p.name for p in parts.iterdir()) == ["part-00001.parquet"]  # temp file removed


def test_writes_grow_with_the_rows_not_their_square(tmp_path, monkeypatch):
    """A part per PART_ROWS rows and one join at the end: the file writes per row are constant, where rewriting the
    whole file per row made them grow with the row count."""
    writes: list = []
    real = store.write_atomic
    monkeypatch.setattr(store, "write_atomic", lambda path, data: (writes.append(len(data)), real(path, data)))
    for n in (store.PART_ROWS * 2, store.PART_ROWS * 8):
        writes.clear()
        w = RunWriter(tmp_path / f"r{n}.parquet")
        for m in range(n):
            w.append(row(M=m + 1))
        w.close()
        assert len(writes) == n // store.PART_ROWS + 1  # the parts, then the joined file
        assert len(load([tmp_path / f"r{n}.parquet"])) == n and not store.parts_dir(w.path).exists()


def test_a_full_disk_keeps_the_parts_written(tmp_path, monkeypatch):
    import errno

    path = tmp_path / "run.parquet"
    w = RunWriter(path)
    for m in range(store.PART_ROWS):
        w.append(row(M=m + 1))  # the 64th row writes the first part

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.tempfile, "mkstemp", full)
    with pytest.raises(OSError, match="No space left"):
        for m in range(store.PART_ROWS):
            w.append(row(M=1000 + m))
    monkeypatch.undo()
    assert len(load([path])) == store.PART_ROWS  # every row of the part that was written, intact


def test_an_earlier_run_file_plus_the_parts_of_its_resumed_sweep_load_as_one(tmp_path):
    path = tmp_path / "run.parquet"
    write_rows(path, [row(M=1)])
    w = RunWriter(path, rows=[row(M=1)])  # run --resume: the file's rows kept, new ones to parts
    w.append(row(M=2))
    w.flush()  # then the sweep is killed: the file and its parts are its rows
    assert sorted(load([path])["M"]) == [1, 2] and sorted(load([tmp_path])["M"]) == [1, 2]
    RunWriter(path, rows=store.records(load([path]))).close()  # the next --resume joins them
    assert sorted(load([path])["M"]) == [1, 2] and not store.parts_dir(path).exists()


def test_folder_of_two_runs_concatenates(tmp_path):
    write_rows(tmp_path / "b.parquet", [row(run_id="b", M=1), row(run_id="b", M=2)])
    write_rows(tmp_path / "a.parquet", [row(run_id="a", M=4)])
    (tmp_path / "notes.txt").write_text("not a result")
    df = load([tmp_path])
    assert df["run_id"].tolist() == ["a", "b", "b"]  # files sorted by name
    assert df["M"].tolist() == [4, 1, 2]
    assert load([tmp_path / "a.parquet", tmp_path / "b.parquet"])["M"].tolist() == [4, 1, 2]


def test_load_missing_path(tmp_path):
    with pytest.raises(StoreError, match="nope.parquet: no such file or folder"):
        load([tmp_path / "nope.parquet"])


def test_load_folder_without_parquet(tmp_path):
    (tmp_path / "x.parquet.tmp").write_bytes(b"partial")
    with pytest.raises(StoreError, match="no .parquet file in the folder or its subfolders"):
        load([tmp_path])


def test_load_truncated_file(tmp_path):
    path = tmp_path / "cut.parquet"
    write_rows(path, [row(), row(M=32)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="cut.parquet: not a readable Parquet file") as e:
        load([path])
    assert "\n" not in str(e.value)


def test_load_not_parquet(tmp_path):
    path = tmp_path / "text.parquet"
    path.write_text("run_id,M\nrun1,16\n")
    with pytest.raises(StoreError, match="text.parquet: not a readable Parquet file") as e:
        load([path])
    assert "\n" not in str(e.value)


def _write_with_version(path, version):
    table = pa.Table.from_pylist([normalize_row(row())], schema=SCHEMA)
    i = COLUMNS.index("schema_version")
    if version is None:
        table = table.remove_column(i).replace_schema_metadata(None)
    else:
        table = table.set_column(i, "schema_version", pa.array([version], pa.int64()))
    pq.write_table(table, path)


def test_load_old_schema(tmp_path):
    path = tmp_path / "old.parquet"
    _write_with_version(path, 0)
    with pytest.raises(StoreError, match=r"old.parquet: written by an older gemmbench \(schema 0,.*re-run it"):
        load([path])


def test_schema_1_files_read_with_uniform_routing_on_moe_rows(tmp_path):
    """Schema 1 had no routing column and only uniform routing: MoE rows read as "uniform", dense as none."""
    rows = [normalize_row(row()), normalize_row(row(gemm="moe_w13", E=8, topk=2, routing="uniform"))]
    table = pa.Table.from_pylist(rows, schema=SCHEMA).drop_columns(["routing"])
    table = table.set_column(table.column_names.index("schema_version"), "schema_version", pa.array([1, 1], pa.int64()))
    path = tmp_path / "v1.parquet"
    pq.write_table(table, path)
    df = load([path])
    assert df["routing"].isna().tolist() == [True, False] and df["routing"].iloc[1] == "uniform"
    assert df["schema_version"].tolist() == [1, 1]  # the file's own number stays in its rows


def test_load_missing_schema_version(tmp_path):
    path = tmp_path / "ancient.parquet"
    _write_with_version(path, None)
    with pytest.raises(StoreError, match="ancient.parquet: has no schema_version, written by an older gemmbench"):
        load([path])


def test_load_newer_schema(tmp_path):
    path = tmp_path / "new.parquet"
    _write_with_version(path, SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=rf"new.parquet: written by a newer gemmbench \(schema {SCHEMA_VERSION + 1},"):
        load([path])


def test_empty_run_file_loads(tmp_path):
    write_rows(tmp_path / "empty.parquet", [])
    df = load([tmp_path / "empty.parquet"])
    assert len(df) == 0 and list(df.columns) == COLUMNS


def test_run_killed_after_three_rows(tmp_path):
    path = tmp_path / "run.parquet"
    code = textwrap.dedent("""
        import os, signal, sys
        from gemmbench.results.store import RunWriter
        w = RunWriter(sys.argv[1])
        for m in (1, 2, 4):
            w.append(dict(run_id="killed", shape_set="s", gemm="g", M=m, N=64, K=64, E=1, topk=1,
                          tp=1, dtype="bf16", variant="v", status="ok", samples_us=[1.0, 2.0]))
        w.flush()  # as after PART_ROWS rows, or PART_S seconds
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    # what a writer killed mid-write leaves behind must not confuse load()
    part = store.parts_dir(path) / "part-00001.parquet"
    (store.parts_dir(path) / ".part-00002.parquet.x1y2.tmp").write_bytes(part.read_bytes()[:100])
    df = load([tmp_path])
    assert df["M"].tolist() == [1, 2, 4]
    assert (df["run_id"] == "killed").all()
    assert load([path])["samples_us"].map(list).tolist() == [[1.0, 2.0]] * 3


def test_written_files_get_the_usual_mode_not_mkstemps_0600(tmp_path):
    """Results are shared (CI artifacts, committed baselines): a file others cannot read is a defect."""
    import os

    path = tmp_path / "r.parquet"
    store.write_rows(path, [])
    mask = os.umask(0)
    os.umask(mask)
    assert (path.stat().st_mode & 0o777) == 0o666 & ~mask


def test_schema_2_files_get_the_noisy_mark_from_their_percentiles(tmp_path):
    """Schema 3 added `noisy` (p80/p20 above metrics.NOISY_SPREAD); a schema 2 file gets it from its own p20/p80."""
    rows = [
        normalize_row(row(time_us_median=10.0, time_us_p20=9.9, time_us_p80=10.2)),
        normalize_row(row(gemm="g2", time_us_median=10.0, time_us_p20=5.0, time_us_p80=40.0)),
        normalize_row(row(gemm="g3", status="error")),
    ]
    table = pa.Table.from_pylist(rows, schema=SCHEMA).drop_columns(["noisy"])
    table = table.set_column(
        table.column_names.index("schema_version"), "schema_version", pa.array([2] * 3, pa.int64())
    )
    path = tmp_path / "v2.parquet"
    pq.write_table(table, path)
    df = load([path])
    assert df["noisy"].tolist()[:2] == [False, True] and pd.isna(df["noisy"].iloc[2])


def test_a_noisy_cell_is_marked_and_never_starred_fastest():
    from rich.console import Console

    from gemmbench.results.tables import gemm_tables

    base = dict(
        row(), status="ok", dtype="fp16", flops=1, bytes_min=1, tflops=1.0, gbps=1.0, config=None, E=1, topk=1, tp=1
    )
    steady = dict(base, variant="cublas_fp16", time_us_median=10.0, time_us_p20=9.9, time_us_p80=10.1, noisy=False)
    jumpy = dict(base, variant="triton_dp_row", time_us_median=5.0, time_us_p20=1.0, time_us_p80=40.0, noisy=True)
    console = Console(width=250, record=True)
    for t in gemm_tables([steady, jumpy]):
        console.print(t)
    text = console.export_text()
    assert "* cublas_fp16" in text and "* triton_dp_row" not in text
    assert "ok, noisy (p80/p20 40.0x > 1.5x)" in text


def test_gpu_mem_peak_round_trips_and_older_files_read_it_as_null(tmp_path):
    """gpu_mem_peak_bytes (issue 18) is an int64 a row may leave null (a CPU run); a file written before it existed
    (schema 3, no such column) loads with it null and every other value as it was."""
    path = tmp_path / "now.parquet"
    write_rows(path, [row(gpu_mem_peak_bytes=16 * 2**30), row(gemm="g2")])
    df = load([path])
    assert df["gpu_mem_peak_bytes"].iloc[0] == 16 * 2**30 and pd.isna(df["gpu_mem_peak_bytes"].iloc[1])
    before = pa.Table.from_pylist([normalize_row(row(time_us_median=3.5))], schema=SCHEMA)
    before = before.drop_columns(["gpu_mem_peak_bytes", "ep"])  # what schema 3 had
    version = before.schema.get_field_index("schema_version")
    before = before.set_column(version, "schema_version", pa.array([3], pa.int64()))
    old = tmp_path / "before.parquet"
    pq.write_table(before, old)
    df = load([old])
    assert list(df.columns) == COLUMNS and pd.isna(df["gpu_mem_peak_bytes"].iloc[0]) and df["ep"].iloc[0] == 1
    assert df["time_us_median"].iloc[0] == 3.5 and df["schema_version"].iloc[0] == 3  # what wrote it


def test_an_ok_rows_note_is_shown_and_the_peak_memory_is_not():
    """An ok row with a reason (stream mode's copies that did not fit) shows it in the status column; the peak memory
    column is in the file only (the table is wide enough)."""
    from rich.console import Console

    from gemmbench.results.tables import gemm_tables

    base = dict(row(), status="ok", dtype="fp16", flops=1, bytes_min=1, tflops=1.0, gbps=1.0, config=None, noisy=False)
    note = "stream mode fell back to read-evict (cold): one copy of 15.0 GiB fits (20.0 GiB free beside it, two needed)"
    plain = dict(base, variant="cublas_fp16", time_us_median=10.0, time_us_p20=9.9, time_us_p80=10.1)
    noted = dict(plain, variant="triton_dp_row", reason=note, gpu_mem_peak_bytes=2**34)
    console = Console(width=400, record=True)
    for t in gemm_tables([plain, noted]):
        console.print(t)
    text = console.export_text()
    assert f"ok: {note}" in text and text.count("ok: ") == 1
    assert "17179869184" not in text and "gpu_mem" not in text and "16.0 GiB" not in text


def test_telemetry_round_trips_and_schema_5_files_read_it_as_null(tmp_path):
    """The telemetry columns (schema 6: clocks, power, temperature, energy, throttle) keep their values; a file
    written before them (schema 5) loads with every one null and its other values as they were."""
    path = tmp_path / "now.parquet"
    write_rows(path, [row(sm_clock_mhz_median=1755.0, throttled_samples=15, throttle="sw_power_cap"), row(gemm="g2")])
    df = load([path])
    assert df["sm_clock_mhz_median"].iloc[0] == 1755.0 and df["throttled_samples"].iloc[0] == 15
    assert df["throttle"].iloc[0] == "sw_power_cap" and df.iloc[1][list(TELEMETRY_COLUMNS)].isna().all()
    before = pa.Table.from_pylist([normalize_row(row(time_us_median=3.5))], schema=SCHEMA)
    before = before.drop_columns(list(TELEMETRY_COLUMNS))  # what schema 5 had
    version = before.schema.get_field_index("schema_version")
    before = before.set_column(version, "schema_version", pa.array([5], pa.int64()))
    old = tmp_path / "before.parquet"
    pq.write_table(before, old)
    df = load([old])
    assert list(df.columns) == COLUMNS and df.iloc[0][list(TELEMETRY_COLUMNS)].isna().all()
    assert df["time_us_median"].iloc[0] == 3.5 and df["schema_version"].iloc[0] == 5


def test_a_parts_folder_given_reads_as_its_run_file(tmp_path):
    path = tmp_path / "run.parquet"
    w = RunWriter(path)
    w.append(row(M=3))
    w.flush()
    assert load([store.parts_dir(path)])["M"].tolist() == [3]
    empty = tmp_path / "none.parquet.parts"
    empty.mkdir()
    with pytest.raises(StoreError, match="no such file or folder"):
        load([empty])


def test_shard_parts_of_an_older_gemmbench_merge(tmp_path):
    """Parts written before `dp` and `layout` named cells without them: their keys read as DP 1, vLLM's layout."""
    import json as json_mod

    from gemmbench.results import shard

    old_key = "smoke|g|16|64|64|1|1||1|1|fp16|none|v"  # 13 fields, as written then
    meta = {shard.META_KEY: json_mod.dumps({"shard": 0, "of": 1, "sweep": "s", "shard_cells": [1],
                                            "cells": [old_key]}).encode()}  # fmt: skip
    path = tmp_path / "part.parquet"
    write_rows(path, [row(shape_set="smoke", gemm="g", M=16, N=64, K=64, dtype="fp16", variant="v")], meta)
    assert shard.read_metadata(path)["cells"] == ["smoke|g|16|64|64|1|1||1|1|1|vllm|fp16|none|v"]
    rows, report = shard.read_parts([path])
    assert len(rows) == 1 and report.missing == [] and report.duplicated == []
