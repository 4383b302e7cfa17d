"""YAML shape sets -> frozen problem descriptions; M sweeps; tensor- and expert-parallel division.

Model configs (config.json) become shape sets in gemmbench/hf_config.py.

A shape set is a YAML file (built-ins live in shapes/, installed as ``gemmbench.shapesets``)::

    name: llama70b-attn              # required
    description: Llama3-70B attention projections   # optional
    m: decode        # optional (default "all"): "decode" = 1,2,4,8,16,32,64;
                     # "prefill" = 128..4096; "all" = both; a mix "decode,128"; or a list [1, 5, 16]
    include: [llama70b-mlp]          # optional: GEMMs of BUILT-IN sets, placed before this file's own
    gemms:                           # required, non-empty; ids unique (across includes too)
      - id: attn_qkv                 # out = act (M, K) @ weight (N, K)^T
        N: 10240
        K: 8192
        parallel: column             # column (TP divides N) | row (TP divides K) | none
        E: 8                         # optional MoE experts (default 1 = dense); E > 1 needs topk
        topk: 2                      # 1 <= topk <= E; M counts tokens for MoE
        layer: moe                   # optional: the kind of layer it belongs to where a model's layers differ
                                     # (e.g. dense, moe); omitted = every layer
        role: router                 # optional: "router" marks an MoE router (a dense GEMM, N = experts)

Every problem with a file is a ShapeError whose one-line message names the file and the entry.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import yaml

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
PARALLEL = ("column", "row", "none")
_TOP_KEYS = ("name", "description", "m", "include", "gemms")
_GEMM_KEYS = ("id", "N", "K", "parallel", "E", "topk", "layer", "role")
ROLES = ("router",)


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


def _m_from_yaml(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, str):
        return _parse_m(value, where)
    if not isinstance(value, list):
        raise ShapeError(
            f"{where}: must be a preset ({', '.join(PRESETS)}) or a list of positive integers, got {value!r}"
        )
    if not value:
        raise ShapeError(f"{where}: empty M list")
    return tuple(sorted({_positive(v, "every M", where) for v in value}))


# ---------------------------------------------------------------- loading


def _builtin_dir():
    return importlib.resources.files("gemmbench.shapesets")


def builtin_names() -> list[str]:
    """Names of the built-in shape sets (the YAML files of gemmbench.shapesets), sorted."""
    return sorted(p.name[: -len(".yaml")] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


def load(name_or_path: str) -> ShapeSet:
    """A built-in set by name, or a user YAML file by path."""
    if name_or_path in builtin_names():
        return _load_builtin(name_or_path, ())
    path = Path(name_or_path)
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return _load_file(str(path), lambda: path.read_text(encoding="utf-8"), ())
    raise ShapeError(f"{name_or_path}: no such built-in shape set ({', '.join(builtin_names())}) and no such file")


def load_text(source: str, text: str) -> ShapeSet:
    """A shape set from YAML text (e.g. hf_config.from_hf_config's), its errors naming `source`."""
    return _load_file(source, lambda: text, ())


def _load_builtin(name: str, chain: tuple[str, ...]) -> ShapeSet:
    res = _builtin_dir() / f"{name}.yaml"
    return _load_file(str(res), lambda: res.read_text(encoding="utf-8"), chain + (name,))


def _load_file(source: str, read, chain: tuple[str, ...]) -> ShapeSet:
    try:
        text = read()
    except (OSError, UnicodeDecodeError) as e:
        raise ShapeError(f"{source}: cannot read: {_one_line(getattr(e, 'strerror', None) or e)}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        pos = getattr(e, "position", None)  # a ReaderError (e.g. a control character) has no mark
        line = mark.line + 1 if mark is not None else text.count("\n", 0, pos) + 1 if pos is not None else None
        at = f" at line {line}" if line else ""
        raise ShapeError(f"{source}: invalid YAML{at}: {_one_line(getattr(e, 'problem', None) or e)}") from None
    return _parse(data, source, chain)


def _parse(data: Any, src: str, chain: tuple[str, ...]) -> ShapeSet:
    if data is None:
        raise ShapeError(f"{src}: file is empty")
    if not isinstance(data, dict):
        raise ShapeError(f"{src}: top level must be a mapping (name, gemms, ...), got {type(data).__name__}")
    unknown = [k for k in data if k not in _TOP_KEYS]
    if unknown:
        raise ShapeError(f"{src}: unknown key {unknown[0]!r} (allowed: {', '.join(_TOP_KEYS)})")
    for key in ("name", "gemms"):
        if key not in data:
            raise ShapeError(f"{src}: missing field {key!r}")
    name, description = data["name"], data.get("description", "")
    if not isinstance(name, str) or not name.strip():
        raise ShapeError(f"{src}: name must be a non-empty string, got {name!r}")
    if not isinstance(description, str):
        raise ShapeError(f"{src}: description must be a string, got {description!r}")
    m_values = _m_from_yaml(data.get("m", "all"), f"{src}: m")

    gemms: list[Gemm] = []
    origin: dict[str, str] = {}  # gemm id -> where it came from, for the duplicate message
    includes = data.get("include", [])
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise ShapeError(f"{src}: include must be a list of built-in set names, got {includes!r}")
    for inc in includes:
        if inc not in builtin_names():
            raise ShapeError(f"{src}: include {inc!r} is not a built-in set ({', '.join(builtin_names())})")
        if inc in chain:  # without this a cycle recurses until RecursionError
            raise ShapeError(f"{src}: include cycle {' -> '.join(chain + (inc,))}")
        for g in _load_builtin(inc, chain).gemms:
            if g.name in origin:
                raise ShapeError(f"{src}: gemm {g.name!r} from include {inc!r} is already defined by {origin[g.name]}")
            origin[g.name] = f"include {inc!r}"
            gemms.append(g)

    entries = data["gemms"]
    if not isinstance(entries, list):
        raise ShapeError(f"{src}: gemms must be a list of mappings, got {type(entries).__name__}")
    if not entries:
        raise ShapeError(f"{src}: gemms is empty")
    for i, entry in enumerate(entries, 1):
        g = _parse_gemm(entry, f"{src}: gemm #{i}", src)
        if g.name in origin:
            raise ShapeError(f"{src}: gemm {g.name!r}: duplicate id (already defined by {origin[g.name]})")
        origin[g.name] = f"gemm #{i}"
        gemms.append(g)
    return ShapeSet(name=name, description=description, gemms=tuple(gemms), m_values=m_values, source=src)


def _parse_gemm(entry: Any, where: str, src: str) -> Gemm:
    if not isinstance(entry, dict):
        raise ShapeError(f"{where}: must be a mapping (id, N, K, parallel, ...), got {entry!r}")
    gid = entry.get("id")
    if "id" in entry:
        if not isinstance(gid, str) or not gid.strip():
            raise ShapeError(f"{where}: id must be a non-empty string, got {gid!r}")
        where = f"{src}: gemm {gid!r}"  # from here on, name the entry by its id
    unknown = [k for k in entry if k not in _GEMM_KEYS]
    if unknown:
        raise ShapeError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(_GEMM_KEYS)})")
    for key in ("id", "N", "K", "parallel"):
        if key not in entry:
            raise ShapeError(f"{where}: missing field {key!r}")
    N = _positive(entry["N"], "N", where)
    K = _positive(entry["K"], "K", where)
    parallel = entry["parallel"]
    if parallel not in PARALLEL:
        raise ShapeError(f"{where}: parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
    E = _positive(entry.get("E", 1), "E", where)
    if "topk" in entry:
        topk = _positive(entry["topk"], "topk", where)
        if E == 1:
            raise ShapeError(f"{where}: topk is only for MoE gemms (E > 1), but E is 1")
        if topk > E:
            raise ShapeError(f"{where}: topk ({topk}) must not exceed E ({E})")
    elif E > 1:
        raise ShapeError(f"{where}: topk is required when E > 1 (E is {E})")
    else:
        topk = 1
    layer = entry.get("layer", "")
    if "layer" in entry and (not isinstance(layer, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", layer)):
        raise ShapeError(
            f"{where}: layer must be a layer kind such as dense or moe (a letter, then letters, digits, _ or -), got {layer!r}"
        )
    role = entry.get("role", "")
    if "role" in entry and role not in ROLES:
        raise ShapeError(f"{where}: role must be one of {', '.join(ROLES)}, got {role!r}")
    if role == "router" and E > 1:
        raise ShapeError(f"{where}: a router is one dense GEMM (N = the experts it routes to), but E is {E}")
    if not isinstance(gid, str):  # the required keys were checked above; this narrows the type
        raise ShapeError(f"{where}: missing key 'id'")
    return Gemm(name=gid, N=N, K=K, parallel=parallel, E=E, topk=topk, layer=layer, role=role)


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
