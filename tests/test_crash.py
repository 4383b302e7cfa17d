"""A worker that loses its CUDA context reports the failing cell and exits: that cell, and only that cell,
is an error; the cells after it run in a fresh worker (CPU simulation of a GPU fault)."""

from conftest import PLUGINS
from test_cli import invoke

from gemmbench.results.store import load


def _run(tmp_path, variants, shapes="smoke"):
    out = tmp_path / "r.parquet"
    res = invoke("run", "--shapes", shapes, "--m", "1", "--dtype", "fp16", "--variants", variants, "--plugin",
                 PLUGINS / "fatal_plugin.py", "--budget", "0.01", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    return load([out])


def test_fatal_cell_is_blamed_alone_and_the_next_cell_still_runs(tmp_path):
    # 2 GEMMs at M 1: 2 cells of each variant, the second GEMM in a fresh worker after the first one's fault (a
    # worker start is seconds: two GEMMs show the fault, the restart and the cell after it)
    shapes = tmp_path / "two.yaml"
    shapes.write_text(
        "name: two\ngemms: [{id: a, N: 64, K: 64, parallel: none}, {id: b, N: 80, K: 48, parallel: none}]\n"
    )
    df = _run(tmp_path, "test_fatal,cublas_fp16", shapes)  # registration order: cublas_fp16 is checked first
    fatal, good = df[df.variant == "test_fatal"], df[df.variant == "cublas_fp16"]
    assert len(fatal) == 2 and (fatal.status == "error").all()
    assert fatal.reason.str.contains("illegal memory access was encountered (simulated)", regex=False).all()
    assert len(good) == 2 and (good.status == "ok").all(), good[["status", "reason"]].to_string()
    assert sorted(good.gemm) == sorted(fatal.gemm) == ["a", "b"]  # each GEMM: its fault, and cuBLAS beside it


def test_fatal_cell_as_the_only_variant_leaves_one_row_per_cell(tmp_path):
    # two GEMMs: the second cell runs in the worker started after the first one's fault
    shapes = tmp_path / "two.yaml"
    shapes.write_text(
        "name: two\ngemms: [{id: a, N: 32, K: 32, parallel: none}, {id: b, N: 32, K: 32, parallel: none}]\n"
    )
    df = _run(tmp_path, "test_fatal", shapes)
    assert len(df) == 2 and (df.status == "error").all()
    # the plugin raises in make(): the reason names that phase and the plugin's own line
    assert df.reason.str.startswith("make: RuntimeError").all(), df.reason.tolist()
    assert df.reason.str.contains("fatal_plugin.py:", regex=False).all(), df.reason.tolist()
