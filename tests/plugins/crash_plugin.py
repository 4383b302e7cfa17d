"""Test plugin: `test_crash` kills its own process when launched, as a faulting kernel kills a
worker's CUDA context.  Used by the CPU crash-isolation test."""

import os
import signal

from gemmbench.registry import Launch, Variant, register


def _make(problem, inputs):
    return Launch(fn=lambda: os.kill(os.getpid(), signal.SIGKILL))


register(
    Variant(
        "test_crash", "test", ("fp16", "fp8", "bf16"), "kills its worker process when launched", _make, source=__file__
    )
)
