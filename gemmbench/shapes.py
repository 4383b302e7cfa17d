"""Shape sets as frozen data (Gemm, ShapeSet, Problem), M lists and presets, tensor- and expert-parallel division,
and the expansion of a set into problems.  Sets are read from YAML by gemmbench.shape_sets (the format is there);
model configs (config.json) become shape sets in gemmbench/hf_config.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

from gemmbench import dtypes

DECODE_M = (1, 2, 4, 8, 16, 32, 64)
PREFILL_M = (128, 256, 512, 1024, 2048, 4096)


class ShapeError(ValueError):
    """A shape set that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Gemm:
    """One weight of a model: out = act (M, K) @ weight (N, K)^T.  MoE: weight is (E, N, K)."""

    name: str  # e.g. "attn_qkv"; unique within a set
    N: int
    K: int
    parallel: str  # "column" (TP divides N) | "row" (TP divides K) | "none"
    E: int = 1  # experts; 1 for a dense GEMM
    topk: int = 1  # experts per token; 1 for a dense GEMM
    layer: str = (
        ""  # the layer kind it belongs to ("dense", "moe", ...) where a model's layers differ; "" = every layer
    )
    role: str = ""  # "router": the MoE router (dense, N = experts), run inside `layer`'s routing step; "" = a weight

    @property
    def is_moe(self) -> bool:
        return self.E > 1


@dataclass(frozen=True)
class ShapeSet:
    name: str
    description: str
    gemms: tuple[Gemm, ...]
    m_values: tuple[int, ...]  # default M list (tokens for MoE)
    source: str  # the file it came from


@dataclass(frozen=True)
class Problem:
    """One cell row's problem: a GEMM at one M, one dtype, one TP degree (N, K already divided), one EP degree.

    Expert parallelism (ep > 1, MoE only): E stays the model's global expert count (the M tokens are routed over all
    E); the benchmarked rank is rank 0, which holds the `local_experts` = E // ep experts 0 .. E/ep - 1 and computes
    only the (token, expert) pairs routed to them (inputs.make_inputs: the other slots' ids are -1)."""

    shape_set: str
    gemm: str
    M: int
    N: int
    K: int
    dtype: str  # a name in dtypes.ALL: "fp16" | "bf16" | "fp8"
    tp: int = 1
    E: int = 1
    topk: int = 1
    routing: str = "uniform"  # MoE: how tokens are routed to experts (inputs.ROUTINGS); dense: unused
    ep: int = 1  # expert-parallel degree that divided E (apply_ep); 1 for a dense GEMM
    # how fp8 operands are scaled: a name in dtypes.SCALINGS; a 16-bit dtype's is "none" (its "tensor", the default,
    # becomes "none"); another scaling of a 16-bit dtype is a problem no variant runs (fp8 only: a skipped row)
    scaling: str = dtypes.REFERENCE_SCALING

    def __post_init__(self) -> None:
        # with_(dtype=...) keeps the scaling: a 16-bit problem's "none" is fp8's "tensor", and back
        dt = dtypes.ALL.get(self.dtype)
        if dt is not None and not dt.scaled and self.scaling == dtypes.REFERENCE_SCALING:
            object.__setattr__(self, "scaling", dtypes.UNSCALED)
        elif dt is not None and dt.scaled and self.scaling == dtypes.UNSCALED:
            object.__setattr__(self, "scaling", dtypes.REFERENCE_SCALING)

    @property
    def is_moe(self) -> bool:
        return self.E > 1

    @property
    def local_experts(self) -> int:
        """Experts this rank holds (the weight's leading dimension): E // ep."""
        return self.E // self.ep

    def with_(self, **changes) -> "Problem":
        return replace(self, **changes)

    @property
    def label(self) -> str:
        """Human- and NVTX-safe name (no '/')."""
        moe = f" E{self.E} top{self.topk}" if self.is_moe else ""
        if self.is_moe and self.routing != "uniform":
            moe += f" {self.routing}"
        tp = f" tp{self.tp}" if self.tp > 1 else ""
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        return f"{self.gemm} {dtypes.label(self.dtype, self.scaling)} M{self.M} N{self.N} K{self.K}{moe}{tp}{ep}"


PRESETS = {"decode": DECODE_M, "prefill": PREFILL_M, "all": DECODE_M + PREFILL_M}


def _is_int(value: Any) -> bool:
    # YAML turns `yes`/`true` into bool, and bool is an int subclass: N: true must not mean N=1.
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: Any, what: str, where: str) -> int:
    if not _is_int(value) or value <= 0:
        raise ShapeError(f"{where}: {what} must be a positive integer, got {value!r}")
    return value


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# ---------------------------------------------------------------- M lists


def parse_m_list(text: str) -> tuple[int, ...]:
    """The --m option: "1,16,64", presets "decode"/"prefill"/"all", or a mix ("decode,128")."""
    return _parse_m(text, "--m")


