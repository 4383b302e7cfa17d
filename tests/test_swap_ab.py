"""SplitK's SWAP_AB on the CPU (Triton's interpreter; conftest.py sets TRITON_INTERPRET): the kernel computes
out^T (N, M) = b @ a^T and writes it through the output's exchanged strides.  Checked against an fp32 reference
computed here from the operands (not check.reference), in fp16 and fp8 (per-tensor and row-wise scales), at decode
M with N and K not multiples of the tiles; which tensor goes to which kernel argument; block scales refused; the
config field in the JSON.  bf16 and the decode shapes of real models are in test_gpu_swap_ab.py."""

from __future__ import annotations

import pytest
import torch

from gemmbench import registry
from gemmbench.kernels import splitk
from gemmbench.kernels.splitk import SplitKConfig
from gemmbench.measure.check import compare, poison
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

DEV = "cuda" if torch.cuda.is_available() else "cpu"
N, K = 40, 80  # N: 2.5 tiles of 16; K: 2.5 blocks of 32, split 2 ways (the reduction runs)
# the swapped kernel's BLOCK_M (16) tiles N, its BLOCK_N (16, tl.dot's minimum) the tokens
SWAPPED = SplitKConfig.tile(16, 16, 32, 4, 1, SPLIT_K=2, SWAP_AB=True)


def _inputs(name: str, M: int, dtype: str, scaling: str = "tensor"):
    p = Problem("test", "g", M, N, K, dtype, scaling=scaling if dtype == "fp8" else "none")
    return p, make_inputs(p, 7, DEV, scaling=registry.get(name).fp8_scaling)


def _row_scales(inputs, M: int) -> None:
    """Distinct, uneven row-wise scales: a scale read for the wrong row, or the two vectors mixed up, shows."""
    inputs.a_scale = torch.linspace(0.25, 2.0, M, device=DEV).sin().abs().add(0.1).reshape(M, 1)
    inputs.b_scale = torch.linspace(3.0, 0.05, N, device=DEV).reshape(N, 1) ** 2


def _fp32_reference(inputs) -> torch.Tensor:
    """a @ b^T in fp32 with the scales applied by hand: per tensor, a scalar each; row-wise, (M, 1) and (N, 1)."""
    a, b = inputs.a.float(), inputs.b.float()
    if inputs.a_scale is not None:
        a, b = a * inputs.a_scale.float(), b * inputs.b_scale.float()
    return a @ b.T


def _launch(name, p, inputs, config=SWAPPED, calls=2):
    launch = registry.get(name).tunable.build(p, inputs, config)
    outs = []
    for _ in range(calls):  # the second call sees the buffers the first one's last splits cleared
        poison(launch.out)
        outs.append(launch.fn().clone())
    return launch, outs


@pytest.mark.parametrize("M", [1, 5, 16])
@pytest.mark.parametrize("name", ["triton_splitk_atomic", "triton_splitk_reduce"])
def test_swapped_fp16_matches_the_fp32_reference(name, M):
    p, inputs = _inputs(name, M, "fp16")
    launch, outs = _launch(name, p, inputs)
    assert launch.config["SWAP_AB"] is True and launch.config["SPLIT_K"] == 2
    ref = _fp32_reference(inputs)
    for out in outs:
        assert out.shape == (M, N)
        result = compare(p, out, ref)
        assert result.ok, result.detail
    assert torch.count_nonzero(launch.fn.count) == 0


def test_swapped_data_parallel_stores_directly():
    """SPLIT_K = 1: the transposed tile is stored straight into out, no buffer."""
    p, inputs = _inputs("triton_splitk_atomic", 5, "fp16")
    config = SplitKConfig.tile(16, 16, 32, 4, 1, SPLIT_K=1, SWAP_AB=True)
    _, (out, _) = _launch("triton_splitk_atomic", p, inputs, config)
    result = compare(p, out, _fp32_reference(inputs))
    assert result.ok, result.detail


@pytest.mark.parametrize("M", [1, 5, 16])
def test_swapped_fp8_per_tensor_scales(M):
    p, inputs = _inputs("triton_splitk_atomic", M, "fp8")
    _, (out, _) = _launch("triton_splitk_atomic", p, inputs)
    result = compare(p, out, _fp32_reference(inputs))
    assert result.ok, result.detail


@pytest.mark.parametrize("M", [1, 5, 16])
@pytest.mark.parametrize("name", ["triton_splitk_atomic_rowwise", "triton_splitk_reduce_rowwise"])
def test_swapped_row_scales_are_exchanged(name, M):
    """The (M,) activation scale becomes the kernel's column scale and the (N,) weight scale its row scale."""
    p, inputs = _inputs(name, M, "fp8", "row")
    _row_scales(inputs, M)
    _, (out, _) = _launch(name, p, inputs)
    ref = _fp32_reference(inputs)
    result = compare(p, out, ref)
    assert result.ok, result.detail
    # and the scales matter: the same product under uniform scales is far off (a mix-up would not pass)
    mean_scales = inputs.a_scale.mean() * inputs.b_scale.mean()
    assert not compare(p, (inputs.a.float() @ inputs.b.float().T) * mean_scales, ref).ok


