"""Result files: schema, round trip, crash safety, and the errors users see."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TIMESTAMP, run_row

from gemmbench.results import atomic_write, run_schema, store
from gemmbench.results.run_schema import COLUMNS, RUN_FORMAT, SCHEMA, TELEMETRY_COLUMNS
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
    return run_row(**r)


def test_schema_columns_and_nullability():
    assert COLUMNS[:4] == ["run_id", "timestamp", "shape_set", "gemm"]
    assert COLUMNS[-1] == "run_format" and len(COLUMNS) == 68
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
            timestamp=TIMESTAMP,
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
    assert len(w.rows) == 2 and w.rows[1]["run_format"] == RUN_FORMAT
    w.close()  # the rows joined into the file

    df = load([path])
    assert list(df.columns) == COLUMNS
    assert df["gemm"].tolist() == ["attn_qkv", "mlp_down"]
    assert df["M"].dtype == np.int64 and df["run_format"].dtype == np.int64
    assert df["n_samples"].dtype == pd.Int64Dtype() and df["sm_count"].dtype == pd.Int64Dtype()
    assert df["time_us_median"].dtype == np.float64
    assert pd.api.types.is_string_dtype(df["status"])
    assert df.loc[0, "config"] == '{"BLOCK_M": 64, "num_warps": 4}'
    assert df.loc[0, "samples_us"].tolist() == [6.25, 6.5, 7.0]
    assert df.loc[0, "n_samples"] == 3 and df.loc[0, "flops"] == 805306368
    # None values come back as missing
    assert df.loc[1, "samples_us"] is None
    assert pd.isna(df.loc[1, "time_us_median"]) and pd.isna(df.loc[1, "n_samples"])
    assert df.loc[1, "timestamp"] == TIMESTAMP and pd.isna(df.loc[0, "reason"])
    assert df.loc[1, "reason"] == "K not a multiple of 16"


def test_normalize_fills_and_sets_version():
    r = normalize_row(row(run_format=0))
    assert list(r) == COLUMNS
    assert r["run_format"] == RUN_FORMAT and r["gpu"] is None and r["samples_us"] is None


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

    monkeypatch.setattr(atomic_write.os, "replace", interrupted)
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

    monkeypatch.setattr(atomic_write.tempfile, "mkstemp", full)
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


def test_reading_run_and_side_tables_keeps_off_arrows_cpu_pool(tmp_path, monkeypatch):
    """pyarrow's CPU pool, once a read through a Python file object has used it, can abort the process at exit
    ("terminate called without an active exception") after the command succeeded: a CI gate would read a pass
    as a crash.  Every read the store and the side tables make must keep off that pool."""
    from gemmbench.results import side_tables

    write_rows(tmp_path / "a.parquet", [row(run_id="a", M=4)])
    pd.DataFrame({"profile_schema": [1]}).to_parquet(tmp_path / "side.parquet")
    calls = []
    real = pq.read_table

    def spy(source, **kwargs):
        calls.append(kwargs.get("use_threads", True))
        return real(source, **kwargs)

    monkeypatch.setattr(pq, "read_table", spy)
    assert load([tmp_path / "a.parquet"])["M"].tolist() == [4]
    assert len(side_tables.load_side_tables(tmp_path / "side.parquet", "profile_schema", "not one")) == 1
    assert calls == [False, False]


def test_load_missing_path(tmp_path):
    with pytest.raises(StoreError, match="nope.parquet: no such file or folder"):
        load([tmp_path / "nope.parquet"])


def test_load_folder_without_parquet(tmp_path):
    (tmp_path / "x.parquet.tmp").write_bytes(b"partial")
    with pytest.raises(StoreError, match="no run file in the folder or its subfolders"):
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


def _write_with_format(path, metadata):
    table = pa.Table.from_pylist([normalize_row(row())], schema=SCHEMA)
    pq.write_table(table.replace_schema_metadata(metadata), path)


def test_a_file_without_a_column_added_since_reads_it_as_what_older_files_measured(tmp_path):
    """`inputs` came after run format 1's first files, all timed on randn: such a file is read, as randn."""
    path = tmp_path / "before-inputs.parquet"
    table = pa.Table.from_pylist([normalize_row(row())], schema=SCHEMA).drop_columns(["inputs"])
    pq.write_table(table, path)
    assert list(load([path])["inputs"]) == ["randn"]


def test_a_file_of_gemmbench_0_1_is_refused_naming_the_commit_that_reads_it(tmp_path):
    """Before run formats the metadata key was gemmbench.schema_version (schemas 1-7): no upgrade, one line."""
    path = tmp_path / "old.parquet"
    _write_with_format(path, {b"gemmbench.schema_version": b"7"})
    with pytest.raises(StoreError) as e:
        load([path])
    assert str(e.value) == (f"{path}: a run file of gemmbench 0.1 (run schema 7); read it with gemmbench at commit "
                            f"{run_schema.LAST_READER}, or re-run it")  # fmt: skip


