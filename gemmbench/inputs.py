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
from typing import Any, Optional

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

    def act_fp32(self) -> torch.Tensor:
        """An fp32 copy of the activations with their scale applied: what an exact GEMM would see."""
        a = self.a.float()
        return a * self.a_scale if self.a_scale is not None else a

    def weight_fp32(self, expert: Optional[int] = None, rows: slice = slice(None)) -> torch.Tensor:
        """An fp32 copy of the weight's `rows` (of expert `expert`, MoE) with their scales applied: what an exact
        GEMM would see.  The check's reference asks for one expert, or one slice of rows, at a time."""
        # a copy of its own (copy=True: never the weight itself), so that the scale is applied in place: one fp32
        # buffer of the slice, not two
        if expert is None:
            w, scale = self.b[rows].to(torch.float32, copy=True), self.b_scale
            if scale is not None and scale.dim() == 2:  # row-wise: (N, 1), this slice's rows
                scale = scale[rows]
        else:  # MoE: one scale per expert
            w = self.b[expert, rows].to(torch.float32, copy=True)
            scale = self.b_scale[expert] if self.b_scale is not None else None
        return w.mul_(scale) if scale is not None else w

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 copies of a and the WHOLE b with their scales applied, for small problems (tests): a large MoE
        weight is tens of GiB in fp32; the check's reference dequantises one expert or slice at a time instead."""
        if self.b.dim() == 3:
            return self.act_fp32(), torch.stack([self.weight_fp32(e) for e in range(self.b.shape[0])])
        return self.act_fp32(), self.weight_fp32()

    def hit_experts(self) -> list[int]:
        """The (local) experts at least one slot is routed to, ascending; a slot of another rank (id -1) hits none."""
        if self.topk_ids is None:
            return []
        ids = self.topk_ids
        return [int(e) for e in torch.unique(ids[ids >= 0]).tolist()]

    def experts_hit(self) -> int:
        """Local experts hit (ids >= 0): 0 .. E/ep; a dense GEMM 1."""
        if self.topk_ids is None:
            return 1
        return len(self.hit_experts())

    def local_work(self) -> dict[str, int]:
        """What this rank computes, as metrics.flops and bytes_min take it: the local experts hit, the (token, slot)
        pairs routed to them and the tokens with at least one such pair (their rows of `a` are read).  Dense: {}."""
        if self.topk_ids is None:
            return {}
        local = self.topk_ids >= 0
        return {"experts_hit": self.experts_hit(), "pairs": int(local.sum()), "tokens": int(local.any(dim=1).sum())}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.a, self.b) if t is not None)

    def out_nbytes(self) -> int:
        """Bytes of the output a launch writes: (M, N), MoE (M * topk, N), in out_dtype."""
        rows = self.topk_ids.numel() if self.topk_ids is not None else self.a.shape[0]
        return rows * self.b.shape[-2] * (torch.finfo(self.out_dtype).bits // 8)


# Operands are drawn chunk by chunk straight into their compute dtype, so that a draw never holds more than one chunk
# in fp32: DeepSeek-V3's routed w13 (256 x 4096 x 7168) drawn whole in fp32 is 28 GiB (docs/GPU-FACTS.md §7) beside
# its 14 GiB of bf16.  An MoE weight: one expert per chunk (112 MiB of fp32 for that w13); a 2-D operand: slices of
# rows of at most DRAW_CHUNK_BYTES in fp32 (Llama3-70B's 57344 x 8192 gate_up, 1.75 GiB in fp32: 7 slices; most
# operands are one slice, drawn as before).
DRAW_CHUNK_BYTES = 256 << 20


def _values(shape: tuple[int, ...], K: int, gen: torch.Generator, device: str) -> torch.Tensor:
    # drawn on the device itself: a CPU draw of a 57344x8192 weight takes seconds per variant; in place: one fp32
    # buffer per chunk
    x = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
    return x.add_(1.0).div_(math.sqrt(K))


def _chunks(shape: tuple[int, ...]) -> list[tuple[Any, tuple[int, ...]]]:
    """The draw order, as (index into the operand, the chunk's shape): an (E, N, K) weight one expert after
    another; an (R, K) operand in slices of rows, first to last."""
    if len(shape) == 3:
        return [(e, shape[1:]) for e in range(shape[0])]
    rows, K = shape
    step = max(1, DRAW_CHUNK_BYTES // (4 * K))
    return [(slice(r, min(r + step, rows)), (min(step, rows - r), K)) for r in range(0, rows, step)]


def _amax(x: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """max |x| (over `dim`, kept) by one min/max reduction: x.abs() would be a second fp32 chunk."""
    lo, hi = torch.aminmax(x) if dim is None else torch.aminmax(x, dim=dim, keepdim=True)
    return torch.maximum(-lo, hi)


def _fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """The e4m3 scale that maps amax onto the top of the range (448); never 0, so that a scale divides."""
    top = dtypes.FP8.max_value
    assert top is not None  # a scaled dtype has a largest finite value
    return (amax.float() / top).clamp(min=1e-12)


def _fp8_values_(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale clamped to e4m3's range, in place: cast to fp8 by the caller (.to or copy_, the same rounding)."""
    top = dtypes.FP8.max_value
    assert top is not None
    return x.div_(scale).clamp_(-top, top)


def quantize_fp8(x: torch.Tensor, scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to e4m3 with scales from its real amax: "tensor" one scale (1,); "row" one per row
    (rows, 1); "expert" one per leading index of an (E, N, K) weight, shape (E,).  draw() quantises chunk by chunk
    to the same scales and values."""
    if scaling == "tensor":
        amax = x.abs().amax().reshape(1)
    elif scaling == "row":
        amax = x.abs().amax(dim=-1, keepdim=True)
    elif scaling == "expert":
        amax = x.abs().amax(dim=(1, 2))
    else:
        raise ValueError(f"unknown fp8 scaling {scaling!r}")
    scale = _fp8_scale(amax)
    view = scale.view(-1, 1, 1) if scaling == "expert" else scale
    return _fp8_values_(x.clone(), view).to(dtypes.FP8.torch), scale


def draw(
    shape: tuple[int, ...], K: int, gen: torch.Generator, device: str, dt: dtypes.DType, scaling: str
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(randn + 1) / sqrt(K) of `shape` in dt, drawn chunk by chunk (_chunks) from `gen`: at most one chunk of fp32
    at a time.  fp8 (dt.scaled): with scales laid out as `scaling` says, equal to quantize_fp8's on the whole operand
    of the same values ("tensor": the amax of every chunk, found by a first pass, the generator rewound for the
    second; "row": each row lies in one chunk; "expert": each expert is one chunk).  Returns (values, scales)."""
    out = torch.empty(shape, dtype=dt.torch, device=device)
    chunks = _chunks(shape)
    if not dt.scaled:
        for idx, cshape in chunks:
            out[idx].copy_(_values(cshape, K, gen, device))
        return out, None
    if scaling == "tensor":
        start = gen.get_state()
        amax = torch.zeros(1, dtype=torch.float32, device=device)
        for _, cshape in chunks:
            amax = torch.maximum(amax, _amax(_values(cshape, K, gen, device)))
        gen.set_state(start)  # the same values again, now quantised
        scale = _fp8_scale(amax)
        for idx, cshape in chunks:
            out[idx].copy_(_fp8_values_(_values(cshape, K, gen, device), scale))
        return out, scale
    if scaling == "row":
        scale = torch.empty(shape[:-1] + (1,), dtype=torch.float32, device=device)
        for idx, cshape in chunks:
            x = _values(cshape, K, gen, device)
            scale[idx] = _fp8_scale(_amax(x, dim=-1))
            out[idx].copy_(_fp8_values_(x, scale[idx]))
            del x  # gone before the next chunk is drawn: one fp32 chunk at a time
        return out, scale
    if scaling == "expert":
        if len(shape) != 3:
            raise ValueError(f"fp8 scaling 'expert' needs an (E, N, K) weight, not {shape}")
        scale = torch.empty(shape[0], dtype=torch.float32, device=device)
        for e, cshape in chunks:
            x = _values(cshape, K, gen, device)
            scale[e] = _fp8_scale(_amax(x))
            out[e].copy_(_fp8_values_(x, scale[e]))
            del x  # gone before the next expert is drawn: one fp32 chunk at a time
        return out, scale
    raise ValueError(f"unknown fp8 scaling {scaling!r}")


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
    """Fresh operands for a problem; `scaling` is the fp8 scale layout the variant consumes.  a, then b, drawn
    chunk by chunk (draw): since issue 18 a seed gives other values than the one fp32 draw per operand
    before it did, and the same ones again on the same device."""
    gen = torch.Generator(device=device).manual_seed(seed)
    M, N, K = problem.M, problem.N, problem.K
    b_shape = (problem.local_experts, N, K) if problem.is_moe else (N, K)
    dt = dtypes.get(problem.dtype)
    a, sa = draw((M, K), K, gen, device, dt, scaling)
    # MoE weights: one scale per expert, the layout fused MoE kernels consume
    b, sb = draw(b_shape, K, gen, device, dt, "expert" if problem.is_moe else scaling)
    topk_ids = topk_weights = None
    if problem.is_moe:
        # its own stream of random numbers: on the CPU, sharing `gen` would make the routing a copy of `a`
        topk_ids, topk_weights = route(
            M, problem.E, problem.topk, torch.Generator().manual_seed(seed + 7919), problem.routing
        )
        topk_ids = local_ids(topk_ids, problem.local_experts)
        topk_ids, topk_weights = topk_ids.to(device), topk_weights.to(device)
    out_dtype = dtypes.get(dt.out).torch
    return GemmInputs(a, b, out_dtype, sa, sb, scaling if dt.scaled else "none", topk_ids, topk_weights)


def cell_seed(seed: int, problem: Problem) -> int:
    """The seed of a problem's check inputs (timing uses the next one): each problem draws its own, and `gemmbench
    profile` and `layer` draw the same as `run` for the same --seed."""
    return seed + zlib.crc32(problem.label.encode()) % 10**6
