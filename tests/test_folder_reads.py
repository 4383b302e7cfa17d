"""Folders as the tour reads them: `compare`, `report` and `plot` take the run files of a folder, leave out side
tables and saved baselines saying so, and count a run copied into two places once; `report` of a folder with
nothing to report is one line; notes in the report keep their literal text; compare's JSON names its schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_cli import bad, invoke

from gemmbench.results import store

ROOT = Path(__file__).parent.parent
SHIPPED = ROOT / "gemmbench" / "baselines" / "h100.parquet"
LAYER = sorted((ROOT / "benchmarks" / "data" / "layer").glob("*.parquet"))[0]


def _run(tmp_path: Path, name: str, run_id: str, M: int = 16) -> Path:
    """A small run: the shipped baseline's fp8 QKV cells at one M, as run `run_id`."""
    rows = [dict(r, run_id=run_id) for r in store.records(store.load([SHIPPED]))
            if r["M"] == M and r["gemm"] == "attn_qkv" and r["dtype"] == "fp8"]  # fmt: skip
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    store.write_rows(path, rows)
    return path


def test_compare_of_a_folder_leaves_out_side_tables_and_saved_baselines(tmp_path):
    base = _run(tmp_path / "base", "a.parquet", "base")
    cand = tmp_path / "cand"
    _run(cand, "b.parquet", "cand")
    shutil.copy(LAYER, cand / "layer.parquet")
    _run(cand / "baselines", "saved.parquet", "base")  # a `baseline save` copy of the baseline's run
    res = invoke("compare", base, cand, "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert "compare: left out 1 side table and 1 saved baseline" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "gemmbench.compare/1" and doc["counts"]


def test_a_run_copied_twice_counts_once_and_repeat_processes_stay(tmp_path):
    _run(tmp_path / "one", "r.parquet", "run1")
    shutil.copytree(tmp_path / "one", tmp_path / "two")  # the same run file in two places
    n = len(store.load([tmp_path / "one" / "r.parquet"]))
    assert len(store.load([tmp_path])) == n
    rows = store.records(store.load([tmp_path / "one" / "r.parquet"]))
    store.write_rows(tmp_path / "two" / "r.parquet", [dict(r, process=1) for r in rows])  # another process
    assert len(store.load([tmp_path])) == 2 * n


def test_report_of_a_folder_of_layer_tables_is_one_line(tmp_path):
    shutil.copy(LAYER, tmp_path / "layer.parquet")
    line = bad(invoke("report", tmp_path, "--out", tmp_path / "rep"))
    assert line.startswith(f"error: nothing to report in {tmp_path}: no run file or profile table")


def test_a_note_with_a_glob_keeps_its_literal_text_in_the_report():
    from gemmbench.plot.report import _literal

    assert _literal("not drawn: triton_moe_* [skipped]") == r"not drawn: triton\_moe\_\* \[skipped\]"
    from markdown_it import MarkdownIt

    html = MarkdownIt().render(f"*{_literal('no row of triton_moe_* or cublas_*')}*")
    assert html.strip() == "<p><em>no row of triton_moe_* or cublas_*</em></p>"
