"""A worker that loses its CUDA context reports the failing cell and exits: that cell, and only that cell,
is an error; the cells after it run in a fresh worker (CPU simulation of a GPU fault)."""

import subprocess
import sys

from conftest import PLUGINS

from gemmbench.results.store import load


def _run(tmp_path, variants):
    out = tmp_path / "r.parquet"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gemmbench",
            "run",
            "--shapes",
            "smoke",
            "--m",
            "1",  # 3 dense smoke GEMMs: 3 cells, each a fresh worker after a fault
            "--dtype",
            "fp16",
            "--variants",
            variants,
            "--plugin",
            str(PLUGINS / "fatal_plugin.py"),
            "--budget",
            "0.01",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return load([out])


def test_fatal_cell_is_blamed_alone_and_the_next_cell_still_runs(tmp_path):
    df = _run(tmp_path, "test_fatal,cublas_fp16")  # registration order: cublas_fp16 is checked first
    fatal, good = df[df.variant == "test_fatal"], df[df.variant == "cublas_fp16"]
    assert len(fatal) == 3 and (fatal.status == "error").all()
    assert fatal.reason.str.contains("illegal memory access was encountered (simulated)", regex=False).all()
    assert len(good) == 3 and (good.status == "ok").all(), good[["status", "reason"]].to_string()


def test_fatal_cell_as_the_only_variant_leaves_one_row_per_cell(tmp_path):
    df = _run(tmp_path, "test_fatal")
    assert len(df) == 3 and (df.status == "error").all()
    # the plugin raises in make(): the reason names that phase and the plugin's own line
    assert df.reason.str.startswith("make: RuntimeError").all(), df.reason.tolist()
    assert df.reason.str.contains("fatal_plugin.py:", regex=False).all(), df.reason.tolist()
