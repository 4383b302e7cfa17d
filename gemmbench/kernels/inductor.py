"""inductor_mm: torch.compile's max-autotune of the cuBLAS baselines' own matmul (gemmbench/kernels/cublas.py), so that a user
sees what torch.compile gives on each shape.

The compiled call is cublas_bf16/fp16's `a @ w.T` (the weight (N, K), as nn.Linear holds it), or cublas_fp8's and
cublas_fp8_rowwise's `torch._scaled_mm` with the same operands (GemmInputs.scaled_mm_operands: per-tensor or row-wise
scales, bf16 out).  Inductor benchmarks its GEMM choices for the shape (its Triton templates and the aten call,
cuBLAS) and keeps the fastest.

Mode "max-autotune-no-cudagraphs", not "max-autotune": the latter also sets triton.cudagraphs, and Inductor's CUDA
graph trees copy every input that is not a parameter or buffer into the graph's own memory at each replay
(torch/_inductor/cudagraph_trees.py, CUDAGraphNode.run -> _copy_inputs_and_remove_from_src): the timed call would
read A and W twice, replay a graph of its own inside the cold timing or inside stream mode's own capture, and hand
back outputs that its next replay overwrites.  The harness times its own way (timing.py); Inductor must not.

Compile time: torch.compile compiles at the first call.  make() makes that call (dynamo's trace, Inductor's
lowering and autotuning, all before the check and the timing) and records its wall seconds in the row's `config`
("compile_s"; Inductor's on-disk caches make a repeat faster).  Every make() then calls the compiled function once
more under torch.compiler.set_stance("fail_on_recompile"): a call that would compile raises there instead, so a
compile can never land in the timed samples.

One compiled function per (M, N, K, dtype, scaling, device), dynamic=False: each shape gets its own graph and its
own autotuning (with a dynamic M Inductor would tune for one hint size and run every M with that choice).
fullgraph=True: a graph break would leave part of the call eager; it is an error instead.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from gemmbench.kernels import cublas
from gemmbench.measure.device import ON_THE_GPU, on_the_gpu
from gemmbench.registry import Launch, Variant, register

MODE = "max-autotune-no-cudagraphs"
BACKEND: Any = "inductor"  # the tests give a counting backend of their own (Inductor on a CPU builds C++)

# (M, N, K, dtype, scaling, device) -> (compiled function, compile seconds): one compile per shape in a process
_COMPILED: dict[tuple, tuple[Callable, float]] = {}


class CompileError(RuntimeError):
    """torch.compile failed on this matmul; the message names the mode and the cause in one line."""


def _mm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, w.t())  # (M, K) @ (N, K).T: cublas_bf16's call


def _scaled_mm(a, bt, scale_a, scale_b, out_dtype: torch.dtype) -> torch.Tensor:
    return torch._scaled_mm(a, bt, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)  # cublas_fp8's call


def _compile(fn: Callable, args: tuple) -> tuple[Callable, float]:
    """fn compiled for these arguments' shapes, and the seconds its first call took (the compile and autotuning)."""
    import torch._dynamo  # heavy: only where a cell runs

    compiled = torch.compile(fn, backend=BACKEND, mode=MODE, dynamic=False, fullgraph=True)
    # Dynamo keeps the graphs of one code object (_mm, _scaled_mm) together, one per shape, and refuses more than
    # recompile_limit (8) of them: with fullgraph=True the ninth shape of a sweep in one worker would be an error.
    # Compiling one graph per shape is the intent here, so the limit makes room for every shape compiled so far.
    limit = len(_COMPILED) + 1
    limits = dict(recompile_limit=max(torch._dynamo.config.recompile_limit, limit),
                  accumulated_recompile_limit=max(torch._dynamo.config.accumulated_recompile_limit, limit))  # fmt: skip
    start = time.perf_counter()
    try:
        with torch._dynamo.config.patch(**limits):
            compiled(*args)
        if args[0].is_cuda:
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any failure to compile is this cell's error, with its cause
        raise CompileError(f"torch.compile(mode={MODE!r}) failed: {_cause(exc)}") from exc
    return compiled, time.perf_counter() - start


def _cause(exc: BaseException) -> str:
    """'Type: first line' of what failed: a backend's own error rather than dynamo's wrapper of it, whose first
    line is only "backend='inductor' raised:"."""
    inner = getattr(exc, "inner_exception", None)  # torch._dynamo.exc.BackendCompilerFailed
    exc = inner if isinstance(inner, BaseException) else exc
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def _make(problem, inputs) -> Launch:
    if problem.dtype == "fp8":
        a, bt, sa, sb = inputs.scaled_mm_operands()
        if inputs.scaling == "tensor":
            # Inductor's scaled-mm templates load the scales at each output element's (m, n) and skip only size-1
            # dims: a per-tensor scale of shape (1,) failed to lower on torch 2.11 (H100); (1, 1) is
            # the same per-tensor scale to torch._scaled_mm
            sa, sb = sa.reshape(1, 1), sb.reshape(1, 1)
        fn, args = _scaled_mm, (a, bt, sa, sb, inputs.out_dtype)
    else:
        fn, args = _mm, (inputs.a, inputs.b)
    key = (problem.M, problem.N, problem.K, problem.dtype, problem.scaling, str(inputs.a.device))
    if key not in _COMPILED:
        _COMPILED[key] = _compile(fn, args)
    compiled, seconds = _COMPILED[key]
    with torch.compiler.set_stance("fail_on_recompile"):
        compiled(*args)  # these inputs (a stream-mode copy, say) run the compiled graph, or this raises
    config = {"mode": MODE, "dynamic": False, "compile_s": round(seconds, 3)}
    return Launch(fn=lambda: compiled(*args), config=config)


def _supports(problem, device) -> Optional[str]:
    if device.kind != "cuda":
        # Inductor would build a C++ matmul for the CPU: not what the GPU runs, and tens of seconds per shape
        return "torch.compile's GPU matmul needs a CUDA GPU (on a CPU Inductor builds a C++ matmul instead)"
    from torch.utils._triton import has_triton  # torch's own test of whether Inductor can emit GPU kernels here

    scaled = cublas.fp8_supports(problem.scaling)(problem, device) if problem.dtype == "fp8" else None
    if scaled and not scaled.startswith(ON_THE_GPU):  # a rule of the problem or the GPU: certain anywhere
        return scaled
    deferred = on_the_gpu(device, "whether its torch.compile can emit Triton")
    if deferred:
        return deferred
    if not has_triton():
        return "torch.compile's GPU code needs Triton, which this torch cannot use on this GPU"
    return scaled


register(
    Variant(
        "inductor_mm",
        "inductor",
        ("bf16", "fp16", "fp8"),
        f"torch.compile(mode={MODE!r}) of the cuBLAS baselines' matmul (fp8: torch._scaled_mm, tensor or row "
        "scales, bf16 out); compile time in config",
        _make,
        supports=_supports,
        scalings=("tensor", "row"),
        by_default=False,  # a max-autotune compile costs seconds a cell: only when --variants names it
    )
)
