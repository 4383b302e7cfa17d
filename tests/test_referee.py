"""The referee's host-side rules on the CPU (gemmbench.measure.referee; the GPU half: tests/test_gpu_referee.py): the
`impossible` bound, CUPTI's late kernels, the persisting-L2 guard, shared output memory, the replaced clock, the
fresh-inputs time, the in-place refill, the activations' block-scale layout, the `--inputs` values, and every exploit
plugin that a CPU can run caught through `gemmbench run`.  Expected values are worked by hand in each test."""

import math
import textwrap
import time

import pytest
import torch
from conftest import PLUGINS

from gemmbench.measure import clock, persisting_l2, referee
from gemmbench.measure.inputs import (
    VALUES,
    GemmInputs,
    act_block_scales,
    act_scale_padded,
    make_inputs,
    refill_activations_,
)
from gemmbench.measure.kernel_activity import ActivityError, KernelRecord, after_marker
from gemmbench.results.metrics import IMPOSSIBLE_MARGIN, WARM, impossible_reason
from gemmbench.shapes import Problem

# ---------------------------------------------------------------- impossible

# Llama3-70B's QKV at M 2048, bf16: 2 * 2048 * 10240 * 8192 FLOPs; bytes: A + B + C = (2048*8192 + 10240*8192 +
# 2048*10240) * 2
QKV_FLOPS = 2 * 2048 * 10240 * 8192  # 343.6 GFLOP
QKV_BYTES = (2048 * 8192 + 10240 * 8192 + 2048 * 10240) * 2  # 243.3 MB


def test_a_cached_output_is_impossible_and_the_reason_names_the_bound():
    # 343.6 GFLOP at 800 TFLOP/s is 429.5 µs; 243.3 MB at 4,000 GB/s is 60.8 µs: the compute bound, 429.5 µs
    why = impossible_reason(1.31, QKV_FLOPS, QKV_BYTES, 4000.0, 800.0, "cold")
    assert why is not None and "429.5 µs" in why and "TFLOP at the measured 800 TFLOP/s" in why
    assert f"{429.5 / 1.31:.1f}x under it" in why


def test_the_margin_is_the_line():
    bound = QKV_FLOPS / (800.0 * 1e6)  # µs
    assert impossible_reason(bound / IMPOSSIBLE_MARGIN * 1.001, QKV_FLOPS, QKV_BYTES, 4000.0, 800.0, "cold") is None
    assert impossible_reason(bound / IMPOSSIBLE_MARGIN * 0.999, QKV_FLOPS, QKV_BYTES, 4000.0, 800.0, "cold")


def test_the_dram_bound_applies_only_to_rows_read_from_dram():
    # a decode GEMM: M 16, N 10240, K 8192 bf16: bytes (16*8192 + 10240*8192 + 16*10240) * 2 = 168.3 MB at 4,000
    # GB/s is 42.1 µs; FLOPs 2.68 GFLOP at 800 TFLOP/s is 3.4 µs.  At 10 µs: impossible cold, fine warm (L2)
    flops, nbytes = 2 * 16 * 10240 * 8192, (16 * 8192 + 10240 * 8192 + 16 * 10240) * 2
    assert "MB at the measured 4,000 GB/s" in impossible_reason(10.0, flops, nbytes, 4000.0, 800.0, "cold")
    assert impossible_reason(10.0, flops, nbytes, 4000.0, 800.0, "streaming")
    assert impossible_reason(10.0, flops, nbytes, 4000.0, 800.0, WARM) is None
    assert impossible_reason(2.0, flops, nbytes, 4000.0, 800.0, WARM)  # 3.4 µs of FLOPs / 1.25 = 2.7 µs


def test_no_ceiling_no_verdict():
    assert impossible_reason(0.001, QKV_FLOPS, QKV_BYTES, None, None, "warm") is None  # the CPU path
    assert impossible_reason(float("nan"), QKV_FLOPS, QKV_BYTES, 4000.0, 800.0, "cold") is None


# ---------------------------------------------------------------- work outside the timed window (CUPTI's records)


def rec(name, start, duration):
    return KernelRecord(name, start, duration, 0)


def test_a_kernel_running_past_the_marker_is_late_and_a_joined_one_is_not():
    mark = "Memcpy HtoD (Pinned -> Device)"
    # the call's kernel 0-100 ns on the caller's stream, the marker at 100; a side kernel 10-500 overlaps it
    records = [rec("gemm", 0, 100), rec(mark, 100, 2), rec("side_gemm", 10, 490)]
    assert [r.name for r in after_marker(records)] == ["side_gemm"]
    # joined: the marker waits for the side kernel (starts at 500, as it ends)
    assert after_marker([rec("gemm", 0, 100), rec("side_gemm", 10, 490), rec(mark, 500, 2)]) == []
    # the call's own copies are not judged; the last marker is the one after the call
    assert (
        after_marker([rec(mark, 0, 50), rec("gemm", 60, 100), rec("Memset (Device)", 60, 200), rec(mark, 160, 2)]) == []
    )
    with pytest.raises(ActivityError):
        after_marker([rec("gemm", 0, 100)])


