"""GPU tests (marker `gpu`; skipped without CUDA): bf16 and fp8 paths the CPU interpreter cannot run,
every timing mode, and crash isolation with a kernel that really faults.  No timing is asserted."""

import subprocess
import sys

import pytest
import torch
from conftest import PLUGINS
from test_moe import FUSED

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1280, 8192), (16, 8192, 1024), (33, 100, 72), (64, 80, 48), (200, 384, 256)]


def _check(name, M, N, K, dtype, seed=1):
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get(name)
    # fp8 at the variant's own scaling (the _rowwise variants run row only); 16-bit dtypes carry none
    p = Problem("test", "g", M, N, K, dtype, scaling=v.scalings[0] if dtype == "fp8" else "none")
    reason = v.unsupported_reason(p, detect())
    if reason:
        return reason
    result = check_cell(p, v, make_inputs(p, seed, "cuda")).result
    assert result.ok, f"{name} {dtype} {M}x{N}x{K}: {result.detail}"
    return None


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp16"])
@pytest.mark.parametrize("schedule", ["row", "col", "grouped"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_triton_dp_on_gpu(schedule, dtype, M, N, K):
    assert _check(f"triton_dp_{schedule}", M, N, K, dtype) is None


SPLITK = ["triton_splitk_atomic", "triton_splitk_reduce"]


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp16"])
@pytest.mark.parametrize("name", SPLITK)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_triton_splitk_on_gpu(name, dtype, M, N, K):
    """Through make(): the stored or tuned config of each shape (SPLIT_K > 1 on the skinny ones)."""
    assert _check(name, M, N, K, dtype) is None


@pytest.mark.parametrize("name", [n + "_rowwise" for n in SPLITK])
@pytest.mark.parametrize("M,N,K", [(16, 1280, 8192), (33, 100, 72)])
def test_triton_splitk_rowwise_on_gpu(name, M, N, K):
    assert _check(name, M, N, K, "fp8") is None


def _splitk_outputs(name, dtype, split_k, calls=3):
    from gemmbench import registry
    from gemmbench.kernels.splitk import SplitKConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "g", 16, 1280, 8192, dtype)
    inputs = make_inputs(p, 5, "cuda")
    bk = 256 if dtype == "fp8" else 128
    launch = registry.get(name).tunable.build(p, inputs, SplitKConfig.tile(16, 64, bk, 4, 4, SPLIT_K=split_k))
    ref = reference(p, inputs)
    outs = []
    for _ in range(calls):
        checked = check_cell(p, None, inputs, launch=launch, ref=ref)
        outs.append(checked.out.clone())
        assert checked.result.ok, f"call {len(outs)}"
    return outs


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_splitk_reduce_is_bitwise_identical_over_runs(dtype):
    outs = _splitk_outputs("triton_splitk_reduce", dtype, split_k=16)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_splitk_atomic_within_tolerance_over_runs(dtype):
    _splitk_outputs("triton_splitk_atomic", dtype, split_k=16, calls=30)  # each call checked inside: a race shows


TMA_KERNELS = [
    (name, split_k, dtype)
    for name, split_k in (("triton_splitk_atomic", 4), ("triton_splitk_reduce", 4), ("triton_dp_row", 1))
    for dtype in ("bf16", "fp8", "fp16")
] + [("triton_splitk_atomic_rowwise", 3, "fp8")]


@pytest.mark.parametrize("name,split_k,dtype", TMA_KERNELS)
@pytest.mark.parametrize("M,N,K", [(1, 1280, 8192), (33, 100, 208), (64, 80, 48), (200, 384, 256)])
def test_tma_descriptors_on_gpu(name, split_k, dtype, M, N, K):
    """The copy-engine K loop (TMA): its zero fill past M, N and K replaces the masks."""
    from gemmbench import registry
    from gemmbench.kernels.dense_dp import DenseConfig
    from gemmbench.kernels.splitk import SplitKConfig
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    v = registry.get(name)
    p = Problem("test", "g", M, N, K, dtype)
    inputs = make_inputs(p, 2, "cuda", scaling=v.fp8_scaling)
    bk = 128 if dtype == "fp8" else 64
    tile = (16 if M <= 16 else 64, 64, bk, 4, 4)
    if v.family == "triton_dp":
        config = DenseConfig.tile(*tile, TMA=True)
    else:
        config = SplitKConfig.tile(*tile, SPLIT_K=split_k, TMA=True)
    launch = v.tunable.build(p, inputs, config)
    assert launch.config["TMA"], "the copy engine path was not taken"
    ref = reference(p, inputs)
    for call in range(3):  # the buffers the last split clears are right for the next call too
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"


MOE_CASES = [  # (tokens, N, K, E, topk, routing): Mixtral 8x7B w13 and w2 at TP=2, and small edge cases
    (1, 14336, 4096, 8, 2, "uniform"),
    (64, 4096, 7168, 8, 2, "skewed"),
    (33, 100, 72, 3, 2, "one-expert"),
    (300, 256, 128, 5, 2, "uniform"),
    (1024, 512, 256, 8, 2, "skewed"),
]
MOE_VARIANTS = [
    (n, d)
    for n in FUSED  # every MoE Triton form (test_moe.py runs them on the CPU)
    for d in ("bf16", "fp16", "fp8")
]
MOE_VARIANTS += [("torch_grouped_mm", "bf16"), ("torch_grouped_mm", "fp16"), ("torch_moe_loop", "bf16")]


@pytest.mark.parametrize("name,dtype", MOE_VARIANTS)
@pytest.mark.parametrize("M,N,K,E,topk,routing", MOE_CASES)
def test_moe_on_gpu(name, dtype, M, N, K, E, topk, routing):
    """Against the per-expert loop reference; a variant this torch cannot run says why (never silently)."""
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "moe", M, N, K, dtype, E=E, topk=topk, routing=routing)
    v = registry.get(name)
    reason = v.unsupported_reason(p, detect())
    if reason:  # torch without _grouped_mm; TMA's rows: fp8 K 72 is 72 bytes, not a multiple of 16
        tma = name == "triton_moe_permuted" and dtype == "fp8" and K == 72 and "16-byte" in reason
        assert tma or (name == "torch_grouped_mm" and "torch._grouped_mm" in reason), reason
        return
    result = check_cell(p, v, make_inputs(p, 3, "cuda")).result
    assert result.ok, f"{name} {dtype} {p.label}: {result.detail}"


