"""fp8 fast accumulation on the GPU: cuBLAS (use_fast_accum) and the Triton and Gluon kernels without promotion give
results within the fast tolerance (max of fp8's and twice cuBLAS fast's own error on the same inputs), and the
check names that tolerance.  No timing is asserted."""

import pytest

pytestmark = pytest.mark.gpu

# prefill shapes, where cuBLAS runs its full-K fast-accumulation kernel (at M 1 it runs another: see
# tests/test_gpu_gluon_ws.py)
SHAPES = [(512, 1280, 8192), (2048, 8192, 1024)]
VARIANTS = [("cublas_fp8", "tensor"), ("cublas_fp8_rowwise", "row"), ("triton_persistent", "tensor"),
            ("triton_persistent", "row"), ("gluon_ws", "tensor"), ("gluon_ws", "row")]  # fmt: skip


@pytest.mark.parametrize("name,scaling", VARIANTS)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_fast_accumulation_within_its_tolerance_on_gpu(M, N, K, name, scaling):
    from gemmbench import registry
    from gemmbench.measure.check import check_cell
    from gemmbench.measure.device import detect
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    p = Problem("test", "g", M, N, K, "fp8", scaling=scaling, fp8_accum="fast")
    v = registry.get(name)
    assert v.unsupported_reason(p, detect()) is None
    inputs = make_inputs(p, 7, "cuda")
    checked = check_cell(p, None, inputs, launch=v.make(p, inputs))
    assert checked.result.ok, checked.result.detail
