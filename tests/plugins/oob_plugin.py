"""Test plugin for the GPU: `test_oob_write` stores far outside its output (an illegal address: the
CUDA context is lost) and `test_overread` reads a little past the end of its input (no fault, wrong
memory: only compute-sanitizer sees it).  Used by tests/test_gpu.py."""

import torch
import triton
import triton.language as tl

from gemmbench.registry import Launch, Variant, register


@triton.jit
def _oob_write_kernel(c_ptr, n):
    # 2**36 elements past the output: far outside any allocation
    offs = tl.arange(0, 16).to(tl.int64) + (1 << 36)
    tl.store(c_ptr + offs, tl.zeros((16,), dtype=tl.float32).to(c_ptr.dtype.element_ty))


@triton.jit
def _overread_kernel(a_ptr, c_ptr, n, BLOCK: tl.constexpr):
    # reads BLOCK elements from a[n - 1] on: all but the first lie past the end of a
    # every loaded value feeds the stored sum: a load whose result is unused is dead code the
    # compiler removes, and then there is no overread left to detect
    offs = tl.arange(0, BLOCK)
    x = tl.load(a_ptr + n - 1 + offs).to(tl.float32)
    tl.store(c_ptr, tl.sum(x, axis=0).to(c_ptr.dtype.element_ty))


def _make_oob(problem, inputs):
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=inputs.a.device)
    return Launch(fn=lambda: _oob_write_kernel[(1,)](out, out.numel()), out=out)


def _make_overread(problem, inputs):
    a = inputs.a.reshape(-1)
    scratch = torch.empty(64, dtype=a.dtype, device=a.device)

    def fn():
        _overread_kernel[(1,)](a, scratch, a.numel(), BLOCK=1024)
        return torch.mm(inputs.a, inputs.b.t())  # the right answer, so only the sanitizer can object

    return Launch(fn=fn)


register(
    Variant(
        "test_oob_write", "test", ("fp16", "bf16"), "writes far out of bounds (crash test)", _make_oob, source=__file__
    )
)
register(
    Variant(
        "test_overread",
        "test",
        ("fp16", "bf16"),
        "reads past its input (sanitizer test)",
        _make_overread,
        source=__file__,
    )
)
