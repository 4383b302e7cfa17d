"""The compute ceiling is one no cuBLAS row passes (marker `gpu`).  Before the ladder the fp8 peak was one 8192³
GEMM (1460.7 TFLOP/s on an H100) and cuBLAS fp8 ran Llama3-405B's GEMMs at M 2048 at 1473-1549: 101-106% of
roofline (docs/GPU-FACTS.md).  This runs those GEMMs and every Llama3-70B GEMM at M 2048, TP 1, with cublas_bf16 and cublas_fp8, in a
fresh cache (so the ladder is measured by this run), and asserts no row is above 100%.  No timing is asserted.

Wall time on an H100, estimated (not measured): the bandwidth and compute ladders ~20 s (5 rungs x 3 dtypes at
~0.7 s each with warm-up), 18 cells at --budget 0.3 plus their checks ~1 s each, worker start ~10 s: about a
minute, under the 3 minutes it may take."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.exclusive_gpu]

# Llama3-405B's four layer GEMMs (gemmbench/shapesets/llama3-405b.yaml), renamed so as not to collide with llama70b's ids
SHAPES_405B = """name: ceilings-405b-70b
description: every Llama3-70B GEMM and Llama3-405B's four layer GEMMs
m: [2048]
include: [llama70b]
gemms:
  - {id: qkv_405b, N: 18432, K: 16384, parallel: column}
  - {id: o_405b, N: 16384, K: 16384, parallel: row}
  - {id: gate_up_405b, N: 106496, K: 16384, parallel: column}
  - {id: down_405b, N: 16384, K: 53248, parallel: row}
"""


def test_no_cublas_row_passes_its_roofline(tmp_path):
    from gemmbench.results.store import load

    shapes, out, cache = tmp_path / "shapes.yaml", tmp_path / "run.parquet", tmp_path / "cache"
    shapes.write_text(SHAPES_405B)
    proc = subprocess.run(
        [sys.executable, "-m", "gemmbench", "run", "--shapes", str(shapes), "--m", "2048", "--tp", "1",
         "--variants", "cublas_bf16,cublas_fp8", "--dtype", "fp8,bf16", "--budget", "0.3", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "GEMMBENCH_CACHE": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]

    # a fresh ladder: the one cache file is this run's, with both dtypes' rungs timed
    files = list((cache / "ceilings").glob("*.json"))
    assert len(files) == 1, files
    measured = json.loads(files[0].read_text())
    timed = {r["dtype"] for r in measured["compute_ladder"] if r["tflops"] is not None}
    assert {"fp8", "bf16"} <= timed

    df = load([out])
    ok = df[df["status"] == "ok"]
    # 5 llama70b GEMMs + 4 of 405B, each once in bf16 (cublas_bf16) and once in fp8 (cublas_fp8)
    assert len(ok) == 18, df[["gemm", "variant", "status", "reason"]].to_string()
    for dtype in ("fp8", "bf16"):  # the rows were held to this run's peaks
        assert set(ok[ok["dtype"] == dtype]["ceiling_tflops"]) == {measured["peak_tflops"][dtype]}
    over = ok[ok["pct_of_roofline"] > 100.0]
    assert over.empty, over[["gemm", "variant", "tflops", "ceiling_tflops", "pct_of_roofline"]].to_string()
    assert ok["roofline_note"].isna().all()
