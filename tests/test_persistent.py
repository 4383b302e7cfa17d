"""The persistent TMA GEMM (gemmbench/kernels/persistent.py) under Triton's CPU interpreter, which emulates tensor descriptors:
each program walks several tiles, every fp8 scaling, both epilogues, the masked store; what it refuses; its search
space's rules.  bf16 runs on the GPU only (tests/test_gpu_persistent.py)."""

from __future__ import annotations

import pytest

from gemmbench import registry
from gemmbench.kernels.persistent import ACC_REGS_MAX, SMEM_BYTES, PersistentConfig, fits, search_space
from gemmbench.measure.check import check_cell
from gemmbench.measure.device import DeviceInfo
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

CPU = DeviceInfo(kind="cpu", name="cpu")
V = registry.get("triton_persistent")


@pytest.mark.parametrize("subtile", [True, False])
@pytest.mark.parametrize(
    "dtype,scaling,M,N,K",
    [
        # 16-row tiles of 32 columns: 3 x 7 = 21 tiles over the interpreter's 4 programs (5 or 6 tiles each);
        # N = 200 and K = 320 end in partial tiles, partial scale blocks and partial K steps
        ("fp16", "none", 33, 200, 320),
        ("fp8", "tensor", 33, 200, 320),
        ("fp8", "row", 17, 80, 160),
        ("fp8", "block", 33, 200, 320),
        ("fp8", "block-ue8m0", 1, 200, 320),
    ],
)
def test_persistent_is_right(dtype, scaling, M, N, K, subtile):
    p = Problem("t", "g", M, N, K, dtype, scaling=scaling)
    x = make_inputs(p, 1, "cpu")
    launch = V.tunable.build(p, x, PersistentConfig.tile(16, 32, 32, 4, 1, GROUP_M=2, EPILOGUE_SUBTILE=subtile))
    assert launch.fn.programs == 4 and launch.fn.c_desc  # N * 2 bytes a multiple of 16: the descriptor store
    r = check_cell(p, V, x, launch=launch).result
    assert r.ok, r.detail


def test_an_output_a_descriptor_cannot_store_takes_the_masked_store():
    p = Problem("t", "g", 5, 36, 64, "fp16")  # rows of 36 fp16 = 72 bytes: not a multiple of 16
    x = make_inputs(p, 2, "cpu")
    launch = V.tunable.build(p, x, PersistentConfig.tile(16, 32, 32, 4, 1))
    assert not launch.fn.c_desc
    r = check_cell(p, V, x, launch=launch).result
    assert r.ok, r.detail


def test_what_it_refuses():
    # fp16 K = 100: rows of 200 bytes, which a descriptor cannot start on a 16-byte boundary
    assert "K=100" in V.unsupported_reason(Problem("t", "g", 16, 64, 100, "fp16"), CPU)
    ampere = DeviceInfo(kind="cuda", name="A100", capability=(8, 0))
    assert "9.0" in V.unsupported_reason(Problem("t", "g", 16, 64, 128, "fp16"), ampere)
    assert V.unsupported_reason(Problem("t", "g", 16, 64, 128, "fp16"), CPU) is None
    assert set(V.scalings) == {"tensor", "row", "block", "block-ue8m0"}


def test_fits_by_hand():
    # 128 x 256 x 64 bf16, 4 stages: 4 * (128 + 256) * 64 * 2 + 32768 = 229376 bytes (the limit is 232448); 5 stages:
    # 278528; 8 warps: 128 * 256 / 256 threads = 128 registers a thread
    assert fits(128, 256, 64, 8, 4, 2) and 4 * 384 * 64 * 2 + 32768 <= SMEM_BYTES
    assert not fits(128, 256, 64, 8, 5, 2)
    assert not fits(128, 256, 64, 4, 4, 2)  # 256 registers a thread
    assert fits(256, 128, 128, 8, 4, 1)  # fp8: the same bytes
    assert not fits(64, 64, 64, 8, 3, 2)  # 16 registers a thread: eight warps on a 64 x 64 tile
    assert ACC_REGS_MAX == 128


def test_search_space_rules(monkeypatch):
    from gemmbench.configs import tuning

    monkeypatch.setattr(tuning, "sm_count", lambda: 132)
    for dtype, scaling, M in (
        ("bf16", "none", 2048),
        ("fp8", "tensor", 512),
        ("fp8", "block", 4096),
        ("fp8", "tensor", 16),
    ):
        p = Problem("t", "g", M, 8192, 8192, dtype, scaling=scaling)
        space = search_space(p, True, True)
        elem = 1 if dtype == "fp8" else 2
        assert space and len(space) == len(set(space))
        tiles = 2 if scaling == "block" else 1  # block scales: a second fp32 tile a thread
        assert all(fits(c.BLOCK_M, c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages, elem, tiles) for c in space)
        if scaling == "block":
            assert {c.BLOCK_K for c in space} <= {64, 128}
            assert all(c.BLOCK_M * c.BLOCK_N * 2 // (32 * c.num_warps) <= 128 for c in space)
        if M <= 64:
            assert max(c.BLOCK_M for c in space) == 64
        quick = search_space(p, True, False)
        assert quick == space[: len(quick)]  # the quick few are the full space's first candidates
