"""The `--format json` documents of tune, layer and ceilings: each names its schema and carries, entry by entry, what
the table shows (docs/USAGE.md: JSON output)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from test_cli import invoke, ok_rows

from gemmbench import registry
from gemmbench.shapes import Problem


def test_tune_document_has_every_job_tuned_or_failed():
    from gemmbench.engine.tasks.tune_task import TuneSink

    p16, p32 = Problem("s", "g", 16, 256, 512, "fp16"), Problem("s", "g", 32, 256, 512, "fp16")
    v = registry.get("triton_dp_row")
    report = TuneSink.of([(p16, v), (p32, v)])
    k16, k32 = list(report.jobs)
    report.result(None, k16, [{"done": k16, "us": 12.5, "config": {"BLOCK_M": 16}, "tried": 7, "file": "f.json"}],
                  True, None)  # fmt: skip
    report.lost(None, k32, "timeout after 5 s (tune)", 1)
    doc = report.document("NVIDIA H200", Path("/cfg/NVIDIA_H200"))
    assert doc["schema"] == "gemmbench.tune/1" and doc["gpu"] == "NVIDIA H200" and doc["folder"] == "/cfg/NVIDIA_H200"
    tuned, failed = doc["jobs"]
    assert (tuned["variant"], tuned["bucket"], tuned["status"], tuned["us"], tuned["tried"]) == (
        "triton_dp_row", 16, "tuned", 12.5, 7)  # fmt: skip
    assert tuned["config"] == {"BLOCK_M": 16} and tuned["file"] == "f.json"
    assert (failed["bucket"], failed["status"], failed["reason"]) == (32, "failed", "GPU 1: timeout after 5 s (tune)")


def test_layer_document_holds_the_layer_tables_rows(smoke_layer_json):
    res, out = smoke_layer_json
    assert res.exit_code == 0, res.stderr
    ok_rows(out)
    doc = json.loads(res.stdout)  # stdout is the document alone
    assert doc["schema"] == "gemmbench.layer/1" and doc["file"] == str(out)
    from gemmbench.results.side_tables import load_layer_tables

    table = load_layer_tables([out])
    assert len(doc["rows"]) == len(table) and {r["part"] for r in doc["rows"]} == set(table["part"])


def test_ceilings_document_has_both_ladders(monkeypatch):
    from gemmbench.measure import ceilings

    got = ceilings.Ceilings(
        mode="cold", bandwidth_ladder=[[1 << 20, 900.0], [1 << 30, 4200.0]], peak_tflops={"bf16": 700.0},
        compute_ladder=[dict(dtype="bf16", m=8192, n=8192, k=8192, median_us=1600.0, fast_us=1570.0, tflops=700.0),
                        dict(dtype="fp8", m=8192, n=8192, k=8192, skipped="no fp8 path")],
        key={"gpu": "X", "mode": "cold", "torch": "2.11.0"},  # what ceilings.cache_key writes
    )  # fmt: skip
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ceilings, "ceilings", lambda mode, remeasure=False: got)
    res = invoke("ceilings", "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "gemmbench.ceilings/1" and doc["peak_tflops"] == {"bf16": 700.0}
    assert doc["bandwidth_ladder"] == [{"bytes": 1 << 20, "gbps": 900.0}, {"bytes": 1 << 30, "gbps": 4200.0}]
    bf16, fp8 = doc["compute_ladder"]
    assert (bf16["M"], bf16["p10_us"], bf16["tflops"], fp8["skipped"]) == (8192, 1570.0, 700.0, "no fp8 path")
