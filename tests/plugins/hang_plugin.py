"""Test plugin: `test_hang`'s kernel never returns (a launch that spins until its process is killed), as a
deadlocked kernel would.  It touches the file named by GEMMBENCH_TEST_HANG_MARKER when it starts spinning, so a test
knows the worker is stuck.  It runs only GEMMs named `hang` (others are skipped rows), so a sweep can finish cells
before it."""

import os
import time
from pathlib import Path

from gemmbench.registry import Launch, Variant, register


def _make(problem, inputs):
    def spin():
        marker = os.environ.get("GEMMBENCH_TEST_HANG_MARKER")
        if marker:
            Path(marker).touch()
        while True:
            time.sleep(0.05)

    return Launch(spin)


def _supports(problem, device):
    return None if problem.gemm == "hang" else "runs only the GEMM named hang"


register(Variant("test_hang", "test", ("fp16",), "a kernel that never returns", _make, _supports, source=__file__))
