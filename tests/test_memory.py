"""Inputs, reference and timing that fit in memory, on the CPU with tiny shapes: the chunked draw
(its order, distribution and fp8 scales), the fp32 reference under a forced tiny memory budget (N slices, one expert
at a time, only the experts hit, no work for a slot of another rank), and stream mode's copies sized from free
memory with its fallback to cold timing, through the worker's time task."""

from __future__ import annotations

import math
import weakref
from dataclasses import asdict

import pytest
import torch
from conftest import TIMESTAMP, TaskContext

from gemmbench import dtypes
from gemmbench.engine.tasks import time_task
from gemmbench.measure import check, inputs, memory
from gemmbench.measure.check import reference
from gemmbench.measure.inputs import GemmInputs, draw, make_inputs, quantize_fp8
from gemmbench.measure.timing import COPY_HEADROOM_BYTES, STREAM_MIN_BYTES, CopyPlan, Prepared, Timer, plan_copies
from gemmbench.results.store import normalize_row
from gemmbench.shapes import Problem

GiB = 1 << 30


def dense(M=5, N=20, K=32, dtype="fp16"):
    return Problem("test", "g", M, N, K, dtype)


def moe(M=5, N=16, K=32, E=6, topk=2, dtype="fp16"):
    return Problem("test", "experts", M, N, K, dtype, E=E, topk=topk)


def _by_hand(shape, K, seed, rows_per_chunk=None):
    """The values draw() documents, drawn here chunk by chunk from a generator of the seed: an (E, N, K) weight one
    (N, K) expert after another; an (R, K) operand in slices of rows_per_chunk rows."""
    g = torch.Generator().manual_seed(seed)

    def values(s):
        return (torch.randn(s, generator=g) + 1.0) / math.sqrt(K)

    if len(shape) == 3:
        return torch.stack([values(shape[1:]) for _ in range(shape[0])])
    rows = shape[0]
    step = rows_per_chunk or rows
    return torch.cat([values((min(step, rows - r), K)) for r in range(0, rows, step)])


@pytest.fixture
def ten_row_chunks(monkeypatch):
    """Dense operands with K = 32 drawn in slices of 10 rows: 10 rows x 32 x 4 bytes of fp32 per chunk."""
    monkeypatch.setattr(inputs, "DRAW_CHUNK_BYTES", 10 * 32 * 4)
    return 10


# ---------------------------------------------------------------- the chunked draw


def test_chunks_cover_the_operand_in_order(ten_row_chunks):
    # 25 rows in slices of 10: 10 + 10 + 5; an (E, N, K) weight: one chunk per expert
    assert inputs._chunks((25, 32)) == [(slice(0, 10), (10, 32)), (slice(10, 20), (10, 32)), (slice(20, 25), (5, 32))]
    assert inputs._chunks((3, 7, 32)) == [(0, (7, 32)), (1, (7, 32)), (2, (7, 32))]
    # a row wider than the chunk budget is still one row per chunk (never zero)
    assert inputs._chunks((2, 4096)) == [(slice(0, 1), (1, 4096)), (slice(1, 2), (1, 4096))]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(96, 32), (4, 24, 32)], ids=["dense-10-slices", "moe-4-experts"])
def test_the_chunked_draw_is_the_documented_sequence(ten_row_chunks, dtype, shape):
    dt = dtypes.get(dtype)
    x, scale = draw(shape, 32, torch.Generator().manual_seed(3), "cpu", dt, "tensor")
    assert x.shape == shape and x.dtype == dt.torch and scale is None
    assert torch.equal(x, _by_hand(shape, 32, 3, ten_row_chunks).to(dt.torch))


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize("shape", [(96, 32), (4, 24, 32)], ids=["dense-10-slices", "moe-4-experts"])
def test_the_chunked_draw_has_the_documented_distribution(ten_row_chunks, dtype, shape):
    """(randn + 1) / sqrt(K): mean and standard deviation both 1/sqrt(K) = 0.177 at K = 32.  Over n = 3072 values
    the sample mean's standard error is 0.177 / sqrt(3072) = 1.8% of the mean, so a 10% bound is 5.5 standard errors
    wide; a draw without the +1 (mean 0), without the 1/sqrt(K) (mean 1) or with 1/K (mean 0.031) is far outside.
    fp8 adds at most 2^-4 relative rounding (e4m3's 3 mantissa bits), inside the bound."""
    K = 32
    dt = dtypes.get(dtype)
    scaling = "expert" if len(shape) == 3 else "tensor"
    x, scale = draw(shape, K, torch.Generator().manual_seed(5), "cpu", dt, scaling)
    assert x.shape == shape and x.dtype == dt.torch
    v = x.float() * (scale.view(-1, 1, 1) if scaling == "expert" else scale) if dt.scaled else x.float()
    want = 1 / math.sqrt(K)
    assert abs(float(v.mean()) - want) < 0.1 * want
    assert abs(float(v.std()) - want) < 0.1 * want
    # every chunk its own values: a generator reseeded per chunk would repeat the first chunk
    first, second = (v[0], v[1]) if len(shape) == 3 else (v[:10], v[10:20])
    assert not torch.equal(first, second)


