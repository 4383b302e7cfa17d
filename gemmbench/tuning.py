"""Per-problem config choice for Triton variants: each candidate is compiled, run, and timed with the
one timing primitive; the fastest wins and is memoised for the process.  Runs inside make(), so it
is setup, never part of a timed closure.  (Stored, committed configs come with the SplitK issue.)"""

from __future__ import annotations

import os
from typing import Callable, Optional

from gemmbench.shapes import Problem

_chosen: dict[tuple, dict] = {}
# Triton's interpreter runs a 33x80x48 GEMM in well under a second; a Llama decode GEMM would take minutes.
INTERPRETER_MAX_MACS = 1 << 24


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def needs_triton_device(problem: Problem, device) -> Optional[str]:
    """supports() for Triton variants: a CUDA GPU, or the CPU interpreter for the dtypes it runs right."""
    if device.kind == "cuda":
        if problem.dtype == "fp8" and device.capability < (8, 9):
            return f"fp8 tl.dot needs compute capability 8.9+, {device.name} has {device.capability}"
        return None
    if not interpreter_on():
        return "Triton needs a CUDA GPU here (or TRITON_INTERPRET=1 for its CPU interpreter)"
    if problem.dtype == "bf16":
        # Measured: the interpreter returns garbage for bf16 tl.dot and raises nothing.
        return "Triton's CPU interpreter computes bf16 tl.dot wrongly (no error raised); bf16 runs on the GPU only"
    from gemmbench.metrics import flops

    macs = flops(problem) // 2
    if macs > INTERPRETER_MAX_MACS:
        return f"too large for Triton's CPU interpreter ({macs:.2g} multiply-adds, limit {INTERPRETER_MAX_MACS:.2g}): run it on a GPU"
    return None


def pick(name: str, problem: Problem, configs: list[dict], launcher: Callable[[dict], Callable]) -> dict:
    """The fastest config of `configs` for this problem (the first one when there is nothing to choose)."""
    key = (name, problem.M, problem.N, problem.K, problem.E, problem.topk, problem.dtype)
    if key in _chosen:
        return _chosen[key]
    if len(configs) == 1 or interpreter_on():
        best = configs[0]
    else:
        from gemmbench.timing import quick_median_us

        timed = []
        errors = []
        for config in configs:
            try:
                fn = launcher(config)
                fn()  # compiles; a config that needs more shared memory than the GPU has fails here
                timed.append((quick_median_us(fn), config))
            except Exception as exc:  # noqa: BLE001 - a config that cannot run is simply not a candidate
                if "CUDA error" in str(exc) or "illegal" in str(exc):
                    raise  # a faulting kernel is a bug, not a slow config
                errors.append(f"{config}: {type(exc).__name__}")
        if not timed:
            raise RuntimeError(f"no config of {name} runs this problem: {'; '.join(errors)}")
        best = min(timed, key=lambda t: t[0])[1]
    _chosen[key] = best
    return best