@pytest.mark.parametrize("M,E,routing", [(1, 8, "uniform"), (4096, 8, "skewed"), (77, 5, "one-expert")])
def test_moe_align_on_gpu(M, E, routing):
    from gemmbench.kernels.moe_align import check_alignment, moe_align
    from gemmbench.measure.inputs import route

    ids, _ = route(M, E, 2, torch.Generator().manual_seed(1), routing)
    ids = ids.cuda()
    for bm in (16, 64):
        result = check_alignment(ids, E, moe_align(ids, E, bm))
        assert result.ok, result.detail


@pytest.mark.parametrize(
    "name,dtype",
    [("cublas_bf16", "bf16"), ("cublas_fp16", "fp16"), ("cublas_fp8", "fp8"), ("cublas_fp8_rowwise", "fp8")],
)
def test_cublas_on_gpu(name, dtype):
    assert _check(name, 16, 1280, 8192, dtype) is None


@pytest.mark.parametrize("dtype,scaling", [("bf16", "none"), ("fp8", "tensor"), ("fp8", "row")])
def test_inductor_mm_on_gpu(dtype, scaling):
    """torch.compile's max-autotune against the fp32 reference; its compile in make() with the time in the config,
    and none in the timing: stream mode captures the compiled call in the harness's own CUDA graph."""
    from torch._dynamo.utils import counters

    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.measure.timing import Timer
    from gemmbench.shapes import Problem

    v = registry.get("inductor_mm")
    p = Problem("test", "g", 64, 1280, 1024, dtype, scaling=scaling)
    assert v.unsupported_reason(p, detect()) is None  # a Hopper GPU with Triton runs all three
    checked = check_cell(p, v, make_inputs(p, 1, "cuda"))
    assert checked.result.ok, f"inductor_mm {dtype} {scaling}: {checked.result.detail}"
    config = checked.launch.config
    assert config["mode"] == "max-autotune-no-cudagraphs" and config["dynamic"] is False and config["compile_s"] > 0
    graphs = counters["stats"]["unique_graphs"]  # dynamo counts every graph it compiles
    launches = [v.make(p, make_inputs(p, seed, "cuda")) for seed in (2, 3)]
    samples = Timer("stream", budget_s=0.05).measure([x.fn for x in launches])
    assert len(samples) >= 10 and counters["stats"]["unique_graphs"] == graphs