@pytest.mark.parametrize(
    "shape,scaling",
    [((96, 32), "tensor"), ((96, 32), "row"), ((4, 24, 32), "expert"), ((4, 24, 32), "tensor")],
)
def test_fp8_chunkwise_scales_equal_the_whole_operands(ten_row_chunks, shape, scaling):
    """The chunked quantisation (the per-tensor amax found by a first pass over every chunk, the generator rewound)
    gives the very scales and bytes quantize_fp8 gives the whole operand of the same values."""
    q, scale = draw(shape, 32, torch.Generator().manual_seed(7), "cpu", dtypes.FP8, scaling)
    whole_q, whole_scale = quantize_fp8(_by_hand(shape, 32, 7, ten_row_chunks), scaling)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert scale.shape == whole_scale.shape and torch.equal(scale, whole_scale)
    assert torch.equal(q.view(torch.uint8), whole_q.view(torch.uint8))
    # a per-tensor scale comes from the whole operand, not from the last chunk drawn
    if scaling == "tensor" and len(shape) == 2:
        last = quantize_fp8(_by_hand(shape, 32, 7, ten_row_chunks)[90:], "tensor")[1]
        assert not torch.equal(scale, last)


def test_make_inputs_draws_a_then_b_chunk_by_chunk(ten_row_chunks):
    """make_inputs is draw() twice from one generator: a (M, K), then b, each in 10-row slices here."""
    M, N, K = 23, 40, 32
    x = make_inputs(dense(M, N, K, "fp16"), 9, "cpu")
    g = torch.Generator().manual_seed(9)

    def slices(rows):  # by hand: 10 rows at a time from g, the last slice what is left
        return torch.cat([(torch.randn((min(10, rows - r), K), generator=g) + 1.0) / math.sqrt(K)
                          for r in range(0, rows, 10)])  # fmt: skip

    a_by_hand = slices(M)  # 10 + 10 + 3 rows
    b_by_hand = slices(N)  # then 4 x 10 rows, from the same generator
    assert torch.equal(x.a, a_by_hand.half()) and torch.equal(x.b, b_by_hand.half())


@pytest.mark.parametrize("dtype,scaling", [("fp16", "tensor"), ("fp8", "tensor"), ("fp8", "row")])
def test_the_draw_holds_one_fp32_chunk_at_a_time(monkeypatch, ten_row_chunks, dtype, scaling):
    """Each chunk's fp32 values are gone before the next chunk is drawn (peak extra memory: one chunk in fp32)."""
    made, real = [], inputs._values

    def values(shape, K, gen, dev, kind="randn"):
        assert all(ref() is None for ref in made), "an earlier fp32 chunk is still alive"
        x = real(shape, K, gen, dev, kind)
        made.append(weakref.ref(x))
        return x

    monkeypatch.setattr(inputs, "_values", values)
    make_inputs(dense(M=15, N=45, K=32, dtype=dtype), 1, "cpu", scaling=scaling)
    # a: 2 slices, b: 5 slices; the per-tensor scaling draws each operand twice (the amax pass, then the values)
    assert len(made) == (14 if (dtype, scaling) == ("fp8", "tensor") else 7)


# ---------------------------------------------------------------- the reference that fits


