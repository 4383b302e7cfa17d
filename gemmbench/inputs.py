"""The only input factory: seeded, (randn+1)-style values, fp8 by real amax quantisation, MoE routing.

Values are (randn + 1) / sqrt(K) for both operands: a non-zero mean makes every output element
depend on every K term (a kernel that drops part of K is off by a large relative amount), and the
1/sqrt(K) scaling keeps outputs O(1) at any K, so one relative tolerance fits every shape.
Zeros are never used: they hide unwritten outputs and can run faster than real data.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Optional

import torch

from gemmbench import dtypes
from gemmbench.shapes import Problem

# name -> torch.dtype, read from the dtype table, for kernels/grouped_mm.py's probe
ROUTINGS = ("uniform", "skewed", "one-expert")
ZIPF_S = 1.2  # "skewed": expert e's prior load is proportional to 1 / (e + 1) ** ZIPF_S


@dataclass
class GemmInputs:
    """Operands of one problem, on one device.  MoE: b is (E, N, K) and the routing is set."""

    a: torch.Tensor  # (M, K) activations, compute dtype
    b: torch.Tensor  # (N, K) weight as nn.Linear stores it; MoE (E/ep, N, K): this rank's local experts
    out_dtype: torch.dtype  # fp8 GEMMs write bf16, 16-bit GEMMs their own dtype
    a_scale: Optional[torch.Tensor] = None  # fp8 only, fp32: (1,) per tensor or (M, 1) row-wise
    b_scale: Optional[torch.Tensor] = None  # fp8 only, fp32: (1,) per tensor or (N, 1) row-wise; MoE (E,)
    scaling: str = "none"  # "none" | "tensor" | "row"
    # MoE: (M, topk) int32 LOCAL expert of each (token, slot); -1 where another EP rank's expert holds the slot
    topk_ids: Optional[torch.Tensor] = None
    topk_weights: Optional[torch.Tensor] = None  # MoE: (M, topk) fp32 router weights

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 copies of a and b with their scales applied: what an exact GEMM would see."""
        a, b = self.a.float(), self.b.float()
        if self.a_scale is not None:
            a = a * self.a_scale
        if self.b_scale is not None:
            b = b * (self.b_scale.view(-1, 1, 1) if b.dim() == 3 else self.b_scale)
        return a, b

    def experts_hit(self) -> int:
        """Local experts hit (ids >= 0): 0 .. E/ep; a dense GEMM 1."""
        if self.topk_ids is None:
            return 1
        return int(torch.unique(self.topk_ids[self.topk_ids >= 0]).numel())

    def local_work(self) -> dict[str, int]:
        """What this rank computes, as metrics.flops and bytes_min take it: the local experts hit, the (token, slot)
        pairs routed to them and the tokens with at least one such pair (their rows of `a` are read).  Dense: {}."""
        if self.topk_ids is None:
            return {}
        local = self.topk_ids >= 0
        return {"experts_hit": self.experts_hit(), "pairs": int(local.sum()), "tokens": int(local.any(dim=1).sum())}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.a, self.b) if t is not None)


def _values(shape: tuple[int, ...], K: int, gen: torch.Generator, device: str) -> torch.Tensor:
    # drawn on the device itself: a CPU draw of a 57344x8192 weight takes seconds per variant
    x = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
    return (x + 1.0) / math.sqrt(K)


def quantize_fp8(x: torch.Tensor, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to e4m3 with scales from its real amax: "tensor" one scale (1,); "row" one per row
    (rows, 1); "expert" one per leading index of an (E, N, K) weight, shape (E,)."""
    if scaling == "tensor":
        amax = x.abs().amax().reshape(1)
    elif scaling == "row":
        amax = x.abs().amax(dim=-1, keepdim=True)
    elif scaling == "expert":
        amax = x.abs().amax(dim=(1, 2))
    else:
        raise ValueError(f"unknown fp8 scaling {scaling!r}")
    fp8 = dtypes.FP8
    top = fp8.max_value
    assert top is not None  # a scaled dtype has a largest finite value
    scale = (amax.float() / top).clamp(min=1e-12)
    view = scale.view(-1, 1, 1) if scaling == "expert" else scale
    q = (x / view).clamp(-top, top).to(fp8.torch)
    return q, scale


def route(
    M: int, E: int, topk: int, gen: torch.Generator, routing: str = "uniform"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits -> top-k distinct experts per token and their softmax weights (seeded, on the CPU).
    uniform:    logits ~ N(0, 1): every expert equally likely;
    skewed:     logits + log(Zipf prior): expert 0 draws the most tokens, expert E-1 the fewest
                (with E = 8, top-2: about 40% of the slots go to expert 0 and 2% to expert 7);
    one-expert: every token's first slot is expert 0 (the others are drawn as in uniform), so
                expert 0 carries all M tokens: the most unbalanced load a top-k router can give."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r} (known: {', '.join(ROUTINGS)})")
    logits = torch.randn((M, E), generator=gen, dtype=torch.float32)
    if routing == "skewed":
        prior = 1.0 / torch.arange(1, E + 1, dtype=torch.float32) ** ZIPF_S
        logits = logits + torch.log(prior / prior.sum())
    elif routing == "one-expert":
        logits[:, 0] = logits.max() + 10.0
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return ids.to(torch.int32), weights


def local_ids(global_ids: torch.Tensor, local_experts: int) -> torch.Tensor:
    """Global expert ids -> rank 0's local ids: rank 0 holds global experts 0 .. local_experts - 1, so they keep
    their id; a slot routed to another rank's expert becomes -1 (vLLM's expert_map).  Without EP every id stays."""
    return torch.where(global_ids < local_experts, global_ids, torch.full_like(global_ids, -1))


def make_inputs(problem: Problem, seed: int, device: str, scaling: str = "tensor") -> GemmInputs:
    """Fresh operands for a problem; `scaling` is the fp8 scale layout the variant consumes."""
    gen = torch.Generator(device=device).manual_seed(seed)
    M, N, K = problem.M, problem.N, problem.K
    b_shape = (problem.local_experts, N, K) if problem.is_moe else (N, K)
    a = _values((M, K), K, gen, device)
    b = _values(b_shape, K, gen, device)
    topk_ids = topk_weights = None
    if problem.is_moe:
        # its own stream of random numbers: on the CPU, sharing `gen` would make the routing a copy of `a`
        topk_ids, topk_weights = route(
            M, problem.E, problem.topk, torch.Generator().manual_seed(seed + 7919), problem.routing
        )
        topk_ids = local_ids(topk_ids, problem.local_experts)
        topk_ids, topk_weights = topk_ids.to(device), topk_weights.to(device)
    dt = dtypes.get(problem.dtype)
    out_dtype = dtypes.get(dt.out).torch
    if not dt.scaled:
        return GemmInputs(a.to(dt.torch), b.to(dt.torch), out_dtype, topk_ids=topk_ids, topk_weights=topk_weights)
    qa, sa = quantize_fp8(a, scaling)
    # MoE weights: one scale per expert, the layout fused MoE kernels consume
    qb, sb = quantize_fp8(b, "expert" if problem.is_moe else scaling)
    return GemmInputs(qa, qb, out_dtype, sa, sb, scaling, topk_ids, topk_weights)


def cell_seed(seed: int, problem: Problem) -> int:
    """The seed of a problem's check inputs (timing uses the next one): each problem draws its own, and `gemmbench
    profile` and `layer` draw the same as `run` for the same --seed."""
    return seed + zlib.crc32(problem.label.encode()) % 10**6
