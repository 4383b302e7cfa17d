"""The Gluon kernels compile for Hopper (sm_90a) on a machine without a GPU, with whichever Triton is installed.

Gluon's API moves between Triton releases (names renamed, the old ones refused at compile time), and only compiling
shows it: here the host's own launch (GluonGemm) compiles each schedule with Triton's driver stood in for by one that
answers "CUDA, compute capability 9.0" and its launch skipped (JITFunction.run with warmup).  The checks are what any
Hopper kernel of TMA operands and wgmma must hold, read in its PTX.  The compiles run in a fresh interpreter: Triton's
interpreter, which other tests run in the same worker, leaves triton.language's builtins patched after a device
function call, and a kernel compiled after that in the process fails."""

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gemmbench.kernels import gluon_api, gluon_ws, gluon_ws_device
from gemmbench.kernels.gluon_ws_config import GluonConfig
from gemmbench.kernels.tile_loop import BlockScales

pytestmark = pytest.mark.skipif(gluon_api.GLUON_IMPORT_ERROR is not None, reason="this Triton has no Gluon")

SMS = 132  # an H100's or H200's


class _Hopper:
    """Triton's active driver as far as compiling asks: the target, the current device and stream."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def _stand_in(set_attr=setattr) -> None:
    """Compiles instead of launching: the kernels' run() with warmup, on the stand-in driver (set_attr: pytest's
    monkeypatch.setattr, to undo it after a test)."""
    from triton.runtime import driver

    set_attr(driver, "_active", _Hopper())
    for kernel in (gluon_ws_device.warp_specialized_kernel, gluon_ws_device.single_partition_kernel):
        run = kernel.run
        set_attr(kernel, "run", lambda *a, run=run, **kw: run(*a, **{**kw, "warmup": True}))
    set_attr(gluon_ws.tuning, "sm_count", lambda: SMS)


@pytest.fixture
def hopper(monkeypatch):
    _stand_in(monkeypatch.setattr)


def _config(**fields) -> GluonConfig:
    base = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4, SCHEDULE="halves",
                PROMOTE_OVERLAP=False, BLOCK_N2=0, PROMOTE_WAVES=1)  # fmt: skip
    return GluonConfig(**{**base, **fields})


# (id, config, scales, promoted): each consumer K loop (the block scales' waves, one and two; the per-tensor waves in
# turns and 128 + 32 wide; the overlapped partials, 64 and 64 + 16 wide; the one wave with a step's lag, in trips of 2
# and of 4, 64 + 16 wide; Triton's plain loop split by atomics; the halves' waves streamed) and each schedule
CASES = [
    ("halves-block-scales", _config(), "block", True),
    ("ws-block-two-waves", _config(SCHEDULE="ws", BLOCK_N=64, PROMOTE_WAVES=2, num_stages=6), "block", True),
    ("halves-in-turns", _config(TURNS=True, num_stages=6), "tensor", True),
    ("halves-two-waves-128+32", _config(BLOCK_M=256, BLOCK_N2=32, PROMOTE_WAVES=2, num_stages=3), "tensor", True),
    (
        "pingpong-overlapped",
        _config(SCHEDULE="pingpong", BLOCK_N=64, PROMOTE_WAVES=0, PROMOTE_OVERLAP=True),
        "tensor",
        True,
    ),
    (
        "halves-overlapped-64+16",
        _config(BLOCK_N=64, BLOCK_N2=16, PROMOTE_WAVES=0, PROMOTE_OVERLAP=True, num_stages=6),
        "tensor",
        True,
    ),
    ("halves-lagged-block-scales", _config(PROMOTE_LAG=2), "block", True),
    ("halves-lagged-64+16-trips-of-4", _config(BLOCK_N=64, BLOCK_N2=16, PROMOTE_LAG=4, num_stages=6), "row", True),
    (
        "ws-split-atomic",
        _config(SCHEDULE="ws", PROMOTE_WAVES=0, num_warps=8, SPLIT_K=4, SPLIT_ATOMIC=True),
        "tensor",
        False,
    ),
    ("halves-streamed-block-scales", _config(STREAM_K=True), "block", True),
    # the halves without promotion (fp8 fast): Triton's plain loop on each half, 128 + 64 wide, and split by atomics
    ("halves-plain-128+64", _config(PROMOTE_WAVES=0, BLOCK_N2=64), "tensor", False),
    ("halves-plain-split-atomic", _config(PROMOTE_WAVES=0, SPLIT_K=4, SPLIT_ATOMIC=True), "tensor", False),
    ("pipelined", _config(SCHEDULE="pipelined", PROMOTE_WAVES=0, num_warps=8, num_stages=3), "row", False),
]


def _gemm(config: GluonConfig, scales: str, promoted: bool) -> gluon_ws.GluonGemm:
    """The host's launch of a problem of whole tiles of every config (4 x 8 = 32 tiles: the split one is split, the
    streamed one streamed, fewer tiles than the stand-in's SMs)."""
    M, N, K = 512, 1024, 2048
    a = torch.zeros(M, K, dtype=torch.float8_e4m3fn)
    b = torch.zeros(N, K, dtype=torch.float8_e4m3fn)
    out = torch.zeros(M, N, dtype=torch.bfloat16)
    a_scale, b_scale = (torch.ones(M), torch.ones(N)) if scales == "row" else (torch.ones(1), torch.ones(1))
    blocks = None
    if scales == "block":
        a_scale, b_scale = torch.ones(M, K // 128), torch.ones(N // 128, K // 128)
        blocks = BlockScales(SimpleNamespace(k_block=128, a=a, a_scale=a_scale, b_scale=b_scale))
    return gluon_ws.GluonGemm(a, b, out, a_scale, b_scale, scales, config, 128 if promoted else 0, blocks)


def compile_all(out: Path) -> None:
    """Each case's PTX into out/ID.ptx, or its error into out/ID.err (run by the compiled fixture's interpreter)."""
    _stand_in()
    for case_id, config, scales, promoted in CASES:
        try:
            gemm = _gemm(config, scales, promoted)
            gemm()
            (out / f"{case_id}.ptx").write_text(gemm.compiled.asm["ptx"])
        except Exception as error:  # the test of the case reports it
            (out / f"{case_id}.err").write_text(f"{type(error).__name__}: {error}")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """Every case compiled in a fresh interpreter (the module's docstring says why): the folder of their PTX."""
    out = tmp_path_factory.mktemp("ptx")
    here = str(Path(__file__).parent)
    code = (f"import sys, pathlib; sys.path.insert(0, {here!r}); import test_gluon_compile as t; "
            f"t.compile_all(pathlib.Path({str(out)!r}))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("case_id,config,scales,promoted", CASES, ids=[c[0] for c in CASES])
def test_each_schedule_compiles_for_hopper_without_a_gpu(compiled, case_id, config, scales, promoted):
    error = compiled / f"{case_id}.err"
    assert not error.exists(), error.read_text()
    ptx = (compiled / f"{case_id}.ptx").read_text()
    assert ".target sm_90a" in ptx
    assert "cp.async.bulk.tensor" in ptx  # TMA copies of the operands (and the output's store)
    assert "wgmma.mma_async" in ptx and ".e4m3.e4m3" in ptx  # fp8 x fp8 on the tensor cores
    if config.PROMOTE_OVERLAP or config.PROMOTE_LAG:
        # the overlapped partials and the lag wait with one K step's wgmma in flight: one group a step, two with a
        # second accumulator's columns
        assert f"wgmma.wait_group.sync.aligned {2 if config.BLOCK_N2 else 1};" in ptx
    if scales == "block":
        assert "cp.async.ca.shared.global" in ptx or "cp.async.cg.shared.global" in ptx  # the scales' staging
    if config.SCHEDULE == "halves":
        # each half syncs its own warpgroup's 128 threads, never the other's (a cooperative partition's 256 threads
        # meet at every K step's release of its stage)
        synced = re.findall(r"\bbar\.sync\s+\d+,\s*(\d+);", ptx)
        assert synced and set(synced) == {"128"}
    if config.meets():
        # the atomic split's and stream-K's meeting: each unit adds its fp32 partial, then counts itself in with acquire-release
        assert re.search(r"\b(?:red|atom)\.global\.[\w.]*relaxed[\w.]*\.add[\w.]*\.f32", ptx)
        assert re.search(r"\batom\.global\.[\w.]*acq_rel[\w.]*\.add", ptx)


def test_a_warp_specialized_ring_of_one_stage_is_refused(hopper):
    # its consumer would wait for the one stage while still holding it: a hang, not a row
    with pytest.raises(ValueError, match="2 stages or more"):
        _gemm(_config(num_stages=1), "block", True)