@pytest.fixture
def record_dequant(monkeypatch):
    """GemmInputs.weight_fp32 instrumented: each call's (expert, rows) in order, and a failure when an earlier fp32
    copy is still alive at the next call (more than one expert, or slice, at a time)."""
    calls, alive, real = [], [], GemmInputs.weight_fp32

    def weight_fp32(self, expert=None, rows=slice(None)):
        assert all(ref() is None for ref in alive), "two fp32 weight copies at once"
        w = real(self, expert, rows)
        calls.append((expert, (rows.start, rows.stop)))
        alive.append(weakref.ref(w))
        return w

    monkeypatch.setattr(GemmInputs, "weight_fp32", weight_fp32)
    return calls


def _budget(monkeypatch, nbytes):
    monkeypatch.setattr(memory, "free_bytes", lambda dev: nbytes)


def _plain(inputs):
    """The whole computation in float64 on the whole dequantised operands, scales applied by hand."""
    a = inputs.a.double() * (inputs.a_scale.double() if inputs.a_scale is not None else 1.0)
    b = inputs.b.double()
    if inputs.b_scale is not None:
        b = b * (inputs.b_scale.double().view(-1, 1, 1) if b.dim() == 3 else inputs.b_scale.double())
    return a, b


@pytest.mark.parametrize("dtype,scaling", [("fp16", "tensor"), ("fp8", "tensor"), ("fp8", "row")])
def test_dense_reference_in_n_slices_equals_the_plain_product(monkeypatch, record_dequant, dtype, scaling):
    M, N, K = 5, 20, 32
    p = dense(M, N, K, dtype)
    x = make_inputs(p, 2, "cpu", scaling=scaling)
    # half of the budget over 4 bytes x (K + M) per weight row: 3 rows per slice -> 20 rows in 7 slices
    _budget(monkeypatch, 2 * 4 * (K + M) * 3)
    ref = reference(p, x)
    assert record_dequant == [(None, (r, min(r + 3, 20))) for r in range(0, 20, 3)]
    a, b = _plain(x)
    assert ref.dtype == torch.float32 and ref.shape == (M, N)
    torch.testing.assert_close(ref.double(), a @ b.t(), rtol=1e-6, atol=1e-6)


def test_dense_reference_is_one_slice_when_the_weight_fits(record_dequant):
    p = dense()
    reference(p, make_inputs(p, 2, "cpu"))  # the CPU budget (1 GiB) holds a 20 x 32 weight many times over
    assert record_dequant == [(None, (0, 20))]


# slot -> expert, by hand: experts 0, 2 and 5 of 6 are hit; 1, 3 and 4 are not
IDS = [[0, 2], [2, 5], [0, 5], [2, 0], [5, 2]]


def _routed(p, ids, seed=4, scaling="tensor"):
    x = make_inputs(p, seed, "cpu", scaling=scaling)
    x.topk_ids = torch.tensor(ids, dtype=torch.int32)
    return x


def _loop_by_hand(x, topk):
    """Row t * topk + s is token t times its s-th expert's weight, float64; a slot of another rank (-1) stays 0."""
    a, b = _plain(x)
    rows = []
    for t, experts in enumerate(x.topk_ids.tolist()):
        for e in experts:
            rows.append(a[t] @ b[e].t() if e >= 0 else torch.zeros(b.shape[1], dtype=torch.float64))
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_moe_reference_dequantises_only_the_experts_hit_one_at_a_time(record_dequant, dtype):
    p = moe(dtype=dtype)
    x = _routed(p, IDS)
    ref = reference(p, x)
    assert record_dequant == [(0, (0, 16)), (2, (0, 16)), (5, (0, 16))]  # one whole expert each, ascending
    torch.testing.assert_close(ref.double(), _loop_by_hand(x, 2), rtol=1e-6, atol=1e-6)


def test_moe_reference_in_n_slices_per_expert(monkeypatch, record_dequant):
    p = moe(M=5, N=16, K=32)
    x = _routed(p, IDS)
    # slices of half the budget over 4 bytes x (K + the expert's slots): experts 0 and 5 have 3 slots, expert 2 has
    # 4 (IDS), so 740 // (4 x 35) = 5 and 740 // (4 x 36) = 5 rows per slice
    _budget(monkeypatch, 2 * 740)
    ref = reference(p, x)
    slices = [(e, (r, min(r + 5, 16))) for e in (0, 2, 5) for r in range(0, 16, 5)]
    assert record_dequant == slices  # 4 slices (5, 5, 5, 1 rows) per expert hit, one expert after another
    torch.testing.assert_close(ref.double(), _loop_by_hand(x, 2), rtol=1e-6, atol=1e-6)


