"""Correctness before timing: `check_cell()`, the one check every path runs (run, tune, profile, layer and the tests):
make the launch, poison its output, launch it once, compare with an fp32 reference on the dequantised inputs; one
tolerance table (gemmbench/dtypes.py; fast fp8 accumulation: dtypes.tolerance against cuBLAS fast's own error on the
same inputs, `cell_tolerance` here), and a report that says where and by how much a result is wrong."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from gemmbench import dtypes
from gemmbench.measure import memory, nvtx_ranges
from gemmbench.measure.inputs import GemmInputs
from gemmbench.shapes import Problem


@dataclass
class CheckResult:
    ok: bool
    max_rel_err: float
    detail: str  # empty when ok; otherwise where and how much
    note: str = ""  # how the tolerance was chosen where the report must say so (fast accumulation without cuBLAS's)


def reference(problem: Problem, inputs: GemmInputs) -> torch.Tensor:
    """fp32 result on the dequantised inputs (TF32 off).  MoE: one row per (token, slot), (M*topk, N).

    Sized to fit beside the inputs (DeepSeek-V3's w13, 256 experts of 4096 x 7168, is 28 GiB in fp32): at
    most one expert's fp32 weight, or one slice of its rows, exists at a time (`_product`), and an expert no slot is
    routed to is never dequantised.  A slot routed to another rank's expert (id -1) is not computed: its row stays 0,
    and the check does not compare it."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a = inputs.act_fp32()  # (M, K)
        if not problem.is_moe:
            return _product(a, inputs, None)
        return _per_expert(problem, inputs, torch.float32, lambda rows, e: _product(a[rows], inputs, e))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def _per_expert(problem: Problem, inputs: GemmInputs, dtype: torch.dtype, product: Callable) -> torch.Tensor:
    """An MoE result, one row per (token, slot), (M*topk, N): product(token rows, expert) for each expert hit, in a
    plain loop (the reference must be obviously right); a slot of another rank's expert stays 0."""
    assert inputs.topk_ids is not None  # an MoE problem's inputs are routed
    ids = inputs.topk_ids.reshape(-1)  # (M*topk,): slot s is token s // topk's (s % topk)-th expert
    out = torch.zeros((ids.numel(), problem.N), dtype=dtype, device=inputs.a.device)
    for e in inputs.hit_experts():
        slots = (ids == e).nonzero(as_tuple=True)[0]
        out[slots] = product(slots // problem.topk, e)
    return out


def _product(a: torch.Tensor, inputs: GemmInputs, expert: Optional[int]) -> torch.Tensor:
    """a (rows, K) fp32 @ the dequantised weight (of `expert`, MoE) transposed: (rows, N) fp32.  The weight is
    dequantised in slices of its N rows, as many as fit in half the memory free now (memory.free_bytes; the other
    half for the matmul's workspace and the allocator's leftovers): each slice costs 4 bytes per element of the
    weight's rows and of their (rows, slice) product."""
    n, k = inputs.b.shape[-2], inputs.b.shape[-1]
    out = torch.empty((a.shape[0], n), dtype=torch.float32, device=a.device)
    step = max(1, memory.free_bytes(str(a.device)) // 2 // (4 * (k + a.shape[0])))
    for n0 in range(0, n, step):
        n1 = min(n0 + step, n)
        w = inputs.weight_fp32(expert, slice(n0, n1))  # (n1 - n0, K) fp32
        out[:, n0:n1] = a @ w.t()
        del w  # freed before the next slice is dequantised: never two at once
    return out


def owned_rows(inputs: GemmInputs) -> Optional[torch.Tensor]:
    """The output rows this rank computes, as compare() takes them: an MoE problem's (token, slot) rows routed to a
    local expert (topk_ids >= 0; under expert parallelism the other rows are another rank's work); None: all."""
    return None if inputs.topk_ids is None else inputs.topk_ids.reshape(-1) >= 0


def compare(
    problem: Problem,
    out: torch.Tensor,
    ref: torch.Tensor,
    rows: Optional[torch.Tensor] = None,
    tol: Optional[float] = None,
) -> CheckResult:
    """`out` against the fp32 `ref`, in the dtype's error measure.  rows: (out rows,) bool, the rows to compare
    (owned_rows); the others are neither compared nor part of max|ref| (the reference need not compute them, a
    kernel need not write them).  No row to compare is a pass: this rank has no work.  tol: the budget (cell_tolerance);
    None: the dtype's."""
    tol = dtypes.tolerance(problem.dtype) if tol is None else tol  # the error measure and its budgets: dtypes.py
    if tuple(out.shape) != tuple(ref.shape):
        return CheckResult(False, float("inf"), f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    out = out.float()
    keep = torch.ones_like(ref, dtype=torch.bool) if rows is None else rows.to(ref.device).view(-1, 1).expand_as(ref)
    if not bool(keep.any()):
        return CheckResult(True, 0.0, "")
    scale = torch.where(keep, ref, torch.zeros_like(ref)).abs().max().clamp(min=1e-30)
    nan = ~torch.isfinite(out) & keep
    err = torch.where(keep, (out - ref).abs() / scale, torch.zeros_like(ref))
    err = torch.where(nan, torch.full_like(err, float("inf")), err)
    max_err = float(err.max())
    if max_err <= tol:
        return CheckResult(True, max_err, "")
    bad = err > tol
    rows, cols = bad.nonzero(as_tuple=True)
    r0, c0 = int(rows[0]), int(cols[0])
    worst = int(err.argmax())
    wr, wc = divmod(worst, out.shape[1])
    parts = [f"{int(bad.sum())} of {int(keep.sum())} outputs off by more than {tol:g} of max|ref|"]
    if nan.any():
        parts.append(f"{int(nan.sum())} non-finite (unwritten outputs stay NaN)")
    parts.append(
        f"rows {int(rows.min())}..{int(rows.max())}, cols {int(cols.min())}..{int(cols.max())}; "
        f"first at [{r0},{c0}]; worst at [{wr},{wc}]: got {float(out[wr, wc]):.4g}, want {float(ref[wr, wc]):.4g}"
    )
    return CheckResult(False, max_err, "; ".join(parts))


def _fast_mm(a: torch.Tensor, bt: torch.Tensor, sa, sb, out_dtype) -> torch.Tensor:
    return torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=out_dtype, use_fast_accum=True)


def _cublas_fast(problem: Problem, inputs: GemmInputs) -> torch.Tensor:
    """cuBLAS fast accumulation's output on these inputs, laid out as `reference`'s: dense, one _scaled_mm; MoE (per
    tensor: one scale per expert), one per expert hit over its slots' rows, as the reference loops."""
    if not problem.is_moe:
        a, bt, sa, sb = inputs.scaled_mm_operands()
        return _fast_mm(a, bt, sa, sb, inputs.out_dtype)
    b_scale = inputs.b_scale
    assert b_scale is not None  # a per-tensor fp8 problem's: one scale per expert

    def expert(rows: torch.Tensor, e: int) -> torch.Tensor:
        scale = b_scale[e : e + 1].clone()  # a tensor of its own: cuBLASLt wants its scales 16-byte aligned
        return _fast_mm(inputs.a[rows].contiguous(), inputs.b[e].t(), inputs.a_scale, scale, inputs.out_dtype)

    return _per_expert(problem, inputs, inputs.out_dtype, expert)


def cublas_fast_error(problem: Problem, inputs: GemmInputs, ref: torch.Tensor) -> tuple[Optional[float], str]:
    """(cuBLAS fast accumulation's own max_rel_err on these inputs against `ref`, "") where torch._scaled_mm with
    use_fast_accum=True runs them (a CUDA GPU; dense per tensor or row-wise, MoE per tensor), else (None, why not)."""
    if not inputs.a.is_cuda:
        return None, "needs a CUDA GPU (this is the CPU path)"
    if problem.scaling not in (("tensor",) if problem.is_moe else ("tensor", "row")):
        return None, f"has no call for {problem.scaling}-scaled {'MoE ' if problem.is_moe else ''}fp8"
    try:
        out = _cublas_fast(problem, inputs)
    except Exception as exc:  # noqa: BLE001 - a shape or GPU cuBLAS fp8 refuses: the fp8 tolerance stands
        if "CUDA error" in str(exc) or isinstance(exc, getattr(torch, "AcceleratorError", ())):
            raise  # a fault leaves the context unusable: the cell's error, not a looser check
        return None, f"could not be measured ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
    err = compare(problem, out, ref, owned_rows(inputs), tol=float("inf")).max_rel_err
    if not math.isfinite(err):  # an inf or NaN from cuBLAS would make any output pass
        return None, f"was not finite ({err})"
    return err, ""


def cell_tolerance(problem: Problem, inputs: GemmInputs, ref: torch.Tensor) -> tuple[float, str, bool]:
    """(the check's budget for this cell, the words that say where it came from, whether the report must say so):
    the dtype's; for fast fp8 accumulation dtypes.tolerance of cuBLAS fast's own error on the same inputs, or the fp8
    tolerance where that cannot be measured (then the report says so)."""
    if problem.fp8_accum != dtypes.FAST_FP8_ACCUM:
        return dtypes.tolerance(problem.dtype), "", False
    base = dtypes.tolerance(problem.dtype)
    err, why_not = cublas_fast_error(problem, inputs, ref)
    tol = dtypes.tolerance(problem.dtype, problem.fp8_accum, err)
    if err is None:
        why = f"fast accumulation checked against the fp8 tolerance {tol:g}: cuBLAS fast's own error {why_not}"
        return tol, why, True
    words = f"max(fp8's {base:g}, {dtypes.FAST_ACCUM_ERR_FACTOR:g} x cuBLAS fast's {err:.3g})"
    return tol, f"fast accumulation tolerance {tol:.3g} = {words}", False


def poison(out: Optional[torch.Tensor]) -> None:
    """Fill an output buffer with NaN so that any tile a kernel forgets to write fails the check."""
    if out is not None:
        out.fill_(float("nan"))


class CellError(RuntimeError):
    """A cell failed before it could be compared: `phase` is where ("make": setup, "check": the launch)."""

    def __init__(self, phase: str, exc: BaseException):
        super().__init__(f"{phase}: {exc}")
        self.phase, self.exc = phase, exc


@dataclass
class CellCheck:
    result: CheckResult
    launch: Any  # registry.Launch: what make() returned, ready to be timed
    out: Any  # the checked output


def check_cell(
    problem: Problem,
    variant: Any,
    inputs: GemmInputs,
    *,
    launch: Any = None,
    ref: Optional[torch.Tensor] = None,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> CellCheck:
    """The one check: `variant.make` (unless `launch` is given), its output filled with NaN, exactly one launch inside
    the NVTX range "check <cell>", then the variant's own check or the comparison with the fp32 reference (`ref` when
    the caller shares one across candidates, as tuning does) on the rows this rank owns (owned_rows: under expert
    parallelism, the slots of its local experts).  Raises CellError naming the phase that failed."""
    name = getattr(variant, "name", None) or "config"
    try:
        on_phase("make")
        launch = launch if launch is not None else variant.make(problem, inputs)
        if not callable(getattr(launch, "fn", None)):  # a plugin's make() that forgot its Launch: say so, by name
            where = f" ({variant.source})" if getattr(variant, "source", "builtin") != "builtin" else ""
            raise TypeError(f"{name}.make(){where} returned {type(launch).__name__}, not a gemmbench.registry.Launch")
    except Exception as exc:
        raise CellError("make", exc) from exc
    try:
        on_phase("check")
        poison(launch.out)
        rng = nvtx_ranges.range_name("check", nvtx_ranges.cell_name(name, problem))
        with nvtx_ranges.annotate(rng):  # exactly one call inside
            out = launch.fn()
            if inputs.a.is_cuda:
                torch.cuda.synchronize()
    except Exception as exc:
        raise CellError("check", exc) from exc
    own = getattr(variant, "check", None)
    if own is not None:  # not a GEMM output (moe_align): the variant's own check
        return CellCheck(own(problem, inputs, out), launch, out)
    ref = ref if ref is not None else reference(problem, inputs)
    tol, basis, say = cell_tolerance(problem, inputs, ref)
    result = compare(problem, out, ref, owned_rows(inputs), tol)
    if basis and not result.ok:
        result.detail += f" ({basis})"
    result.note = basis if say else ""
    return CellCheck(result, launch, out)
