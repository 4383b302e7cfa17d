"""The referee on a GPU, through `gemmbench run` as a user runs it: every exploit plugin of tests/plugins/exploits is
caught (never `ok`, so never ranked) in cold, stream and graph timing, and no honest variant is flagged on the sets a
user starts with.  A capture refusal (a launch that syncs cannot be put in a CUDA graph: `skipped`) counts as caught.
Exclusive: `impossible` and the fresh-inputs time compare times, which another test's kernels would stretch."""

import json
import subprocess
import sys

import pytest
from conftest import PLUGINS

pytestmark = [pytest.mark.gpu, pytest.mark.exclusive_gpu]

EXPLOITS = PLUGINS / "exploits"
# one GEMM large enough that a skipped product (cache, stale output) is far under its roofline bound, a side stream's
# product far outlasts the caller's end event, and a cache that reads its key to the host (tens of µs) still beats
# the product: 2048 x 8192 x 8192 bf16 is 275 GFLOP, ~0.35 ms on Hopper
SQUARE = "name: referee\ndescription: one square GEMM\nm: [2048]\ngemms:\n  - {id: square, N: 8192, K: 8192, parallel: none}\n"
CAUGHT = ("wrong", "impossible", "error")


def _run(args: list, out) -> list:
    """The rows of one `gemmbench run` (exit 0 or 1: rows that are not ok are the point here)."""
    proc = subprocess.run([sys.executable, "-m", "gemmbench", "run", *args, "--out", str(out), "--format", "json"],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    from gemmbench.results import store

    return store.records(store.load([out]))


def _names() -> list:
    return sorted(f"exploit_{p.stem}" for p in EXPLOITS.glob("*.py"))


@pytest.mark.parametrize("timing", ["cold", "stream", "graph"])
def test_every_exploit_is_caught(tmp_path, timing):
    sets = tmp_path / "square.yaml"
    sets.write_text(SQUARE)
    rows = _run(["--shapes", str(sets), "--dtype", "bf16", "--plugin", str(EXPLOITS), "--variants",
                 "exploit_*,cublas_bf16", "--timing", timing], tmp_path / "run.parquet")  # fmt: skip
    by = {r["variant"]: r for r in rows}
    assert by["cublas_bf16"]["status"] == "ok", by["cublas_bf16"]["reason"]
    seen = {}
    for name in _names():
        r = by[name]
        seen[name] = f"{r['status']}: {r['reason']}"
        refused = r["status"] == "skipped" and "captures a CUDA graph" in (r["reason"] or "")
        assert r["status"] in CAUGHT or (timing != "cold" and refused), f"{name} not caught in {timing}: {seen[name]}"
    print(json.dumps(seen, indent=1))  # what caught each, in the test's output (pytest -s or -rA)


HONEST = {
    "llama70b-attn cold": ["--shapes", "llama70b-attn", "--timing", "cold"],
    "llama70b-attn stream": ["--shapes", "llama70b-attn", "--timing", "stream"],
    "llama70b-attn graph": ["--shapes", "llama70b-attn", "--timing", "graph"],
    "mixtral-moe fp8 cold": ["--shapes", "mixtral-moe", "--dtype", "fp8", "--m", "16,512"],
    "deepseek-v3 fp8 block cold": ["--shapes", "deepseek-v3", "--dtype", "fp8", "--scaling", "block", "--m", "16,512"],
}


@pytest.mark.parametrize("name", list(HONEST))
def test_no_honest_variant_is_flagged(tmp_path, name):
    rows = _run(HONEST[name], tmp_path / "run.parquet")
    flagged = [f"{r['variant']} {r['gemm']} M {r['M']} {r['dtype']}: {r['status']}: {r['reason']}" for r in rows
               if r["status"] == "impossible" or (r["reason"] or "").startswith(("a timed call", "work outside",
                                                                                 "a launch set persisting", "the timer"))]  # fmt: skip
    assert not flagged, "\n".join(flagged)
    assert any(r["status"] == "ok" for r in rows)


def test_cupti_sees_a_kernel_left_on_another_stream_and_none_of_a_joined_one():
    """The precise rule, without the synchronize probes: a side stream's product still runs when the marker copy
    queued on the caller's stream after the call starts; joined back, none does."""
    import torch

    from gemmbench.measure import kernel_trace

    a = torch.randn(2048, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def forked(join: bool):
        def call():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = a @ b.t()
            if join:
                torch.cuda.current_stream().wait_stream(side)
            return out

        return call

    names, late = kernel_trace.names_and_late(forked(join=False))
    assert late and {r.name for r in late} <= set(names), (names, late)
    names, late = kernel_trace.names_and_late(forked(join=True))
    assert names and late == [], (names, late)