# ---------------------------------------------------------------- persisting L2


class FakeDriver:
    """The driver calls the guard makes, on a context whose set-aside and stream window the test sets."""

    def __init__(self, limit=0, window=0):
        self.limit, self.window, self.calls = limit, window, []

    def __call__(self, name, args):
        self.calls.append(name)
        if name == "cuCtxGetLimit":
            args[0]._obj.value = self.limit
        elif name == "cuCtxSetLimit":
            self.limit = args[1].value
        elif name == "cuStreamGetAttribute":
            args[2]._obj.window.num_bytes = self.window
        elif name == "cuStreamSetAttribute":
            self.window = args[2]._obj.window.num_bytes
        return 0


def test_the_guard_flags_what_a_launch_set_aside_then_clears_it():
    drv = FakeDriver(limit=37_748_736, window=128 << 20)  # 36 MiB set aside, a 128 MiB window
    guard = persisting_l2.Guard(drv, lambda: 1234)
    found = guard.after_batch()
    assert "36.0 MiB of L2 set aside" in found and "128.0 MiB on the timed stream" in found
    assert drv.limit == 0 and drv.window == 0 and "cuCtxResetPersistingL2Cache" in drv.calls
    assert guard.after_batch() is None  # cleared: the next variant starts from a plain L2


def test_nothing_set_is_no_flag():
    assert persisting_l2.what_was_set(0, 0) is None
    drv = FakeDriver()
    assert persisting_l2.Guard(drv, lambda: 0).after_batch() is None and "cuCtxSetLimit" not in drv.calls


# ---------------------------------------------------------------- shared memory, the clock, the fresh-inputs time


def inputs_of(a, b):
    return GemmInputs(a, b, torch.float16)


def test_an_output_that_views_an_input_or_another_copys_output_is_found():
    a, b = torch.ones(4, 8), torch.ones(6, 8)
    copies = [inputs_of(a, b), inputs_of(a.clone(), b.clone())]
    assert referee.shared_memory([torch.empty(4, 6), torch.empty(4, 6)], copies) is None
    assert "shares memory with copy 0's input a" in referee.shared_memory([a[:, :6]], copies)
    out = torch.empty(4, 6)
    assert referee.shared_memory([out, out[:2]], copies) == "copy 1's output shares memory with copy 0's output"


def test_a_replaced_clock_is_the_plugins_that_defines_it(tmp_path):
    plugin = tmp_path / "cheat.py"
    plugin.write_text("def fast(*a):\n    return 0.0\n")
    namespace: dict = {}
    exec(compile(plugin.read_text(), str(plugin), "exec"), namespace)
    replaced = {"torch.cuda.Event.elapsed_time": namespace["fast"]}
    assert "by " + str(plugin) in referee.clock_verdict(replaced, str(plugin)).reason
    assert referee.clock_verdict(replaced, "builtin") is None  # an honest variant beside it is not blamed
    assert referee.clock_verdict({"time.perf_counter": math.floor}, "builtin").status == "error"  # origin unknown
    assert referee.clock_verdict({}, str(plugin)) is None


def test_the_clock_sees_a_replacement(monkeypatch):
    assert clock.patched() == {}
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda s, e: 0.0)
    assert list(clock.patched()) == ["torch.cuda.Event.elapsed_time"]


def test_the_fresh_inputs_time():
    # samples' median 30 µs: a fresh call at 61 µs is over 2x and 31 µs above it; at 59 µs, under 2x
    assert referee.fresh_time_verdict([70.0, 61.0], 30.0).status == "wrong"
    assert referee.fresh_time_verdict([59.0, 300.0], 30.0) is None  # the faster of the two counts
    assert referee.fresh_time_verdict([9.0], 4.0) is None  # over 2x, but 5 µs: within FRESH_FLOOR_US


# ---------------------------------------------------------------- the refill and the block-scale layout


def problem(dtype="fp16", scaling="none", M=5, N=16, K=256):
    return Problem(shape_set="t", gemm="g", M=M, N=N, K=K, dtype=dtype, scaling=scaling)