def _parse_m(text: str, where: str) -> tuple[int, ...]:
    if not isinstance(text, str) or not text.strip():
        raise ShapeError(f"{where}: empty M list")
    values: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        if item.lower() in PRESETS:
            values.update(PRESETS[item.lower()])
        elif re.fullmatch(r"\d+", item) and int(item) > 0:  # not int(): it takes "+5", "1_0", " 7"
            values.add(int(item))
        else:
            raise ShapeError(f"{where}: M value {item!r} is not a positive integer or one of {', '.join(PRESETS)}")
    return tuple(sorted(values))


# ---------------------------------------------------------------- problems


def apply_tp(gemm: Gemm, tp: int) -> Gemm:
    """The per-GPU shard: column-parallel splits N, row-parallel splits K, "none" is replicated."""
    if not _is_int(tp) or tp < 1:
        raise ShapeError(f"gemm {gemm.name!r}: tp must be a positive integer, got {tp!r}")
    dim = {"column": "N", "row": "K"}.get(gemm.parallel)
    if dim is None or tp == 1:
        return gemm
    size = getattr(gemm, dim)
    if size % tp:
        raise ShapeError(f"gemm {gemm.name!r}: {dim}={size} is not divisible by tp={tp} ({gemm.parallel}-parallel)")
    return replace(gemm, **{dim: size // tp})


def apply_ep(gemm: Gemm, ep: int) -> int:
    """The EP degree of this GEMM's problems: an expert GEMM's E experts divided over `ep` ranks (E/ep each; its N or
    K are apply_tp's business), a dense GEMM (attention, dense MLP, shared experts: every token hits them) 1."""
    if not _is_int(ep) or ep < 1:
        raise ShapeError(f"gemm {gemm.name!r}: ep must be a positive integer, got {ep!r}")
    if not gemm.is_moe:
        return 1
    if gemm.E % ep:
        raise ShapeError(f"gemm {gemm.name!r}: E={gemm.E} experts are not divisible by ep={ep}")
    return ep


def check_ep(shape_set: ShapeSet, ep: int) -> None:
    """An EP degree the set can take: a positive integer, above 1 only for a set with expert GEMMs."""
    if not _is_int(ep) or ep < 1:
        raise ShapeError(f"{shape_set.source}: ep must be a positive integer, got {ep!r}")
    if ep > 1 and not any(g.is_moe for g in shape_set.gemms):
        raise ShapeError(f"{shape_set.source}: ep={ep} needs expert GEMMs (E > 1), and set {shape_set.name!r} has "
                         f"none (its GEMMs: {', '.join(g.name for g in shape_set.gemms)})")  # fmt: skip


def problems(
    shape_set: ShapeSet,
    dtype_names: Sequence[str],
    m_values: Sequence[int] | None = None,
    tp: int = 1,
    routing: str = "uniform",
    ep: int = 1,
    scalings: Sequence[str] = (dtypes.REFERENCE_SCALING,),
) -> list[Problem]:
    """One Problem per (gemm, M, dtype, scaling): gemms in file order, M ascending, dtypes then scalings in the given
    order.  `routing` applies to the MoE gemms (inputs.ROUTINGS); so does `ep` (apply_ep), which needs one.
    `scalings` apply to fp8 (dtypes.problem_scaling: a 16-bit dtype runs once, unscaled, where "tensor" is asked)."""
    dtype_names = (dtype_names,) if isinstance(dtype_names, str) else dtype_names  # not "f", "p", ... of "fp16"
    if isinstance(scalings, str):
        scalings = (scalings,)
    if not dtype_names:
        raise ShapeError(f"{shape_set.source}: no dtypes given")
    for x in scalings:
        if x not in dtypes.SCALINGS:
            raise ShapeError(f"unknown scaling {x!r} (expected one of {', '.join(dtypes.SCALINGS)})")
    if m_values is None:
        ms = shape_set.m_values
    else:
        if not m_values:
            raise ShapeError(f"{shape_set.source}: empty M list")
        ms = tuple(sorted({_positive(m, "every M", shape_set.source) for m in m_values}))
    check_ep(shape_set, ep)
    out = []
    for gemm in shape_set.gemms:
        try:
            g = apply_tp(gemm, tp)
            g_ep = apply_ep(g, ep)
        except ShapeError as e:
            raise ShapeError(f"{shape_set.source}: {e}") from None
        out += [
            Problem(
                shape_set=shape_set.name,
                gemm=g.name,
                M=m,
                N=g.N,
                K=g.K,
                dtype=d,
                tp=tp,
                E=g.E,
                topk=g.topk,
                routing=routing if g.E > 1 else "uniform",
                ep=g_ep,
                scaling=s,
            )
            for m in ms
            for d in dtype_names
            for s in dict.fromkeys(dtypes.problem_scaling(d, x) for x in scalings)
        ]
    return out
