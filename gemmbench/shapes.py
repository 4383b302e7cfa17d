"""Shape sets as frozen data (Gemm, ShapeSet, Problem), M lists and presets.  Sets are read from YAML by
gemmbench.models.shape_sets (the format is there); model configs (config.json) become shape sets in gemmbench/models/hf_config.py;
gemmbench.models.sharding divides a set's GEMMs as the engines do and expands it into problems."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from gemmbench import dtypes

DECODE_M = (1, 2, 4, 8, 16, 32, 64)
PREFILL_M = (128, 256, 512, 1024, 2048, 4096)


class ShapeError(ValueError):
    """A shape set that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Gemm:
    """One weight of a model: out = act (M, K) @ weight (N, K)^T.  MoE: weight is (E, N, K)."""

    name: str  # e.g. "attn_qkv"; unique within a set
    N: int  # the whole weight's (qkv: (heads + 2 kv_heads) head_dim; vocab: the vocabulary, unpadded)
    K: int
    parallel: str  # how TP divides it (gemmbench.models.sharding): "column" | "row" | "none" | "qkv" | "vocab"
    E: int = 1  # experts; 1 for a dense GEMM
    topk: int = 1  # experts per token; 1 for a dense GEMM
    # the layer kind it belongs to ("dense", "moe", ...) where a model's layers differ; "" = every layer
    layer: str = ""
    # "router": the MoE router (dense, N = experts), run inside `layer`'s routing step; "mlp": a dense MLP's;
    # "shared_expert": a shared expert's (every token); "" = attention and the rest
    role: str = ""
    heads: int = 0  # qkv: query heads, KV heads and the head size (gemmbench.models.sharding copies KV heads past TP)
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0  # vocab: the vocabulary, padded up to a multiple of pad_to before TP divides it
    pad_to: int = 1
    parts: tuple[tuple[str, int], ...] = ()  # a fused GEMM's checkpoint tensors (id, N), in order: --layout hf
    fold_shared: int = 0  # experts: the shared experts SGLang folds into these routed ones (DeepSeek-V3: 1)

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
    warnings: tuple[str, ...] = ()  # what a reader should hear about the file, one line each (e.g. an old key)
    # the model's MoE blocks go sequence-parallel where vLLM turns it on (gemmbench.models.sharding): a trait of the
    # engine's model code, not of the checkpoint
    moe_sequence_parallel: bool = False


@dataclass(frozen=True)
class Problem:
    """One cell row's problem: a GEMM as rank 0 of a deployment runs it (gemmbench.models.sharding: N, K already divided;
    M the tokens this GEMM sees, M x dp for expert GEMMs), in one dtype, scaling and (fp8) accumulation contract.

    Expert parallelism (ep > 1, MoE only): E stays the model's global expert count (the M tokens are routed over all
    E); the benchmarked rank is rank 0, which holds the `local_experts` = ceil(E / ep) experts 0 .. local - 1 and
    computes only the (token, expert) pairs routed to them (inputs.make_inputs: the other slots' ids are -1)."""

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
    ep: int = 1  # expert-parallel degree that divided E; 1 for a dense GEMM
    # how fp8 operands are scaled: a name in dtypes.SCALINGS; a 16-bit dtype's is "none" (its "tensor", the default,
    # becomes "none"); another scaling of a 16-bit dtype is a problem no variant runs (fp8 only: a skipped row)
    scaling: str = dtypes.REFERENCE_SCALING
    dp: int = 1  # data-parallel groups of the deployment (gemmbench.models.sharding)
    layout: str = "vllm"  # whose GEMMs: gemmbench.models.sharding.LAYOUTS
    shared_experts: int = 0  # of E, the last ones every token is routed to (SGLang's folded shared expert)
    # the M asked (one DP rank's tokens) where this GEMM sees another count (expert GEMMs: M x dp; a sequence-parallel
    # MoE block's: its share of them); 0: M itself
    dp_rank_m: int = 0
    # how fp8 tensor-core sums reach fp32: a name in dtypes.FP8_ACCUMS; a 16-bit dtype's is "none" (its "precise",
    # the default, becomes "none"); "fast" of a 16-bit dtype is a problem no variant runs, as a scaling is
    fp8_accum: str = dtypes.REFERENCE_FP8_ACCUM

    def __post_init__(self) -> None:
        # with_(dtype=...) keeps the scaling and the accumulation: a 16-bit problem's "none" is fp8's reference, and back
        dt = dtypes.ALL.get(self.dtype)
        if dt is not None and not dt.scaled:
            for name, reference in (("scaling", dtypes.REFERENCE_SCALING), ("fp8_accum", dtypes.REFERENCE_FP8_ACCUM)):
                if getattr(self, name) == reference:
                    object.__setattr__(self, name, dtypes.UNSCALED)
        elif dt is not None and dt.scaled:
            for name, reference in (("scaling", dtypes.REFERENCE_SCALING), ("fp8_accum", dtypes.REFERENCE_FP8_ACCUM)):
                if getattr(self, name) == dtypes.UNSCALED:
                    object.__setattr__(self, name, reference)

    @property
    def is_moe(self) -> bool:
        return self.E > 1

    @property
    def local_experts(self) -> int:
        """Experts rank 0 holds (the weight's leading dimension): ceil(E / ep), vLLM's linear expert map."""
        return -(-self.E // self.ep)

    def with_(self, **changes) -> "Problem":
        return replace(self, **changes)

    @property
    def label(self) -> str:
        """Human- and NVTX-safe name (no '/')."""
        moe = f" E{self.E} top{self.topk}" if self.is_moe else ""
        if self.shared_experts:
            moe += f" shared{self.shared_experts}"
        if self.is_moe and self.routing != "uniform":
            moe += f" {self.routing}"
        par = "".join(f" {k}{v}" for k, v in (("tp", self.tp), ("ep", self.ep), ("dp", self.dp)) if v > 1)
        layout = f" {self.layout}" if self.layout != "vllm" else ""
        return f"{self.gemm} {dtypes.label(self.dtype, self.scaling, self.fp8_accum)} M{self.M} N{self.N} K{self.K}{moe}{par}{layout}"


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
