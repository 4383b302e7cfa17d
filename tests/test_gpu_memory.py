"""GPU tests (marker `gpu`; skipped without CUDA) of inputs that fit in memory: DeepSeek-V3's routed experts (256
experts, top-8) checked `ok` on one GPU with a peak memory bound derived from the shapes, and stream mode's copy plan through
the worker's time task on a real GPU.  No timing is asserted."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from conftest import TaskContext

from gemmbench import registry
from gemmbench.engine.tasks import time_task
from gemmbench.measure import device, memory
from gemmbench.measure.check import check_cell
from gemmbench.measure.inputs import make_inputs
from gemmbench.measure.timing import Timer, plan_copies
from gemmbench.shapes import Problem

pytestmark = pytest.mark.gpu

GiB = 1 << 30
E, TOPK = 256, 8
# DeepSeek-V3's routed experts (n_routed_experts 256, num_experts_per_tok 8, hidden 7168, moe_intermediate 2048):
# w13 is gate and up stacked, N = 2 x 2048 = 4096 over K = 7168; w2 is down, N = 7168 over K = 2048
GEMMS = {"w13": (4096, 7168), "w2": (7168, 2048)}
# torch_moe_loop has no fp8 path (its dtypes are fp16 and bf16): it is checked in bf16 only
CASES = [("triton_moe_col", "bf16"), ("triton_moe_col", "fp8"), ("torch_moe_loop", "bf16")]


def peak_bound(M: int, N: int, K: int, dtype: str) -> int:
    """The most a check of one (M, N, K) DeepSeek cell may allocate, in bytes:
    - the weight, E x N x K in its dtype (bf16 2 bytes, fp8 1): 14 GiB (w13 bf16) ... 3.5 GiB (w2 fp8);
    - the activations, M x K in its dtype, and two fp32 copies of them (the reference's a and one expert's gathered
      rows, at most M of them): 3 x M x K x 4 bytes at most;
    - ONE expert's weight in fp32, N x K x 4 (112 MiB for w13): the draw's chunk, then the reference's slice, never
      both (the draw is over before the check); the old reference held all 256 (28 GiB for w13);
    - outputs of R = M x 8 rows: the reference's (R, N) fp32 and one expert's product (at most M rows), compare()'s
      out.float(), err, its NaN fill and torch.where's result (4 more fp32, plus a bool mask), the launch's bf16
      output and the two a run's quick config choice times (3 x 2 bytes): under 8 x R x N x 4 bytes;
    - 512 MiB for what the harness keeps beside it: the 256 MiB eviction buffer the quick choice times cold with,
      the routing and alignment buffers (R int32s and fp32 weights: 0.25 MiB at M 4096), scales, workspaces."""
    elem = 1 if dtype == "fp8" else 2
    R = M * TOPK
    return E * N * K * elem + M * K * elem + 3 * M * K * 4 + N * K * 4 + 8 * R * N * 4 + (512 << 20)


@pytest.mark.exclusive_gpu  # up to 15 GiB each: eight workers at once would not fit in 80 GB
@pytest.mark.parametrize("name,dtype", CASES)
@pytest.mark.parametrize("M", [1, 8, 4096])
@pytest.mark.parametrize("gemm", GEMMS)
def test_deepseek_v3_routed_experts_check_ok_within_the_bound(gemm, M, name, dtype):
    N, K = GEMMS[gemm]
    p = Problem("deepseek-v3", f"moe_{gemm}", M, N, K, dtype, E=E, topk=TOPK)
    v = registry.get(name)
    assert v.unsupported_reason(p, device.detect()) is None  # on a GPU this case runs: never skipped in silence
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()  # what earlier tests left (caches), not this cell's
    memory.reset_peak("cuda")
    inputs = make_inputs(p, 1, "cuda", scaling=v.fp8_scaling)
    result = check_cell(p, v, inputs).result
    peak = memory.peak_bytes("cuda") - base
    del inputs
    assert result.ok, f"{name} {p.label}: {result.detail}"
    bound = peak_bound(M, N, K, dtype)
    assert peak <= bound, f"{name} {p.label}: peak {peak / GiB:.2f} GiB over the bound {bound / GiB:.2f} GiB"
    # the bound is tight enough to mean something: the weight in fp32 (the old reference's copy) would not fit it
    assert bound < E * N * K * (4 + (1 if dtype == "fp8" else 2))


def _time_row(timing: str) -> dict:
    p = Problem("test", "g", 16, 4096, 4096, "bf16")  # a 32 MiB weight: 16 copies make the 512 MiB floor
    ctx = TaskContext(timing, "cuda", Timer(timing, budget_s=0.05))
    time_task.work(ctx, {"task": "time", "items": ["cublas_bf16"], "problem": asdict(p), "seed": 1})
    [row] = ctx.rows["cublas_bf16"]
    assert row["status"] == "ok", row.get("reason")
    return row


def test_stream_mode_with_room_times_distinct_copies_and_records_the_peak():
    row = _time_row("stream")
    assert row["timing_mode"] == "stream" and row["l2_state"] == "streaming" and row["reason"] is None
    # 16 copies of the 32 MiB weight (4096 x 4096 x 2 bytes) at least: the peak holds them all
    assert row["gpu_mem_peak_bytes"] >= 16 * 4096 * 4096 * 2


def test_stream_mode_without_room_falls_back_to_cold_and_says_so(monkeypatch):
    # as if the first copy had filled the GPU (the plan alone: the check's reference still sizes from real memory)
    monkeypatch.setattr(
        time_task, "plan_copies", lambda mode, wanted, per_copy, free: plan_copies(mode, wanted, per_copy, 0)
    )
    row = _time_row("stream")
    assert row["timing_mode"] == "cold" and row["l2_state"] == "cold"
    assert row["reason"].startswith("stream mode fell back to read-evict (cold): one copy of")
    assert row["gpu_mem_peak_bytes"] >= 4096 * 4096 * 2  # one copy of the weight
