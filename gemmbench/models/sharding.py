"""How one GPU of a deployment sees each GEMM of a model: the engines' sharding rules, one per layer kind.

The flags mean what they mean to vLLM: `tp` GPUs share each attention and dense layer, `dp` such groups each
serve their own M tokens, world = tp x dp GPUs in all.  Expert GEMMs spread over the whole world: `ep` ranks
hold whole experts, and each expert is split over experts_tp = world / ep GPUs (vLLM's FusedMoEParallelConfig:
without expert parallelism its experts' TP is tp x dp; with it, EP is tp x dp and the experts' TP 1).  The ranks
of a DP group route their M tokens together, so an expert GEMM sees M x dp tokens.  The benchmarked rank is rank
0 of every group.

| layer kind (`parallel`, `role`) | how one rank sees it                                  | vLLM class              |
|---------------------------------|-------------------------------------------------------|-------------------------|
| qkv                             | heads/tp query heads, kv_heads/tp KV heads, or 1 KV   | QKVParallelLinear       |
|                                 | head (copied) when tp >= kv_heads                     |                         |
| column                          | N/tp (each fused part divided)                        | (Merged)ColumnParallel  |
| row                             | K/tp                                                  | RowParallelLinear       |
| none                            | whole                                                 | ReplicatedLinear        |
| vocab                           | vocab padded to `pad_to` (64), then /tp               | ParallelLMHead          |
| column/row with E > 1 (experts) | N or K / experts_tp; ceil(E/ep) local experts on rank | FusedMoE                |
|                                 | 0 (vLLM's linear expert map); M x dp tokens routed    |                         |

Sequence-parallel MoE (vLLM's ParallelConfig.use_sequence_parallel_moe, vllm-project/vllm 00193b8: its default
all2all backend, allgather_reducescatter, is one of those that turn it on): with experts parallel (EP = world), TP > 1
and DP > 1, a model whose MoE blocks chunk (the set's `moe_sequence_parallel`) splits its DP rank's M tokens across
the TP ranks before the router, each rank taking ceil(M/TP).  Its router and shared experts run on that share, the
shared experts whole (`disable_tp`), and its expert GEMMs on every world rank's share gathered: world x ceil(M/TP)
tokens.  Attention and dense layers are untouched.  Which model files chunk is written where the sets are made
(gemmbench.models.hf_families, MOE_SEQUENCE_PARALLEL).

Layouts (which GEMMs an engine launches; `parts` and `fold_shared` in the shape set say what can change):
  vllm   the set as written: QKV, gate+up and DeepSeek's q_a+kv_a fused.
  sglang the same, and under DP attention (dp > 1) the dense MLPs, shared experts, router and LM head run at the
         world's TP on the M x dp tokens gathered from the DP ranks (SGLang's --tp is the world); DeepSeek-V3's
         shared expert folded into the routed experts (`fold_shared`: E 257, top 9) where EP is 1.
  hf     the checkpoint's own tensors (each fused GEMM split into its `parts`), one GPU only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from gemmbench import dtypes
from gemmbench.shapes import Gemm, Problem, ShapeError, ShapeSet, _is_int, _positive

LAYOUTS = ("vllm", "sglang", "hf")
DEFAULT_LAYOUT = "vllm"
VOCAB_PADDING = 64  # vLLM's and SGLang's DEFAULT_VOCAB_PADDING_SIZE: the LM head's rows, padded before TP divides
# the GEMMs SGLang runs at the world's TP on the DP ranks' gathered tokens under DP attention
_WORLD_ROLES = ("mlp", "shared_expert", "router")


@dataclass(frozen=True)
class Parallel:
    """A deployment as the flags give it: --tp, --dp, --ep, --layout."""

    tp: int = 1
    dp: int = 1
    ep: int = 1
    layout: str = DEFAULT_LAYOUT

    @property
    def world(self) -> int:
        return self.tp * self.dp

    @property
    def experts_tp(self) -> int:
        """The GPUs one expert is split over: world / ep (check() makes it whole)."""
        return self.world // self.ep

    def describe(self) -> str:
        return f"TP {self.tp} x DP {self.dp} = {self.world} GPUs, EP {self.ep}, layout {self.layout}"

    def sequence_parallel_moe(self, model_chunks: bool) -> bool:
        """vLLM's ParallelConfig.use_sequence_parallel_moe (its default all2all backend is one that chunks) for a
        model whose MoE blocks chunk (ShapeSet.moe_sequence_parallel): experts parallel, TP > 1 and DP > 1."""
        return model_chunks and self.layout == "vllm" and self.ep > 1 and self.tp > 1 and self.dp > 1


@dataclass(frozen=True)
class RankGemm:
    """One GEMM as rank 0 runs it: `gemm` with its N and K divided (E, topk as routed), the factor on M (dp where
    the DP ranks' tokens are gathered, else 1; the world's ranks under sequence-parallel MoE), whether M is first
    chunked across TP (ceil(M/TP): a sequence-parallel MoE block) and its EP degree (1 for a dense GEMM)."""

    gemm: Gemm
    m_factor: int
    ep: int
    shared_experts: int = 0  # experts every token is routed to (a folded shared expert), the last of E
    chunked: bool = False

    def tokens(self, m: int, tp: int) -> int:
        """The tokens this GEMM sees when a DP rank has m."""
        return self.m_factor * (-(-m // tp) if self.chunked else m)


def check(par: Parallel, name: str, expert_counts: Sequence[int]) -> None:
    """The deployment is one the layout's engine can run on this set (`expert_counts`: the E of its expert GEMMs);
    else a one-line ShapeError."""
    has_experts = bool(expert_counts)
    for flag, value in (("tp", par.tp), ("dp", par.dp), ("ep", par.ep)):
        if not _is_int(value) or value < 1:
            raise ShapeError(f"--{flag} must be a positive integer, got {value!r}")
    if par.layout not in LAYOUTS:
        raise ShapeError(f"--layout {par.layout!r}: choose from {', '.join(LAYOUTS)}")
    if par.layout == "hf" and par.world * par.ep > 1:
        raise ShapeError(f"--layout hf is the checkpoint's own tensors on one GPU: it takes no --tp, --dp or --ep "
                         f"above 1 (got TP {par.tp}, DP {par.dp}, EP {par.ep})")  # fmt: skip
    if par.ep > 1 and not has_experts:
        raise ShapeError(f"{name}: --ep {par.ep} needs expert GEMMs (E > 1), and this set has none")
    if par.world % par.ep:
        raise ShapeError(f"{name}: --ep {par.ep} does not divide the TP {par.tp} x DP {par.dp} = {par.world} GPUs "
                         "the experts are spread over")  # fmt: skip
    if par.layout == "vllm" and par.ep not in (1, par.world):
        raise ShapeError(f"{name}: vLLM runs experts split over all TP x DP = {par.world} GPUs (EP 1) or whole, one "
                         f"set a GPU (EP = TP x DP = {par.world}); --ep {par.ep} with --tp {par.tp} --dp {par.dp} is "
                         "neither (--layout sglang takes any EP that divides TP x DP)")  # fmt: skip
    uneven = sorted({e for e in expert_counts if e % par.ep})
    if par.layout == "sglang" and uneven:  # SGLang's start-up check (vLLM gives the first ranks one expert more)
        raise ShapeError(f"{name}: SGLang places the same number of experts on every GPU, and {uneven[0]} experts "
                         f"do not divide by --ep {par.ep}")  # fmt: skip


def experts(shape_set: ShapeSet) -> tuple[int, ...]:
    """The expert counts of the set's expert GEMMs (none for a dense set)."""
    return tuple(g.E for g in shape_set.gemms if g.is_moe)


