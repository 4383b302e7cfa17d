"""The MoE block alignment step, and its own variant row (`moe_align`) so that its cost is visible.

A fused MoE GEMM multiplies (token, slot) rows grouped by expert, BLOCK_M rows at a time, each block
belonging to one expert.  From topk_ids (M, topk) of E local experts (ids 0 .. E-1; -1: a slot another
expert-parallel rank computes, which gets no row, no block and no padding here) this builds:
  sorted_ids    (max_padded,) int32: slot ids (token * topk + k) sorted by expert (stable: ascending slot
                within an expert), each expert's segment padded to a multiple of BLOCK_M with the
                sentinel M * topk (a row the kernel neither reads nor writes);
  block_expert  (max_padded / BLOCK_M,) int32: the expert of each block, -1 past the padded count;
  num_padded    (1,) int32: the padded count (sum over experts of their count rounded up to BLOCK_M).
max_padded = M * topk + E * (BLOCK_M - 1), rounded up to BLOCK_M: a bound that needs no count on the host
(under expert parallelism it also covers the -1 slots, whose extra blocks lie past num_padded),
so the step never syncs with the host and can be captured in a CUDA graph; the kernel's programs past
num_padded return at once.  Written with torch ops (scatter_add, a stable argsort, searchsorted).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from gemmbench.measure.check import CheckResult
from gemmbench.registry import Launch, Variant, register


@dataclass
class Alignment:
    sorted_ids: torch.Tensor
    block_expert: torch.Tensor
    num_padded: torch.Tensor
    block_m: int


def moe_align(topk_ids: torch.Tensor, E: int, block_m: int) -> Alignment:
    flat = topk_ids.reshape(-1).long()
    T = flat.numel()
    dev = flat.device
    # a -1 slot (another rank's expert) is filed under bucket E: sorted after every local expert, never placed
    bucket = torch.where(flat >= 0, flat, E)
    counts = torch.zeros(E + 1, dtype=torch.long, device=dev).scatter_add_(0, bucket, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m  # bucket E's entry is never read: it has no segment
    ends = torch.cumsum(padded, 0)
    order = torch.argsort(bucket, stable=True)  # slots grouped by expert, ascending within one
    experts = bucket[order]
    rank = torch.arange(T, device=dev) - (torch.cumsum(counts, 0) - counts)[experts]
    blocks = triton.cdiv(T + E * (block_m - 1), block_m)
    # one slot past the end takes the writes of bucket E's slots: dropping them by a boolean mask would need their
    # count on the host (a sync)
    dump = blocks * block_m
    sorted_ids = torch.full((dump + 1,), T, dtype=torch.int32, device=dev)
    where = torch.where(experts < E, (ends - padded)[experts] + rank, dump)
    sorted_ids[where] = order.to(torch.int32)
    sorted_ids = sorted_ids[:dump]
    ends = ends[:E]
    starts = torch.arange(blocks, device=dev) * block_m
    block_expert = torch.searchsorted(ends, starts, right=True)  # E for blocks past the last expert's
    block_expert = torch.where(block_expert < E, block_expert, -1).to(torch.int32)
    return Alignment(sorted_ids, block_expert, ends[-1:].to(torch.int32), block_m)


def check_alignment(topk_ids: torch.Tensor, E: int, a: Alignment) -> CheckResult:
    """The alignment against a plain per-expert loop: same padded count, every block's slots belong
    to its expert in ascending order, every local slot exactly once (a -1 slot nowhere: it matches no expert of
    the loop), padding only at segment ends."""
    ids = topk_ids.reshape(-1).tolist()
    T, bm = len(ids), a.block_m
    want, want_experts = [], []
    for e in range(E):
        seg = [s for s in range(T) if ids[s] == e]
        seg += [T] * (-len(seg) % bm)
        want += seg
        want_experts += [e] * (len(seg) // bm)
    got = a.sorted_ids.tolist()
    got_experts = a.block_expert.tolist()
    n = int(a.num_padded.item())
    problems = []
    if n != len(want):
        problems.append(f"padded count {n}, expected {len(want)}")
    elif got[:n] != want or got_experts[: n // bm] != want_experts:
        problems.append("sorted ids or block experts differ from the per-expert loop")
    if any(x != T for x in got[n:]) or any(x != -1 for x in got_experts[n // bm :]):
        problems.append("entries past the padded count are not the sentinel")
    return CheckResult(not problems, 0.0 if not problems else float("inf"), "; ".join(problems))


def block_m_for(M: int, topk: int, E: int) -> int:
    """vLLM's rule of thumb: a block no larger than the average rows per expert needs (16 .. 64)."""
    rows = M * topk / E
    return 16 if rows <= 16 else (32 if rows <= 64 else 64)


def _make(problem, inputs) -> Launch:
    bm = block_m_for(problem.M, problem.topk, problem.E)
    return Launch(fn=lambda: moe_align(inputs.topk_ids, problem.local_experts, bm), config={"BLOCK_M": bm})


def _check(problem, inputs, result: Alignment) -> CheckResult:
    return check_alignment(inputs.topk_ids, problem.local_experts, result)


register(
    Variant(
        "moe_align",
        "moe_align",
        ("fp16", "bf16", "fp8"),
        "MoE block alignment alone (torch ops, no host sync): slots sorted by expert, each expert padded to "
        "BLOCK_M, one expert per block; the fused MoE rows do not include it (one alignment serves a layer's GEMMs)",
        _make,
        moe=True,
        check=_check,
        gemm=False,
        by_default=False,  # not a GEMM: the step before the fused kernels, timed when named
    )
)