@pytest.mark.parametrize("mode", ["cold", "stream", "graph", "wall", "cupti"])
def test_every_timing_mode_samples(mode):
    import torch

    from gemmbench.measure.timing import Timer

    a = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    bs = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    timer = Timer(mode, budget_s=0.05)
    samples = timer.measure([lambda b=b: a @ b.t() for b in bs])
    assert len(samples) >= 10 and all(s > 0 for s in samples)


def _run(*args, tmp_path):
    out = tmp_path / "run.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "gemmbench", "run", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from gemmbench.results.store import load

    return load([out])


def test_faulting_kernel_costs_one_cell(tmp_path):
    df = _run(
        "--shapes",
        "smoke",
        "--m",
        "1,5",
        "--dtype",
        "fp16",
        "--variants",
        "test_oob_write,cublas_fp16",
        "--plugin",
        str(PLUGINS / "oob_plugin.py"),
        tmp_path=tmp_path,
    )
    oob = df[df.variant == "test_oob_write"]
    good = df[df.variant == "cublas_fp16"]
    assert len(oob) == 6 and (oob.status == "error").all()
    assert oob.reason.str.contains("illegal|CUDA error|worker died", case=False).all(), oob.reason.tolist()
    assert len(good) == 6 and (good.status == "ok").all()


@pytest.mark.exclusive_gpu  # memcheck's worker allocates every tensor on its own, without the caching allocator
def test_sanitize_reports_an_overread(tmp_path):
    df = _run(
        "--shapes",
        "smoke",
        "--m",
        "1",
        "--dtype",
        "fp16",
        "--variants",
        "test_overread,cublas_fp16",
        "--plugin",
        str(PLUGINS / "oob_plugin.py"),
        "--sanitize",
        "--budget",
        "0.05",
        tmp_path=tmp_path,
    )
    bad = df[df.variant == "test_overread"]
    print(df[["variant", "status", "reason"]].to_string())
    assert (bad.status == "error").all() and bad.reason.str.contains("sanitizer").all(), bad.reason.tolist()
    assert (df[df.variant == "cublas_fp16"].status == "ok").all()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8"])
def test_moe_splitk_many_splits_over_many_calls(dtype):
    """The SplitK MoE form with real splits on a Mixtral 8x7B TP=8 w13 shape: 30 calls in a row, each right
    (a race in the last-split reduction would show as a wrong tile now and then)."""
    from gemmbench.kernels.fused_moe import MoeConfig, _build
    from gemmbench.measure.check import check_cell, reference
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "moe", 3, 3584, 4096, dtype, E=8, topk=2, routing="uniform")
    inputs = make_inputs(p, 4, "cuda")
    launch = _build()(p, inputs, MoeConfig.tile(16, 64, 128, 4, 4, SPLIT_K=8))
    assert launch.config["SPLIT_K"] == 8
    ref = reference(p, inputs)
    for call in range(30):
        result = check_cell(p, None, inputs, launch=launch, ref=ref).result
        assert result.ok, f"call {call}: {result.detail}"
