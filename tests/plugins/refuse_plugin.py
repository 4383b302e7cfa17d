"""Test plugin: `test_refuse` says it runs every dense fp16 GEMM, but its make() raises on GEMMs whose N is 64, as a
library that refuses a shape at run time (cuBLAS's block-scaled fp8 at some K) does; elsewhere it is torch's matmul.
`test_dies` ends its worker on those GEMMs instead."""

import os

from gemmbench.registry import Launch, Variant, register


def _make(problem, inputs):
    if problem.N == 64:
        raise RuntimeError(f"Invalid scaling configuration for N {problem.N} (the test's refusal)")
    return Launch(lambda: inputs.a @ inputs.b.t())


register(Variant("test_refuse", "test", ("fp16",), "refuses N 64 at run time", _make, source=__file__))


def _make_dies(problem, inputs):
    if problem.N == 64:
        os._exit(3)  # the process ends at once, as a fault that takes the CUDA context with it does
    return Launch(lambda: inputs.a @ inputs.b.t())


register(Variant("test_dies", "test", ("fp16",), "ends its worker on N 64", _make_dies, source=__file__))