class _Recorder:
    """Stands in for the kernel: records one launch's arguments by the kernel's parameter names."""

    def __init__(self):
        self.names, self.args = splitk.splitk_gemm_kernel.arg_names, {}

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.args = {**dict(zip(self.names, args, strict=False)), **kwargs, "grid": grid}

        return launch


@pytest.mark.parametrize("swap", [False, True])
def test_launch_arguments_of_the_swap(monkeypatch, swap):
    """Which tensor goes where: swapped, the weight is the kernel's a, the activations its b, M and N exchanged, the
    row scales exchanged with them, and the output written through its exchanged strides."""
    M = 5
    p, inputs = _inputs("triton_splitk_atomic_rowwise", M, "fp8", "row")
    _row_scales(inputs, M)
    config = SplitKConfig.tile(16, 16, 32, 4, 1, SPLIT_K=2, SWAP_AB=swap)
    launch = registry.get("triton_splitk_atomic_rowwise").tunable.build(p, inputs, config)
    recorder = _Recorder()
    monkeypatch.setattr(splitk, "splitk_gemm_kernel", recorder)
    launch.fn()
    got = recorder.args
    a, b = (inputs.b, inputs.a) if swap else (inputs.a, inputs.b)
    a_scale, b_scale = (inputs.b_scale, inputs.a_scale) if swap else (inputs.a_scale, inputs.b_scale)
    assert got["a_ptr"] is a and got["b_ptr"] is b and got["c_ptr"] is launch.out
    assert torch.equal(got["a_scale_ptr"], a_scale.reshape(-1)) and torch.equal(got["b_scale_ptr"], b_scale.reshape(-1))
    assert (got["M"], got["N"], got["K"]) == ((N, M, K) if swap else (M, N, K))
    assert (got["stride_cm"], got["stride_cn"]) == ((1, N) if swap else (N, 1))
    assert got["SCALE"] == "row" and got["EVEN_N"] is False
    assert tuple(launch.fn.buf.shape) == ((1, N, M) if swap else (1, M, N))
    assert got["grid"] == (3, 2)  # 3 tiles of 16 over N, 1 over M, either way round; 2 splits


@pytest.mark.parametrize("scaling", ["block", "block-ue8m0"])
def test_block_scales_refuse_the_swap(scaling):
    p = Problem("test", "g", 4, 256, 256, "fp8", scaling=scaling)
    inputs = make_inputs(p, 1, DEV, scaling=scaling)
    with pytest.raises(ValueError, match="SWAP_AB does not take block scales"):
        registry.get("triton_splitk_atomic").tunable.build(p, inputs, SWAPPED)
    assert not any(c.SWAP_AB for c in splitk.search_space(p, True, True))


def test_swap_candidates_only_at_decode_and_only_in_a_full_gpu_search():
    for M in (1, 16, 32, 64):
        for n, k, dtype in ((1280, 8192, "fp8"), (8192, 1024, "bf16")):
            p = Problem("t", "g", M, n, k, dtype)
            swapped = [c for c in splitk.search_space(p, True, True) if c.SWAP_AB]
            assert 0 < len(swapped) <= 8  # pruned: a handful beside the unswapped space
            assert all(c.BLOCK_M == 64 and 16 <= c.BLOCK_N <= 64 for c in swapped)
            assert all(c.BLOCK_N >= min(M, 64) and not c.TMA for c in swapped)
            assert len(set(swapped)) == len(swapped)
            assert not any(c.SWAP_AB for c in splitk.search_space(p, True, False))  # a run's quick choice
            assert not any(c.SWAP_AB for c in splitk.search_space(p, False, True))  # the interpreter's one config
    assert not any(c.SWAP_AB for c in splitk.search_space(Problem("t", "g", 65, 1280, 8192, "fp8"), True, True))


def test_the_config_records_swap_ab_and_old_configs_load_without_it():
    assert SWAPPED.to_dict()["SWAP_AB"] is True
    unswapped = SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=2)
    assert "SWAP_AB" not in unswapped.to_dict()  # unset: the JSON of configs from before it, which compare equal
    assert list(SWAPPED.to_dict())[-2:] == ["TMA", "SWAP_AB"]
    old = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 13, "GROUP_M": 8, "schedule": "row",
           "num_warps": 4, "num_stages": 5}  # fmt: skip
    assert not SplitKConfig.from_dict(old).SWAP_AB
    assert SplitKConfig.from_dict(SWAPPED.to_dict()) == SWAPPED