def test_slots_of_another_rank_are_not_computed(monkeypatch, record_dequant):
    """EP convention: id -1 is a slot routed to another rank's expert: no rows computed for it, its output row 0."""
    p = moe()
    ids = [[0, -1], [-1, 3], [3, 0], [-1, -1], [0, 3]]
    x = _routed(p, ids)
    rows_computed, real = [], check._product

    def product(a, inp, expert):
        rows_computed.append((expert, a.shape[0]))
        return real(a, inp, expert)

    monkeypatch.setattr(check, "_product", product)
    ref = reference(p, x)
    # by hand: expert 0 has slots 0, 5, 8 (3 rows), expert 3 slots 3, 4, 9 (3 rows): 6 of the 10 slots
    assert rows_computed == [(0, 3), (3, 3)]
    assert [e for e, _ in record_dequant] == [0, 3]
    off_rank = [1, 2, 6, 7]  # slots (0, 1), (1, 0), (3, 0), (3, 1)
    assert (ref[off_rank] == 0).all()
    assert (ref[[0, 3, 4, 5, 8, 9]].abs() > 0).all()
    torch.testing.assert_close(ref.double(), _loop_by_hand(x, 2), rtol=1e-6, atol=1e-6)


def test_every_slot_on_another_rank_is_no_work_at_all(record_dequant):
    p = moe(M=2, topk=2)
    x = _routed(p, [[-1, -1], [-1, -1]])
    ref = reference(p, x)
    assert record_dequant == [] and ref.shape == (4, 16) and (ref == 0).all()
    assert x.hit_experts() == [] and x.experts_hit() == 0


def test_dequantized_still_gives_the_whole_operands_for_small_problems():
    x = make_inputs(moe(dtype="fp8"), 3, "cpu")
    a, b = x.dequantized()
    want_a, want_b = _plain(x)
    assert a.dtype == b.dtype == torch.float32 and b.shape == (6, 16, 32)
    torch.testing.assert_close(a.double(), want_a)
    torch.testing.assert_close(b.double(), want_b)


# ---------------------------------------------------------------- stream mode's copies


def test_plan_copies_outside_stream_mode_is_one_copy():
    for mode in ("cold", "graph", "wall"):
        assert plan_copies(mode, 1, 15 * GiB, 0) == CopyPlan(1, mode)


def test_plan_copies_takes_what_is_wanted_when_it_fits():
    # 4 copies of 200 MiB wanted, 3 more beside the first need 600 MiB over the headroom: 1 GiB is plenty
    assert plan_copies("stream", 4, 200 << 20, COPY_HEADROOM_BYTES + GiB) == CopyPlan(4, "stream")
    # DeepSeek-V3's w13 in bf16 (14 GiB, 2 copies for >= 512 MiB): a second copy fits in 20 GiB beside the first
    assert plan_copies("stream", 2, 14 * GiB, COPY_HEADROOM_BYTES + 20 * GiB) == CopyPlan(2, "stream")


def test_plan_copies_takes_fewer_copies_and_says_so():
    # 6 wanted, room for 2 more of 100 MiB beside the first: 3 copies, the row says how many and why
    plan = plan_copies("stream", 6, 100 << 20, COPY_HEADROOM_BYTES + (250 << 20))
    assert plan.copies == 3 and plan.mode == "stream"
    assert plan.note == "stream mode over 3 copies of 0.1 GiB, the most that fit (6 wanted for 0.5 GiB in all)"
    assert STREAM_MIN_BYTES == 512 << 20  # the "0.5 GiB in all"


@pytest.mark.parametrize("free", [0, COPY_HEADROOM_BYTES, COPY_HEADROOM_BYTES + 10 * GiB])
def test_plan_copies_falls_back_to_cold_when_two_do_not_fit(free):
    plan = plan_copies("stream", 2, 15 * GiB, free)
    assert plan.copies == 1 and plan.mode == "cold"
    assert plan.note == (
        f"stream mode fell back to read-evict (cold): one copy of 15.0 GiB fits ({free / GiB:.1f} GiB free beside it, "
        "two needed)"
    )