@pytest.mark.parametrize("dtype,scaling", [("fp16", "none"), ("fp8", "tensor"), ("fp8", "row"), ("fp8", "block")])
def test_the_refill_writes_new_activations_at_the_same_addresses(dtype, scaling):
    p = problem(dtype, scaling)
    x = make_inputs(p, 1, "cpu")
    a_ptr, a0, b0 = x.a.data_ptr(), x.a.clone(), x.b.clone()
    s_ptr = x.a_scale.data_ptr() if x.a_scale is not None else None
    refill_activations_(x, 99)
    assert x.a.data_ptr() == a_ptr and not torch.equal(x.a.float(), a0.float()) and torch.equal(x.b.float(), b0.float())
    if s_ptr is not None:
        assert x.a_scale.data_ptr() == s_ptr
    # the same values a fresh draw of seed 99 makes
    y = make_inputs(p, 99, "cpu")
    assert torch.equal(x.a.float(), y.a.float())
    if x.a_scale is not None:
        assert torch.equal(x.a_scale, y.a_scale)


def test_activation_block_scales_are_column_major_over_m_padded_to_4():
    s = act_block_scales(5, 3, "cpu")  # M 5 -> 8 rows of 3 columns, column-major: strides (1, 8)
    assert s.shape == (5, 3) and s.stride() == (1, 8)
    s.fill_(2.0)
    padded = act_scale_padded(s)
    assert padded.shape == (8, 3) and torch.equal(padded[5:], torch.ones(3, 3)) and torch.equal(padded[:5], s)
    x = make_inputs(problem("fp8", "block", M=5), 1, "cpu")
    assert x.a_scale.stride() == (1, 8)


def test_input_values_have_mean_one_over_sqrt_k():
    # randn + 1 and U(0, 2) have mean 1; ones is 1: each / sqrt(K) = 1/16 at K 256, over 4096 x 256 values
    for values in VALUES:
        x = make_inputs(problem(M=4096), 3, "cpu", values=values)
        assert float(x.a.float().mean()) == pytest.approx(1 / 16, rel=0.02), values
    ones = make_inputs(problem(), 3, "cpu", values="ones")
    assert bool((ones.a == torch.tensor(1 / 16, dtype=torch.float16)).all())
    uniform = make_inputs(problem(M=4096), 3, "cpu", values="uniform").a.float()
    assert float(uniform.min()) >= 0 and float(uniform.max()) <= 2 / 16
    with pytest.raises(ValueError, match="unknown input values"):
        make_inputs(problem(), 3, "cpu", values="zeros")


def test_the_cli_lists_the_factorys_values():
    from gemmbench.cli.formats import InputValues

    assert tuple(v.value for v in InputValues) == VALUES


# ---------------------------------------------------------------- the exploits, through `gemmbench run` on the CPU

EXPLOITS = PLUGINS / "exploits"
# caught on the CPU path by the outputs of a timed call on fresh inputs (wrong) or the clock (error); the side stream
# and persisting L2 need a GPU (skipped here); the cache by fingerprint misses on fresh values and is caught by its
# time, which only a GPU measures well enough (tests/test_gpu_referee.py)
ON_A_CPU = {"cached_output": "wrong", "cache_by_address": "wrong", "stale_output": "wrong", "stale_partial": "wrong",
            "precomputed_in_make": "wrong", "shared_output": "wrong", "uninitialised_output": "wrong",
            "timer_patch": "error", "side_stream": "skipped", "persisting_l2": "skipped"}  # fmt: skip


def test_every_exploit_a_cpu_can_run_is_caught(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    # the sweep loads the plugins in this process too (to list their variants): the timer patch's import replaces
    # these here as well, and must not outlive the test (the clock's tests in this process would see it)
    monkeypatch.setattr(time, "perf_counter", time.perf_counter)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time)

    from gemmbench.cli import app
    from gemmbench.results import store

    (tmp_path / "one.yaml").write_text(textwrap.dedent("""\
        name: one
        description: one small GEMM
        m: [8]
        gemms:
          - {id: g, N: 32, K: 64, parallel: none}
        """))  # fmt: skip
    out = tmp_path / "r.parquet"
    res = CliRunner().invoke(app, ["run", "--shapes", str(tmp_path / "one.yaml"), "--dtype", "fp16", "--plugin",
                                   str(EXPLOITS), "--variants", "exploit_*,cublas_fp16", "--out", str(out), "--strict"])  # fmt: skip
    assert res.exit_code == 1, res.output  # --strict: wrong and failed cells
    rows = {r["variant"]: r for r in store.records(store.load([out]))}
    assert rows["cublas_fp16"]["status"] == "ok" and rows["cublas_fp16"]["inputs"] == "randn"
    got = {name: rows[f"exploit_{name}"]["status"] for name in ON_A_CPU}
    assert got == ON_A_CPU
    assert "a timed call's output" in rows["exploit_cached_output"]["reason"]
    assert "timer_patch.py" in rows["exploit_timer_patch"]["reason"]
    assert set(ON_A_CPU) | {"cache_by_fingerprint"} == {p.stem for p in EXPLOITS.glob("*.py")}
