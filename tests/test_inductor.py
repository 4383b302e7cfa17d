"""inductor_mm on the CPU: its registration, the skip without a GPU, and its compile path with Inductor replaced by a
counting backend (Inductor on a CPU would build C++ for seconds a shape): the compile happens in make(), its time is
in the row's config, and no compile ever happens in a timed call.  Its GPU check is in tests/test_gpu.py."""

from __future__ import annotations

import time

import pytest
import torch

from gemmbench import registry
from gemmbench.kernels import inductor
from gemmbench.measure.check import check_cell
from gemmbench.measure.device import DeviceInfo
from gemmbench.measure.inputs import make_inputs
from gemmbench.measure.timing import Timer
from gemmbench.shapes import Problem

COMPILE_S = 0.2  # what the counting backend sleeps: a compile the config must show, and no sample may contain
P16 = Problem("t", "g", 16, 32, 64, "fp16")


@pytest.fixture
def backend(monkeypatch):
    """Dynamo for real (its guards, its cache, set_stance), with a backend that counts compiles and sleeps."""
    import torch._dynamo

    seen: dict = {"compiles": 0, "kwargs": [], "fail": None, "sleep": COMPILE_S}

    def counting(gm, example_inputs, **kwargs):
        seen["compiles"] += 1
        seen["kwargs"].append(kwargs)
        if seen["fail"]:
            raise seen["fail"]
        time.sleep(seen["sleep"])
        return gm.forward

    torch._dynamo.reset()
    monkeypatch.setattr(inductor, "BACKEND", counting)
    monkeypatch.setattr(inductor, "_COMPILED", {})
    yield seen
    torch._dynamo.reset()


def test_registered_beside_the_baselines_not_as_one():
    v = registry.get("inductor_mm")
    assert (v.family, v.dtypes, v.scalings, v.moe) == ("inductor", ("bf16", "fp16", "fp8"), ("tensor", "row"), False)
    assert v.baseline == () and registry.baseline_for("bf16", False) == "cublas_bf16"


@pytest.mark.parametrize("dtype,scaling", [("fp16", "none"), ("bf16", "none"), ("fp8", "tensor"), ("fp8", "row")])
def test_skipped_on_a_cpu_with_the_reason(dtype, scaling):
    reason = registry.get("inductor_mm").unsupported_reason(
        P16.with_(dtype=dtype, scaling=scaling), DeviceInfo("cpu", "x86_64")
    )
    assert reason == "torch.compile's GPU matmul needs a CUDA GPU (on a CPU Inductor builds a C++ matmul instead)"


def test_block_scales_are_not_declared():
    reason = registry.get("inductor_mm").unsupported_reason(
        P16.with_(dtype="fp8", scaling="block"), DeviceInfo("cpu", "x")
    )
    assert reason == "inductor_mm declares no block support: runs tensor, row"


@pytest.mark.parametrize("dtype,scaling", [("fp16", "none"), ("fp8", "tensor"), ("fp8", "row")])
def test_compiles_in_make_records_the_time_and_never_compiles_when_timed(backend, dtype, scaling):
    v = registry.get("inductor_mm")
    p = P16.with_(dtype=dtype, scaling=scaling)
    checked = check_cell(p, v, make_inputs(p, 1, "cpu"))  # the run's check: make, one launch, the fp32 reference
    assert checked.result.ok, checked.result.detail
    assert backend["compiles"] == 1 and backend["kwargs"] == [{"mode": "max-autotune-no-cudagraphs"}]
    config = checked.launch.config
    assert set(config) == {"mode", "dynamic", "compile_s"}
    assert config["mode"] == "max-autotune-no-cudagraphs" and config["dynamic"] is False
    assert config["compile_s"] >= COMPILE_S  # the first call, in make(), held the whole compile
    # the timing's own make() per input copy, then every sample: the compiled graph, never a compile
    launches = [v.make(p, make_inputs(p, seed, "cpu")) for seed in (2, 3)]
    Timer("wall", budget_s=0.01).measure([x.fn for x in launches])
    assert backend["compiles"] == 1
    assert all(x.config["compile_s"] == config["compile_s"] for x in launches)  # the one compile of this shape


def test_each_shape_compiles_once(backend):
    backend["sleep"] = 0
    v = registry.get("inductor_mm")
    for M in (16, 17, 16, 33, 17):
        p = P16.with_(M=M)
        v.make(p, make_inputs(p, 1, "cpu"))
    assert backend["compiles"] == 3  # M 16, 17 and 33: dynamic=False, each shape its own graph


def test_more_shapes_than_dynamos_recompile_limit(backend):
    """Past torch._dynamo.config.recompile_limit (8) shapes of one function, fullgraph=True would make the next one
    an error: the limit makes room for every shape this process compiles."""
    backend["sleep"] = 0
    v = registry.get("inductor_mm")
    limit = torch._dynamo.config.recompile_limit
    for M in range(1, limit + 3):
        p = P16.with_(M=M)
        v.make(p, make_inputs(p, 1, "cpu"))
    assert backend["compiles"] == limit + 2 and torch._dynamo.config.recompile_limit == limit  # patched, restored


def test_inputs_the_compiled_graph_does_not_serve_raise_in_make(backend):
    v = registry.get("inductor_mm")
    v.make(P16, make_inputs(P16, 1, "cpu"))
    other = make_inputs(P16.with_(M=8), 1, "cpu")  # 8 rows where the compiled graph of this problem has 16
    with pytest.raises(RuntimeError, match="fail_on_recompile"):
        v.make(P16, other)
    assert backend["compiles"] == 1


def test_a_failed_compile_is_one_line_naming_the_cause(backend):
    backend["fail"] = RuntimeError("no valid choice\nsecond line")
    with pytest.raises(inductor.CompileError) as err:
        registry.get("inductor_mm").make(P16, make_inputs(P16, 1, "cpu"))
    assert str(err.value) == "torch.compile(mode='max-autotune-no-cudagraphs') failed: RuntimeError: no valid choice"