def test_the_last_reader_is_a_commit_of_this_repository():
    """LAST_READER names a commit that exists and still has the schema-7 reader (its run_schema.py at that commit)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout (an sdist): the commit cannot be looked up")
    shown = subprocess.run(["git", "show", f"{run_schema.LAST_READER}:gemmbench/results/run_schema.py"], cwd=root,
                           capture_output=True, text=True)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "SCHEMA_VERSION = 7" in shown.stdout


def test_a_file_without_a_format_is_refused(tmp_path):
    path = tmp_path / "ancient.parquet"
    _write_with_format(path, None)
    with pytest.raises(StoreError, match="ancient.parquet: has no gemmbench.run_format metadata"):
        load([path])


@pytest.mark.parametrize("found, says", [(RUN_FORMAT + 1, "newer gemmbench: upgrade"), (0, "older gemmbench: re-run")])
def test_a_file_of_another_format_is_refused(tmp_path, found, says):
    path = tmp_path / "other.parquet"
    _write_with_format(path, {b"gemmbench.run_format": str(found).encode()})
    with pytest.raises(
        StoreError, match=rf"other.parquet: run format {found}, this gemmbench reads {RUN_FORMAT} .*{says}"
    ):
        load([path])


@pytest.mark.parametrize("column", ["ep", "dp", "layout", "scaling", "fp8_accum", "process", "inputs", "timestamp"])
def test_a_row_a_producer_left_incomplete_is_refused_not_filled(column):
    """Every producer fills these (engine/rows.cell_row, then the sink): a row without one is a producer's bug, named
    when it is stored, never given a made-up value."""
    incomplete = {k: v for k, v in row().items() if k != column}
    with pytest.raises(StoreError, match=f"missing required column {column!r}"):
        normalize_row(incomplete)


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
                          tp=1, dtype="bf16", variant="v", status="ok", samples_us=[1.0, 2.0], ep=1, dp=1,
                          layout="vllm", scaling="none", fp8_accum="none", process=0, inputs="randn",
                          timing_mode="cold", timestamp=sys.argv[2]))
        w.flush()  # as after PART_ROWS rows, or PART_S seconds
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path), TIMESTAMP], capture_output=True, text=True, timeout=120
    )
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


def test_gpu_mem_peak_round_trips(tmp_path):
    """gpu_mem_peak_bytes is an int64 a row may leave null (a CPU run)."""
    path = tmp_path / "now.parquet"
    write_rows(path, [row(gpu_mem_peak_bytes=16 * 2**30), row(gemm="g2")])
    df = load([path])
    assert df["gpu_mem_peak_bytes"].iloc[0] == 16 * 2**30 and pd.isna(df["gpu_mem_peak_bytes"].iloc[1])


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


def test_telemetry_round_trips(tmp_path):
    """The telemetry columns (clocks, power, temperature, energy, throttle) keep their values; a row without them
    (a CPU run) reads them all null."""
    path = tmp_path / "now.parquet"
    write_rows(path, [row(sm_clock_mhz_median=1755.0, throttled_samples=15, throttle="sw_power_cap"), row(gemm="g2")])
    df = load([path])
    assert df["sm_clock_mhz_median"].iloc[0] == 1755.0 and df["throttled_samples"].iloc[0] == 15
    assert df["throttle"].iloc[0] == "sw_power_cap" and df.iloc[1][list(TELEMETRY_COLUMNS)].isna().all()


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


def test_a_kill_between_the_join_and_the_parts_removal_doubles_no_row(tmp_path, monkeypatch):
    """The joined file names its last part; parts up to it are not read again, nor joined again by a resume."""
    path = tmp_path / "run.parquet"
    w = RunWriter(path)
    for m in (1, 2, 3):
        w.append(row(M=m))
        w.flush()  # parts 1, 2, 3
    monkeypatch.setattr(store.shutil, "rmtree", lambda *a, **k: None)  # killed right after the rename
    w.close()
    monkeypatch.undo()
    assert len(list(store.parts_dir(path).iterdir())) == 3  # the parts are still there
    assert sorted(load([path])["M"]) == [1, 2, 3] and sorted(load([tmp_path])["M"]) == [1, 2, 3]
    resumed = RunWriter(path, rows=store.records(load([path])))  # run --resume of that file
    resumed.append(row(M=4))
    resumed.flush()  # numbered after the joined parts: part 4 is read, 1-3 are not
    assert sorted(load([path])["M"]) == [1, 2, 3, 4]
    resumed.close()
    assert sorted(load([path])["M"]) == [1, 2, 3, 4] and not store.parts_dir(path).exists()


def test_a_stray_file_in_the_parts_folder_is_not_a_part(tmp_path):
    path = tmp_path / "run.parquet"
    w = RunWriter(path)
    w.append(row(M=1))
    w.flush()
    for stray in ("part-x.parquet", "notes.txt", "part-00002.parquet.bak"):
        (store.parts_dir(path) / stray).write_text("not a part")
    assert load([path])["M"].tolist() == [1]
    again = RunWriter(path, rows=store.records(load([path])))  # what --resume makes: no crash on the names
    again.append(row(M=2))
    again.close()
    assert sorted(load([path])["M"]) == [1, 2]


def test_a_write_failing_in_the_clock_thread_stops_the_sweep_at_its_next_row(tmp_path, monkeypatch):
    """The clock's write fails (a full disk): the next row raises it, so the sweep stops; close writes what is left
    as a part once the disk has room again, and joins every row."""
    import errno

    monkeypatch.setattr(store, "PART_S", 0.05)
    path = tmp_path / "run.parquet"
    w = RunWriter(path)
    real = atomic_write.tempfile.mkstemp

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_write.tempfile, "mkstemp", full)
    w.append(row(M=1))
    deadline = time.monotonic() + 10
    while w.failed is None and time.monotonic() < deadline:  # the clock thread's write
        time.sleep(0.01)
    assert w.failed is not None and w.failed.errno == errno.ENOSPC
    with pytest.raises(OSError, match="No space left"):
        w.append(row(M=2))  # measured, kept in memory, and the sweep stops here
    with pytest.raises(OSError, match="No space left"):
        w.close()  # still full: nothing joined, nothing lost from disk
    assert w.unwritten == 2
    monkeypatch.setattr(atomic_write.tempfile, "mkstemp", real)  # room again
    w.close()
    assert sorted(load([path])["M"]) == [1, 2] and w.unwritten == 0