class StreamOnCpu(Timer):
    """A stream-mode Timer for the CPU: the copy plan and the rows as on a GPU, each launch's samples 1 µs (no graph
    is captured; nothing here is a measurement).  `prepared` records (mode, copies) per variant prepared."""

    def __init__(self):
        super().__init__("wall", warmup_ms=0, min_samples=2, batch=2, warmup_calls=1)
        self.mode = "stream"
        self.prepared: list = []

    def prepare(self, fns, graph_safe=True, cell=None):
        self.prepared.append((self.mode, len(fns)))
        return Prepared(take=lambda n: [1.0] * n, keep=list(fns), cell=cell)


def _time(monkeypatch, free, peaks=None):
    """time_task.work on cublas_fp16 at 4 x 32 x 16 with `free` bytes free; returns (its row, the timer, draws)."""
    draws, real = [], time_task.make_inputs

    def make(problem, seed, dev, scaling="tensor", values="randn"):
        draws.append(seed)
        return real(problem, seed, dev, scaling=scaling, values=values)

    monkeypatch.setattr(time_task, "make_inputs", make)
    monkeypatch.setattr(memory, "free_bytes", lambda dev: free)
    if peaks is not None:  # a GPU's peak counter, replayed: each read returns the next value
        monkeypatch.setattr(memory, "peak_bytes", lambda dev: peaks.pop(0))
    ctx = TaskContext("stream", "cpu", StreamOnCpu())
    p = Problem("test", "g", 4, 32, 16, "fp16")
    time_task.work(ctx, {"task": "time", "items": ["cublas_fp16"], "problem": asdict(p), "seed": 100})
    [row] = ctx.rows["cublas_fp16"]
    normalize_row(dict(row, run_id="r", process=0, timestamp=TIMESTAMP))  # the run schema takes it, with the sink's
    return row, ctx.timer, draws


# a copy of cublas_fp16 at M 4, N 32, K 16: a 4*16*2 = 128 B, b 32*16*2 = 1024 B, its output 4*32*2 = 256 B
PER_COPY = 128 + 1024 + 256


def test_stream_mode_falls_back_to_cold_when_one_copy_fits(monkeypatch):
    row, timer, draws = _time(monkeypatch, free=0)
    assert row["status"] == "ok" and row["timing_mode"] == "cold" and row["l2_state"] == "cold"
    assert row["reason"].startswith("stream mode fell back to read-evict (cold): one copy of 0.0 GiB fits")
    assert timer.prepared == [("cold", 1)]
    assert draws == [100, 101]  # the check's inputs, then the one copy timed (seed + 1)
    assert row["gpu_mem_peak_bytes"] is None  # a CPU records no peak


def test_stream_mode_times_the_copies_that_fit_and_says_so(monkeypatch):
    # room for exactly 2 more copies beside the first, of the 1024 the 0.5 GiB floor wants (at most 1024)
    row, timer, draws = _time(monkeypatch, free=COPY_HEADROOM_BYTES + 2 * PER_COPY)
    assert row["status"] == "ok" and row["timing_mode"] == "stream" and row["l2_state"] == "streaming"
    assert row["reason"].startswith("stream mode over 3 copies of 0.0 GiB, the most that fit (1024 wanted")
    assert timer.prepared == [("stream", 3)]
    assert draws == [100, 101, 102, 103]


def test_a_rows_peak_is_the_most_of_its_check_and_its_timing(monkeypatch):
    # peak_bytes is read after the check (3 GiB) and after the timing's set-up (5 GiB): the row keeps 5 GiB
    row, _, _ = _time(monkeypatch, free=0, peaks=[3 * GiB, 5 * GiB])
    assert row["gpu_mem_peak_bytes"] == 5 * GiB


def test_the_peak_counter_is_none_on_a_cpu_and_the_budget_fixed():
    assert memory.peak_bytes("cpu") is None and memory.free_bytes("cpu") == memory.CPU_BUDGET_BYTES
    memory.reset_peak("cpu")  # nothing to reset, and no error


def test_out_nbytes_counts_each_slot_of_an_moe_output():
    x = make_inputs(moe(M=5, N=16, K=32, E=6, topk=2), 1, "cpu")
    assert x.out_nbytes() == 5 * 2 * 16 * 2  # (M * topk, N) fp16
    y = make_inputs(dense(M=5, N=20, K=32, dtype="fp8"), 1, "cpu")
    assert y.out_nbytes() == 5 * 20 * 2  # fp8 GEMMs write bf16