def for_layout(gemms: tuple[Gemm, ...], par: Parallel) -> list[Gemm]:
    """The GEMMs the layout's engine launches, in the set's order (see the module docstring)."""
    if par.layout == "hf":
        return [part for g in gemms for part in split_parts(g)]
    if par.layout == "sglang" and par.ep == 1:
        fold = max((g.fold_shared for g in gemms), default=0)
        if fold:  # the shared expert becomes expert E of the routed ones: its own GEMMs are not launched
            return [fold_shared(g) for g in gemms if g.role != "shared_expert"]
    return list(gemms)


def split_parts(g: Gemm) -> list[Gemm]:
    """A fused GEMM as the checkpoint's tensors (one GEMM per part, same K, E and role); an unfused one as it is."""
    if not g.parts:
        return [g]
    return [replace(g, name=name, N=n, parallel=_part_parallel(g), parts=(), heads=0, kv_heads=0, head_dim=0)
            for name, n in g.parts]  # fmt: skip


def _part_parallel(g: Gemm) -> str:
    return "column" if g.parallel == "qkv" else g.parallel


def fold_shared(g: Gemm) -> Gemm:
    """SGLang's shared-expert fusion: its expert GEMMs route every token to the shared expert(s) as well."""
    if not g.is_moe or not g.fold_shared:
        return g
    return replace(g, E=g.E + g.fold_shared, topk=g.topk + g.fold_shared)


