"""The only input factory: seeded, (randn+1)-style values, fp8 by real amax quantisation, MoE routing.

Values are (randn + 1) / sqrt(K) for both operands: a non-zero mean makes every output element
depend on every K term (a kernel that drops part of K is off by a large relative amount), and the
1/sqrt(K) scaling keeps outputs O(1) at any K, so one relative tolerance fits every shape.
Zeros are never used: they hide unwritten outputs and can run faster than real data.

`run --inputs` may time on other values (VALUES: uniform, ones), since values move a GEMM's power and so its clocks;
the check, and the referee's refill of the activations (refill_activations_), always draw randn.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Optional

import torch

from gemmbench import dtypes
from gemmbench.shapes import Problem

# name -> torch.dtype, read from the dtype table, for gemmbench/kernels/grouped_mm.py's probe
ROUTINGS = ("uniform", "skewed", "one-expert")
ZIPF_S = 1.2  # "skewed": expert e's prior load is proportional to 1 / (e + 1) ** ZIPF_S
# The value distributions of `run --inputs`, each with mean 1 / sqrt(K) so that outputs stay O(1) at any K:
#   randn    (randn + 1) / sqrt(K), the default and the check's
#   uniform  U(0, 2) / sqrt(K)
#   ones     1 / sqrt(K) everywhere: the least switching activity, as all-ones test inputs have
VALUES = ("randn", "uniform", "ones")
DEFAULT_VALUES = "randn"


@dataclass
class GemmInputs:
    """Operands of one problem, on one device.  MoE: b is (E, N, K) and the routing is set."""

    a: torch.Tensor  # (M, K) activations, compute dtype
    b: torch.Tensor  # (N, K) weight as nn.Linear stores it; MoE (ceil(E/ep), N, K): this rank's local experts
    out_dtype: torch.dtype  # fp8 GEMMs write bf16, 16-bit GEMMs their own dtype
    # fp8 only, fp32: (1,) per tensor, (M, 1) row-wise, (M, ceil(K/128)) per 1x128 group (block scalings)
    a_scale: Optional[torch.Tensor] = None
    # fp8 only, fp32: (1,) per tensor, (N, 1) row-wise, (ceil(N/128), ceil(K/128)) per 128x128 block; MoE: (ceil(E/ep),)
    # one per expert, or (ceil(E/ep), ceil(N/128), ceil(K/128)) per block
    b_scale: Optional[torch.Tensor] = None
    scaling: str = "none"  # "none" (16-bit) or a name in dtypes.SCALINGS
    # MoE: (M, topk) int32 LOCAL expert of each (token, slot); -1 where another EP rank's expert holds the slot
    topk_ids: Optional[torch.Tensor] = None
    topk_weights: Optional[torch.Tensor] = None  # MoE: (M, topk) fp32 router weights

    @property
    def k_block(self) -> Optional[int]:
        """Columns of K one scale covers where the scales change along K (block scalings: 128), else None."""
        return dtypes.SCALINGS[self.scaling].k_block if self.scaling in dtypes.SCALINGS else None

    def scaled_mm_operands(self) -> tuple:
        """torch._scaled_mm's operands (a, b, scale_a, scale_b) of dense fp8 inputs, per tensor or row-wise: B
        column-major (the (N, K) weight's transpose, a view), row-wise weight scales as (1, N)."""
        sb = self.b_scale.reshape(1, -1) if self.scaling == "row" and self.b_scale is not None else self.b_scale
        return self.a, self.b.t(), self.a_scale, sb

    def act_fp32(self) -> torch.Tensor:
        """An fp32 copy of the activations with their scale applied: what an exact GEMM would see."""
        a = self.a.float()
        if self.a_scale is None:
            return a
        if self.k_block:  # (M, ceil(K/128)): each 1x128 group times its own scale, in place on the copy
            return scale_groups_(a, self.a_scale, self.k_block)
        return a * self.a_scale

    def weight_fp32(self, expert: Optional[int] = None, rows: slice = slice(None)) -> torch.Tensor:
        """An fp32 copy of the weight's `rows` (of expert `expert`, MoE) with their scales applied: what an exact
        GEMM would see.  The check's reference asks for one expert, or one slice of rows, at a time."""
        # a copy of its own (copy=True: never the weight itself), so that the scale is applied in place: one fp32
        # buffer of the slice, not two
        if expert is None:
            w, scale = self.b[rows].to(torch.float32, copy=True), self.b_scale
        else:  # MoE: one scale per expert, or its (ceil(N/128), ceil(K/128)) blocks
            w = self.b[expert, rows].to(torch.float32, copy=True)
            scale = self.b_scale[expert] if self.b_scale is not None else None
        if scale is None:
            return w
        if self.k_block:  # 128x128 blocks: the block row of each of the slice's rows, then per 128 columns of K
            block_rows = torch.arange(self.b.shape[-2], device=scale.device)[rows] // dtypes.BLOCK
            return scale_groups_(w, scale[block_rows], self.k_block)
        if scale.dim() == 2:  # row-wise: (N, 1), this slice's rows
            scale = scale[rows]
        return w.mul_(scale)

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
        """Local experts hit (ids >= 0): 0 .. ceil(E/ep); a dense GEMM 1."""
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


def _values(shape: tuple[int, ...], K: int, gen: torch.Generator, device: str, values: str = DEFAULT_VALUES
            ) -> torch.Tensor:  # fmt: skip
    # drawn on the device itself: a CPU draw of a 57344x8192 weight takes seconds per variant; in place: one fp32
    # buffer per chunk
    if values == "ones":
        return torch.full(shape, 1.0 / math.sqrt(K), dtype=torch.float32, device=device)
    if values == "uniform":
        x = torch.rand(shape, generator=gen, dtype=torch.float32, device=device)
        return x.mul_(2.0).div_(math.sqrt(K))
    if values != DEFAULT_VALUES:
        raise ValueError(f"unknown input values {values!r} (known: {', '.join(VALUES)})")
    x = torch.randn(shape, generator=gen, dtype=torch.float32, device=device)
    return x.add_(1.0).div_(math.sqrt(K))


def _chunks(shape: tuple[int, ...], align: int = 1) -> list[tuple[Any, tuple[int, ...]]]:
    """The draw order, as (index into the operand, the chunk's shape): an (E, N, K) weight one expert after
    another; an (R, K) operand in slices of rows, first to last, each a multiple of `align` rows (but the last)."""
    if len(shape) == 3:
        return [(e, shape[1:]) for e in range(shape[0])]
    rows, K = shape
    step = max(align, DRAW_CHUNK_BYTES // (4 * K) // align * align)
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


def _k_groups(x: torch.Tensor, width: int) -> list[tuple[slice, torch.Tensor]]:
    """x (R, K) as views (R, groups, width) of its full groups of `width` columns, then (R, 1, rest) of the partial
    last one, each with the columns of the (R, ceil(K/width)) scales it takes: no copy of x."""
    K = x.shape[1]
    full = K // width
    parts = []
    if full:
        parts.append((slice(0, full), x[:, : full * width].unflatten(1, (full, width))))
    if K % width:
        parts.append((slice(full, full + 1), x[:, full * width :].unsqueeze(1)))
    return parts


def scale_groups_(x: torch.Tensor, scales: torch.Tensor, width: int, divide: bool = False) -> torch.Tensor:
    """x (R, K) fp32 times (or / with divide) the scale of each of its groups of `width` columns, in place: scales
    (R, ceil(K/width)), one per row and group (a 128x128 block's scale repeated for each of its rows)."""
    for cols, view in _k_groups(x, width):
        s = scales[:, cols, None]
        view.div_(s) if divide else view.mul_(s)
    return x


def _block_quantize_(x: torch.Tensor, rows: int, width: int, ue8m0: bool) -> torch.Tensor:
    """x (R, K) fp32 -> its e4m3 values in place (to be cast by the caller), and returns the scales of its blocks of
    `rows` x `width` elements, (ceil(R/rows), ceil(K/width)), each from the block's own amax: a partial block at the
    edge (R or K not a multiple) has its own.  ue8m0: each scale rounded up to a power of two (DeepGEMM's recipe),
    so that amax / scale <= 448 still."""
    R, K = x.shape
    amax = torch.empty((R, -(-K // width)), dtype=torch.float32, device=x.device)
    for cols, view in _k_groups(x, width):
        lo, hi = torch.aminmax(view, dim=2)
        amax[:, cols] = torch.maximum(-lo, hi)
    if rows > 1:  # the rows of a block together; padded rows of 0 never raise an amax
        padded = torch.zeros((-(-R // rows) * rows, amax.shape[1]), dtype=torch.float32, device=x.device)
        padded[:R] = amax
        amax = padded.unflatten(0, (-1, rows)).amax(dim=1)
    scale = _fp8_scale(amax)
    if ue8m0:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    top = dtypes.FP8.max_value
    assert top is not None
    scale_groups_(x, scale.repeat_interleave(rows, dim=0)[:R], width, divide=True).clamp_(-top, top)
    return scale


def quantize_fp8_blocks(x: torch.Tensor, scaling: str, weight: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to e4m3 with the blocks of a block scaling (dtypes.SCALINGS): activations (M, K) per 1 x 128
    group, scales (M, ceil(K/128)); a weight (N, K) per 128 x 128 block, (ceil(N/128), ceil(K/128)); an MoE weight
    (E, N, K) per block of each expert, (E, ceil(N/128), ceil(K/128)).  draw() gives the same chunk by chunk."""
    sc = dtypes.scaling(scaling)
    rows, width = sc.weight_block if weight else sc.act_block
    assert rows is not None and width is not None, f"{scaling} is not a block scaling"
    q = x.float().clone()
    if q.dim() == 3:
        scales = torch.stack([_block_quantize_(q[e], rows, width, sc.ue8m0) for e in range(q.shape[0])])
    else:
        scales = _block_quantize_(q, rows, width, sc.ue8m0)
    return q.to(dtypes.FP8.torch), scales


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


ACT_SCALE_ROWS = 4  # the activations' block scales: columns of M padded to a multiple of 4 fp32 (16 bytes)


def act_block_scales(M: int, n_kb: int, device: str) -> torch.Tensor:
    """The (M, ceil(K/128)) block scales of activations, laid out column-major with each column padded to a multiple
    of ACT_SCALE_ROWS rows of 1.0 (strides (1, M_pad)): what quantisation kernels write for cuBLAS's, CUTLASS's and
    DeepGEMM's block-scaled GEMMs, so that none of them re-lays the scales inside a timed call (Triton kernels take
    any strides).  `act_scale_padded` gives the padded view."""
    m_pad = -(-M // ACT_SCALE_ROWS) * ACT_SCALE_ROWS
    return torch.ones((n_kb, m_pad), dtype=torch.float32, device=device).t()[:M]


def act_scale_padded(scale: torch.Tensor) -> torch.Tensor:
    """The (M_pad, ceil(K/128)) view of act_block_scales' storage, padded rows (scale 1.0) included."""
    M, n_kb = scale.shape
    m_pad = -(-M // ACT_SCALE_ROWS) * ACT_SCALE_ROWS
    if scale.stride() != (1, m_pad):
        raise ValueError(f"activation block scales of strides {scale.stride()}, expected (1, {m_pad})")
    return torch.as_strided(scale, (m_pad, n_kb), (1, m_pad))


def draw(
    shape: tuple[int, ...],
    K: int,
    gen: torch.Generator,
    device: str,
    dt: dtypes.DType,
    scaling: str,
    weight: bool = False,
    values: str = DEFAULT_VALUES,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(randn + 1) / sqrt(K) of `shape` in dt, drawn chunk by chunk (_chunks) from `gen`: at most one chunk of fp32
    at a time.  fp8 (dt.scaled): with scales laid out as `scaling` says, equal to quantize_fp8's on the whole operand
    of the same values ("tensor": the amax of every chunk, found by a first pass, the generator rewound for the
    second; "row": each row lies in one chunk; "expert": each expert is one chunk; a block scaling: equal to
    quantize_fp8_blocks', the blocks of an activation (`weight` False: 1 x 128) or a weight (128 x 128) in one chunk:
    a 2-D weight's chunks are whole blocks of 128 rows).  Returns (values, scales)."""
    out = torch.empty(shape, dtype=dt.torch, device=device)
    sc = dtypes.SCALINGS.get(scaling)
    block = sc is not None and sc.k_block is not None and dt.scaled
    chunks = _chunks(shape, dtypes.BLOCK if block and weight else 1)
    if not dt.scaled:
        for idx, cshape in chunks:
            out[idx].copy_(_values(cshape, K, gen, device, values))
        return out, None
    if block:
        assert sc is not None
        rows, width = sc.weight_block if weight else sc.act_block
        assert rows is not None and width is not None
        n_kb = -(-K // width)
        lead = (shape[0],) if len(shape) == 3 else ()
        if weight:
            scale = torch.empty(lead + (-(-shape[-2] // rows), n_kb), dtype=torch.float32, device=device)
        else:
            scale = act_block_scales(shape[0], n_kb, device)
        for idx, cshape in chunks:
            x = _values(cshape, K, gen, device, values)
            if len(shape) == 3:  # one expert
                scale[idx] = _block_quantize_(x, rows, width, sc.ue8m0)
            else:  # a slice of rows that starts on a block's first row (_chunks' alignment)
                scale[idx.start // rows : -(-idx.stop // rows)] = _block_quantize_(x, rows, width, sc.ue8m0)
            out[idx].copy_(x)
            del x  # gone before the next chunk is drawn: one fp32 chunk at a time
        return out, scale
    if scaling == "tensor":
        start = gen.get_state()
        amax = torch.zeros(1, dtype=torch.float32, device=device)
        for _, cshape in chunks:
            amax = torch.maximum(amax, _amax(_values(cshape, K, gen, device, values)))
        gen.set_state(start)  # the same values again, now quantised
        scale = _fp8_scale(amax)
        for idx, cshape in chunks:
            out[idx].copy_(_fp8_values_(_values(cshape, K, gen, device, values), scale))
        return out, scale
    if scaling == "row":
        scale = torch.empty(shape[:-1] + (1,), dtype=torch.float32, device=device)
        for idx, cshape in chunks:
            x = _values(cshape, K, gen, device, values)
            scale[idx] = _fp8_scale(_amax(x, dim=-1))
            out[idx].copy_(_fp8_values_(x, scale[idx]))
            del x  # gone before the next chunk is drawn: one fp32 chunk at a time
        return out, scale
    if scaling == "expert":
        if len(shape) != 3:
            raise ValueError(f"fp8 scaling 'expert' needs an (E, N, K) weight, not {shape}")
        scale = torch.empty(shape[0], dtype=torch.float32, device=device)
        for e, cshape in chunks:
            x = _values(cshape, K, gen, device, values)
            scale[e] = _fp8_scale(_amax(x))
            out[e].copy_(_fp8_values_(x, scale[e]))
            del x  # gone before the next expert is drawn: one fp32 chunk at a time
        return out, scale
    raise ValueError(f"unknown fp8 scaling {scaling!r}")


def route(
    M: int, E: int, topk: int, gen: torch.Generator, routing: str = "uniform", shared: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits -> top-k distinct experts per token and their softmax weights (seeded, on the CPU).
    shared:     the last `shared` of the E experts take every token (a shared expert folded into the routed ones,
                weight 1); the router picks the other topk - shared among the first E - shared as below.
    uniform:    logits ~ N(0, 1): every expert equally likely;
    skewed:     logits + log(Zipf prior): expert 0 draws the most tokens, expert E-1 the fewest
                (with E = 8, top-2: about 40% of the slots go to expert 0 and 2% to expert 7);
    one-expert: every token's first slot is expert 0 (the others are drawn as in uniform), so
                expert 0 carries all M tokens: the most unbalanced load a top-k router can give."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r} (known: {', '.join(ROUTINGS)})")
    if shared:
        ids, weights = route(M, E - shared, topk - shared, gen, routing)
        always = torch.arange(E - shared, E, dtype=torch.int32).expand(M, shared)
        return torch.cat([ids, always], dim=1), torch.cat([weights, torch.ones(M, shared)], dim=1)
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


def problem_routing(problem: Problem, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An MoE problem's routing for make_inputs(problem, seed) (on the CPU): rank 0's local expert ids (-1: another
    rank's) and the weights.  Its own stream of random numbers: on the CPU, sharing make_inputs' would make the
    routing a copy of `a`."""
    gen = torch.Generator().manual_seed(seed + 7919)
    ids, weights = route(problem.M, problem.E, problem.topk, gen, problem.routing, problem.shared_experts)
    return local_ids(ids, problem.local_experts), weights


def make_inputs(
    problem: Problem, seed: int, device: str, scaling: Optional[str] = None, values: str = DEFAULT_VALUES
) -> GemmInputs:
    """Fresh operands for a problem; `scaling` is the fp8 scale layout (default: the problem's), `values` their
    distribution (VALUES).  a, then b, drawn chunk by chunk (draw), so a seed gives other values than one fp32 draw
    per operand would, and the same ones again on the same device."""
    gen = torch.Generator(device=device).manual_seed(seed)
    scaling = scaling or problem.scaling
    M, N, K = problem.M, problem.N, problem.K
    b_shape = (problem.local_experts, N, K) if problem.is_moe else (N, K)
    dt = dtypes.get(problem.dtype)
    a, sa = draw((M, K), K, gen, device, dt, scaling, values=values)
    # MoE weights: one scale per expert (tensor, row: the layout fused MoE kernels consume), or per block of each
    blocks = scaling in dtypes.SCALINGS and dtypes.SCALINGS[scaling].k_block is not None
    b_scaling = "expert" if problem.is_moe and not blocks else scaling
    b, sb = draw(b_shape, K, gen, device, dt, b_scaling, weight=True, values=values)
    topk_ids = topk_weights = None
    if problem.is_moe:
        topk_ids, topk_weights = problem_routing(problem, seed)
        topk_ids, topk_weights = topk_ids.to(device), topk_weights.to(device)
    out_dtype = dtypes.get(dt.out).torch
    return GemmInputs(a, b, out_dtype, sa, sb, scaling if dt.scaled else "none", topk_ids, topk_weights)


def refill_activations_(inputs: GemmInputs, seed: int) -> None:
    """New randn activations (and their fp8 scales) for `seed`, written into the tensors `inputs` already holds, at
    the same addresses: a launch made before still reads them, and whatever it kept from the old values (a cache by
    address, work done in make()) is then stale.  The weights and the routing stay as they are."""
    M, K = inputs.a.shape
    gen = torch.Generator(device=inputs.a.device).manual_seed(seed)
    dt = next(d for d in dtypes.ALL.values() if d.torch == inputs.a.dtype)
    a, sa = draw((M, K), K, gen, str(inputs.a.device), dt, inputs.scaling)
    inputs.a.copy_(a)
    if sa is not None and inputs.a_scale is not None:
        inputs.a_scale.copy_(sa)


def cell_seed(seed: int, problem: Problem) -> int:
    """The seed of a problem's check inputs (timing uses the next one): each problem draws its own, and `gemmbench
    profile` and `layer` draw the same as `run` for the same --seed.  Both fp8 accumulation contracts of a problem
    draw the same inputs, so that their rows' errors compare."""
    same = problem.with_(fp8_accum=dtypes.fp8_accum(problem.dtype))  # the precise label: seeds as before contracts
    return seed + zlib.crc32(same.label.encode()) % 10**6
