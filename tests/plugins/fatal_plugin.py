"""Test plugin: `test_fatal` fails, and the worker then finds its CUDA context lost (simulated on the CPU by
replacing the worker's probe).  The worker reports the row itself and exits; nothing else may be blamed."""

import sys

from gemmbench.registry import Variant, register


def _make(problem, inputs):
    # the worker runs as __main__ (python -m gemmbench.engine.worker): patch the module that is running
    sys.modules["__main__"].context_poisoned = lambda: True  # as after an illegal address on a GPU
    raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated)")


register(Variant("test_fatal", "test", ("fp16",), "fails with a lost CUDA context", _make, source=__file__))