def shard(g: Gemm, par: Parallel, name: str, sequence_parallel: bool = False) -> RankGemm:
    """Rank 0's view of GEMM `g` (already in the layout's form) under `par`; a one-line ShapeError naming the set
    (`name`), the GEMM and the numbers where the engine would refuse it.  `sequence_parallel`: the MoE blocks run
    sequence-parallel (Parallel.sequence_parallel_moe)."""
    where = f"{name}: {g.name}"
    if sequence_parallel and g.is_moe:  # every rank of the world sends its TP share of its DP rank's tokens
        return RankGemm(_divide(g, par.experts_tp, where), par.world, par.ep, chunked=True)
    if sequence_parallel and g.role == "router":  # on this rank's share, replicated as ever
        return RankGemm(g, 1, 1, chunked=True)
    if sequence_parallel and g.role == "shared_expert":  # on this rank's share, whole (vLLM's disable_tp)
        return RankGemm(g, 1, 1, chunked=True)
    if g.is_moe:
        # rank 0's experts: Problem.local_experts, vLLM's linear expert map (the first E % ep ranks hold one more)
        shared = g.fold_shared if par.layout == "sglang" and par.ep == 1 else 0
        return RankGemm(_divide(g, par.experts_tp, where), par.dp, par.ep, shared)
    world = par.layout == "sglang" and par.dp > 1 and (g.role in _WORLD_ROLES or g.parallel == "vocab")
    split = par.world if world else par.tp
    if g.parallel == "qkv":
        return RankGemm(_qkv(g, split, where), 1, 1)
    if g.parallel == "vocab":
        padded = g.vocab if par.layout == "hf" else padded_vocab(g.vocab, g.pad_to)
        if padded % split:  # a pad_to that TP does not divide; vLLM's divide() asserts
            raise ShapeError(f"{where}: the vocabulary {g.vocab} padded to {padded} does not divide by TP {split}")
        return RankGemm(replace(g, N=padded // split), par.dp if world else 1, 1)
    return RankGemm(_divide(g, split, where), par.dp if world else 1, 1)


def padded_vocab(vocab: int, pad_to: int = VOCAB_PADDING) -> int:
    """The LM head's rows as the engines allocate them: the vocabulary rounded up to a multiple of `pad_to`."""
    return -(-vocab // pad_to) * pad_to


def _qkv(g: Gemm, tp: int, where: str) -> Gemm:
    """vLLM's QKVParallelLinear: heads/tp query heads; kv_heads/tp KV heads, or one (copied) once tp >= kv_heads."""
    if g.heads % tp:
        raise ShapeError(f"{where}: {g.heads} query heads do not divide by TP {tp}")
    if tp < g.kv_heads:
        if g.kv_heads % tp:
            raise ShapeError(f"{where}: {g.kv_heads} KV heads do not divide by TP {tp}")
        kv = g.kv_heads // tp
    else:
        if tp % g.kv_heads:
            raise ShapeError(f"{where}: TP {tp} is not a multiple of the {g.kv_heads} KV heads (each KV head is "
                             "copied to TP / kv_heads GPUs)")  # fmt: skip
        kv = 1
    return replace(g, N=(g.heads // tp + 2 * kv) * g.head_dim)


def _divide(g: Gemm, tp: int, where: str) -> Gemm:
    """Column-parallel: N/tp, each fused part divided on its own (MergedColumnParallelLinear); row-parallel K/tp;
    replicated whole."""
    if tp == 1 or g.parallel == "none":
        return g
    if g.parallel == "row":
        if g.K % tp:
            raise ShapeError(f"{where}: K {g.K} does not divide by TP {tp} (row-parallel)")
        return replace(g, K=g.K // tp)
    for part, n in g.parts or ((g.name, g.N),):
        if n % tp:
            what = f"its part {part} (N {n})" if g.parts else f"N {n}"
            raise ShapeError(f"{where}: {what} does not divide by TP {tp} (column-parallel)")
    return replace(g, N=g.N // tp)


def problems(
    shape_set: ShapeSet,
    dtype_names: Sequence[str],
    m_values: Sequence[int] | None = None,
    tp: int = 1,
    routing: str = "uniform",
    ep: int = 1,
    scalings: Sequence[str] = (dtypes.REFERENCE_SCALING,),
    dp: int = 1,
    layout: str = DEFAULT_LAYOUT,
    fp8_accums: Sequence[str] = (dtypes.REFERENCE_FP8_ACCUM,),
) -> list[Problem]:
    """One Problem per (gemm, M, dtype, scaling, fp8 accumulation) of rank 0 of the deployment (tp, dp, ep, layout):
    the layout's GEMMs in file order, M ascending (M is one DP rank's tokens), dtypes, scalings then accumulation
    contracts in the given order.  `routing` applies to the expert GEMMs (inputs.ROUTINGS).  `scalings` apply to fp8
    (dtypes.problem_scaling: a 16-bit dtype runs once, unscaled, where "tensor" is asked), and so do `fp8_accums`
    (dtypes.problem_fp8_accum: a 16-bit dtype runs once, "none").  A ShapeError of one line where the engine would
    refuse the deployment or a GEMM's division."""
    dtype_names = (dtype_names,) if isinstance(dtype_names, str) else dtype_names  # not "f", "p", ... of "fp16"
    if isinstance(scalings, str):
        scalings = (scalings,)
    if isinstance(fp8_accums, str):
        fp8_accums = (fp8_accums,)
    if not dtype_names:
        raise ShapeError(f"{shape_set.source}: no dtypes given")
    for x in scalings:
        if x not in dtypes.SCALINGS:
            raise ShapeError(f"unknown scaling {x!r} (expected one of {', '.join(dtypes.SCALINGS)})")
    for x in fp8_accums:
        if x not in dtypes.FP8_ACCUMS:
            raise ShapeError(f"unknown fp8 accumulation {x!r} (expected one of {', '.join(dtypes.FP8_ACCUMS)})")
    if m_values is None:
        ms = shape_set.m_values
    else:
        if not m_values:
            raise ShapeError(f"{shape_set.source}: empty M list")
        ms = tuple(sorted({_positive(m, "every M", shape_set.source) for m in m_values}))
    par = Parallel(tp, dp, ep, layout)
    check(par, shape_set.name, experts(shape_set))
    sequence_parallel = par.sequence_parallel_moe(shape_set.moe_sequence_parallel)
    out = []
    for gemm in for_layout(shape_set.gemms, par):
        r = shard(gemm, par, shape_set.name, sequence_parallel)
        g = r.gemm
        out += [
            Problem(
                shape_set=shape_set.name,
                gemm=g.name,
                M=r.tokens(m, tp),
                N=g.N,
                K=g.K,
                dtype=d,
                tp=tp,
                E=g.E,
                topk=g.topk,
                routing=routing if g.is_moe else "uniform",
                ep=r.ep,
                scaling=s,
                dp=dp,
                layout=layout,
                shared_experts=r.shared_experts,
                dp_rank_m=m if r.tokens(m, tp) != m else 0,
                fp8_accum=a,
            )
            for m in ms
            for d in dtype_names
            for s in dict.fromkeys(dtypes.problem_scaling(d, x) for x in scalings)
            for a in dict.fromkeys(dtypes.problem_fp8_accum(d, x) for x in fp8_accums)
        ]
    return out
