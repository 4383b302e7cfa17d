"""Test plugin: variants that misbehave the ways a user's kernel can, each only on GEMMs of its own name, so that one
sweep meets them all.  In the benchmark worker only (GEMMBENCH_EVENT_FD set), since the sweep imports plugins too:

  test_hang_child     on GEMMs named hang*: starts a child process (its pid appended to GEMMBENCH_TEST_CHILD_PIDS),
                      then never returns; with GEMMBENCH_TEST_LOSE_DEVICE set it first creates that file, and a worker
                      starting while the file exists fails as on a lost GPU
  test_supports_hang  its supports() never returns on the GEMM named sup
  test_exit           its make() calls sys.exit(0) on the GEMM named exit
  (import)            with GEMMBENCH_TEST_GIL_MARKER set: creates that file, then holds the interpreter lock for good
"""

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

from gemmbench.registry import Launch, Variant, register

IN_WORKER = "GEMMBENCH_EVENT_FD" in os.environ
LOSE = os.environ.get("GEMMBENCH_TEST_LOSE_DEVICE")
if IN_WORKER and LOSE and Path(LOSE).exists():
    raise RuntimeError("CUDA error: unspecified launch failure (the test's lost GPU)")
GIL = os.environ.get("GEMMBENCH_TEST_GIL_MARKER")
if IN_WORKER and GIL:
    Path(GIL).touch()
    # C's sleep called through PyDLL keeps the interpreter lock (no thread of this process runs), and uses no core
    while True:
        ctypes.PyDLL(None).sleep(3600)


def _hang_make(problem, inputs):
    def spin():
        child = subprocess.Popen(["sleep", "600"])
        with open(os.environ["GEMMBENCH_TEST_CHILD_PIDS"], "a") as f:
            f.write(f"{child.pid}\n")
        if LOSE:
            Path(LOSE).touch()
        while True:
            time.sleep(0.05)

    return Launch(spin)


def _torch_make(problem, inputs):
    return Launch(lambda: inputs.a @ inputs.b.t())


def _named(prefix):
    return lambda problem, device: None if problem.gemm.startswith(prefix) else f"runs only GEMMs named {prefix}*"


def _supports_hang(problem, device):
    while IN_WORKER and problem.gemm == "sup":
        time.sleep(0.05)
    return None


def _exit_make(problem, inputs):
    if problem.gemm == "exit":
        sys.exit(0)
    return _torch_make(problem, inputs)


for name, make, supports in [
    ("test_hang_child", _hang_make, _named("hang")),
    ("test_supports_hang", _torch_make, _supports_hang),
    ("test_exit", _exit_make, None),
]:
    register(Variant(name, "test", ("fp16",), "misbehaves on purpose", make, supports, source=__file__))
