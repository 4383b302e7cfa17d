"""Which built-in variants run on which CUDA GPU, decided by compute capability alone, checked on the CPU against faked
devices: Ampere (8.0), Ada (8.9), Hopper (9.0), Blackwell (10.0) and consumer Blackwell (12.0).  The rules, worked by
hand from the hardware: fp8 tensor-core products need 8.9+; TMA (tensor descriptors) 9.0+; wgmma, and so the Gluon
Hopper kernels, exactly 9.x; cuBLAS's row-wise fp8 through torch 9.0+; torch's block-scaled fp8 (DeepSeek's recipe)
9.0 only.  What torch must probe on a real GPU (a _scaled_mm, Gluon's release, Inductor's Triton) is faked to pass;
torch_grouped_mm is decided by such a probe only, so it is not in the matrix.  The README's matrix is this one."""

import re
from pathlib import Path

import pytest

from gemmbench import registry
from gemmbench.measure.device import DeviceInfo
from gemmbench.shapes import Problem

GPUS = {"A100": (8, 0), "L40S": (8, 9), "H100": (9, 0), "B200": (10, 0), "RTX 5090": (12, 0)}
ALL = tuple(GPUS)
FP8 = ("L40S", "H100", "B200", "RTX 5090")  # 8.9+
TMA = ("H100", "B200", "RTX 5090")  # 9.0+
HOPPER = ("H100",)  # exactly 9.x
TRITON_DENSE = ("triton_dp_row", "triton_dp_col", "triton_dp_grouped", "triton_splitk_atomic", "triton_splitk_reduce",
                "triton_streamk")  # fmt: skip
TRITON_MOE = ("triton_moe_row", "triton_moe_col", "triton_moe_grouped", "triton_moe_splitk", "triton_moe_persistent")
GLUON = ("gluon_ws", "gluon_persistent", "gluon_pipelined")

# (problem kind) -> {variant: GPUs it runs on}, worked from the rules above
EXPECTED = {
    "dense bf16": {
        "cublas_bf16": ALL,
        "inductor_mm": ALL,
        "triton_persistent": TMA,
        **dict.fromkeys(TRITON_DENSE, ALL),
        **dict.fromkeys(GLUON, HOPPER),
    },  # fmt: skip
    "dense fp8 tensor": {
        "cublas_fp8": FP8,
        "inductor_mm": FP8,
        "triton_persistent": TMA,
        **dict.fromkeys(TRITON_DENSE, FP8),
        **dict.fromkeys(GLUON, HOPPER),
    },  # fmt: skip
    "dense fp8 row": {
        "cublas_fp8_rowwise": TMA,
        "inductor_mm": TMA,
        "triton_splitk_atomic_rowwise": FP8,
        "triton_splitk_reduce_rowwise": FP8,
        "triton_persistent": TMA,
        "triton_streamk": FP8,
        **dict.fromkeys(GLUON, HOPPER),
    },  # fmt: skip
    "dense fp8 block": {
        "cublas_fp8_block": HOPPER,
        "triton_persistent": TMA,
        "gluon_ws": HOPPER,
        **dict.fromkeys(TRITON_DENSE, FP8),
    },  # fmt: skip
    "moe bf16": {"torch_moe_loop": ALL, "moe_align": ALL, "triton_moe_permuted": TMA, **dict.fromkeys(TRITON_MOE, ALL)},
    "moe fp8 tensor": {"moe_align": ALL, "triton_moe_permuted": TMA, **dict.fromkeys(TRITON_MOE, FP8)},
}
PROBLEMS = {
    "dense bf16": dict(dtype="bf16"),
    "dense fp8 tensor": dict(dtype="fp8", scaling="tensor", fp8_accum="precise"),
    "dense fp8 row": dict(dtype="fp8", scaling="row", fp8_accum="precise"),
    "dense fp8 block": dict(dtype="fp8", scaling="block", fp8_accum="precise"),
    "moe bf16": dict(dtype="bf16", E=8, topk=2),
    "moe fp8 tensor": dict(dtype="fp8", scaling="tensor", fp8_accum="precise", E=8, topk=2),
}


@pytest.fixture
def probes_pass(monkeypatch):
    """What only a real GPU can answer, answered yes: the torch paths exist and this Triton's Gluon is the one."""
    import torch.utils._triton

    from gemmbench.kernels import cublas, cublas_block, gluon_ws

    monkeypatch.setattr(cublas, "_scaled_mm_error", lambda kind, scaling: None)
    monkeypatch.setattr(cublas_block, "_block_probe", lambda: None)
    monkeypatch.setattr(gluon_ws, "gluon_unsupported_reason", lambda: None)
    monkeypatch.setattr(torch.utils._triton, "has_triton", lambda: True)


def runs_on(kind: str) -> dict:
    """{variant: the GPUs of GPUS it runs `kind` on}, for every built-in variant but torch_grouped_mm."""
    problem = Problem(shape_set="t", gemm="g", M=64, N=4096, K=4096, **PROBLEMS[kind])
    out = {}
    for v in registry.all_variants():
        if v.source != "builtin" or v.name == "torch_grouped_mm":
            continue
        gpus = tuple(g for g, cap in GPUS.items()
                     if v.unsupported_reason(problem, DeviceInfo("cuda", g, cap, 132, 50 << 20)) is None)  # fmt: skip
        if gpus:
            out[v.name] = gpus
    return out


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_each_variant_runs_where_the_hardware_has_what_it_uses(probes_pass, kind):
    assert runs_on(kind) == EXPECTED[kind]


def test_the_reasons_name_the_capability(probes_pass):
    problem = Problem(shape_set="t", gemm="g", M=64, N=4096, K=4096, **PROBLEMS["dense fp8 tensor"])
    a100 = DeviceInfo("cuda", "A100", (8, 0), 132, 50 << 20)
    b200 = DeviceInfo("cuda", "B200", (10, 0), 132, 50 << 20)
    assert "8.9+" in registry.get("triton_dp_grouped").unsupported_reason(problem, a100)
    assert "9.0+" in registry.get("triton_persistent").unsupported_reason(problem.with_(dtype="bf16", scaling="none",
                                                                                         fp8_accum="none"), a100)  # fmt: skip
    assert "Hopper" in registry.get("gluon_ws").unsupported_reason(problem, b200)


def test_the_readme_matrix_is_this_one(probes_pass):
    """The README's table: one row per variant family, a column per GPU, ✓ where its bf16 / fp8 problems run."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"(?m)^\| `([a-z0-9_*]+)` \|(.*)\|$", text.split("## Which variants run on which GPU")[1])
    assert rows
    matrix = {kind: runs_on(kind) for kind in EXPECTED}
    for glob, cells in rows:
        marks = [c.strip() for c in cells.split("|")]
        names = [n for n in {n for m in matrix.values() for n in m} if re.fullmatch(glob.replace("*", ".*"), n)]
        assert names, glob
        for gpu, mark in zip(GPUS, marks, strict=True):
            bf16 = any(gpu in matrix[k].get(n, ()) for n in names for k in ("dense bf16", "moe bf16"))
            fp8 = any(gpu in matrix[k].get(n, ()) for n in names for k in EXPECTED if "fp8" in k)
            want = {(True, True): "✓", (True, False): "16-bit", (False, True): "fp8", (False, False): "—"}[(bf16, fp8)]
            assert mark == want, (glob, gpu, mark, want)
