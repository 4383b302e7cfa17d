"""YAML shape sets -> gemmbench.shapes.ShapeSet: built-in sets by name (gemmbench/shapesets/, installed as
``gemmbench.shapesets``), files by path, YAML text; `include`s resolved; every key and value checked.

A shape set is a YAML file::

    name: llama70b-attn              # required
    description: Llama3-70B attention projections   # optional
    m: decode        # optional (default "all"): "decode" = 1,2,4,8,16,32,64;
                     # "prefill" = 128..4096; "all" = both; a mix "decode,128"; or a list [1, 5, 16]
    moe_sequence_parallel: true  # optional (default false): vLLM's model code for it chunks a DP rank's tokens
                     # across TP in its MoE blocks when they are expert-parallel and DP > 1 (gemmbench.models.sharding)
    include: [llama70b-mlp]          # optional: GEMMs of BUILT-IN sets, placed before this file's own
    gemms:                           # required, non-empty; ids unique (across includes too)
      - id: attn_qkv                 # out = act (M, K) @ weight (N, K)^T
        K: 8192
        parallel: qkv                # qkv | vocab | column (TP divides N) | row (TP divides K) | none (replicated)
        heads: 64                    # qkv: query heads, KV heads, head size; N = (heads + 2 kv_heads) head_dim
        kv_heads: 8                  # (N may be given, and must be that)
        head_dim: 128
      - {id: lm_head, K: 8192, parallel: vocab, vocab: 128256, pad_to: 64}  # vocab: N = vocab (padded when run)
      - id: moe_w13
        N: 28672
        K: 4096
        parallel: column
        E: 8                         # optional MoE experts (default 1 = dense); E > 1 needs topk
        topk: 2                      # 1 <= topk <= E; M counts tokens for MoE
        parts: {moe_w1: 14336, moe_w3: 14336}  # optional: the checkpoint's tensors a fused GEMM is made of (N adds
                                     # up): --layout hf runs them apart, TP divides each
        fold_shared: 1               # optional, experts: shared experts SGLang folds into these (E + 1, topk + 1)
        layer: moe                   # optional: the kind of layer it belongs to where a model's layers differ
                                     # (e.g. dense, moe); omitted = every layer
        role: router                 # optional: router (an MoE router, a dense GEMM, N = experts), mlp (a dense
                                     # MLP's), shared_expert (a shared expert's); see gemmbench.models.sharding

How TP, DP and EP divide each kind: gemmbench/models/sharding.py.  A `parallel: column` GEMM whose id names a QKV is
read with a warning: TP past its KV heads copies them, which only `parallel: qkv` can say.

Every problem with a file is a ShapeError whose one-line message names the file and the entry.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path
from typing import Any

import yaml

from gemmbench.models.sharding import VOCAB_PADDING
from gemmbench.shapes import PRESETS, Gemm, ShapeError, ShapeSet, _is_int, _one_line, _parse_m, _positive

PARALLEL = ("column", "row", "none", "qkv", "vocab")
_TOP_KEYS = ("name", "description", "m", "moe_sequence_parallel", "include", "gemms")
_GEMM_KEYS = ("id", "N", "K", "parallel", "E", "topk", "layer", "role", "heads", "kv_heads", "head_dim", "vocab",
              "pad_to", "parts", "fold_shared")  # fmt: skip
ROLES = ("router", "mlp", "shared_expert")


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
    sequence_parallel = data.get("moe_sequence_parallel", False)
    if not isinstance(sequence_parallel, bool):
        raise ShapeError(f"{src}: moe_sequence_parallel must be true or false, got {sequence_parallel!r}")

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
    taken = {g.name: "a gemm id" for g in gemms}
    for g in gemms:  # --layout hf runs the parts as GEMMs of their own: every name once
        for part, _ in g.parts:
            if part in taken:
                raise ShapeError(f"{src}: gemm {g.name!r}: part {part!r} is also {taken[part]} (--layout hf runs both)")
            taken[part] = f"a part of {g.name!r}"
    warnings = tuple(
        f"{src}: gemm {g.name!r} is parallel: column; write it as parallel: qkv with heads, kv_heads and head_dim "
        "(past its KV heads TP copies them, which column cannot say)"
        for g in gemms
        if _old_qkv(g)
    )
    return ShapeSet(name=name, description=description, gemms=tuple(gemms), m_values=m_values, source=src,
                    warnings=warnings, moe_sequence_parallel=sequence_parallel)  # fmt: skip


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
    for key in ("id", "K", "parallel"):
        if key not in entry:
            raise ShapeError(f"{where}: missing field {key!r}")
    parallel = entry["parallel"]
    if parallel not in PARALLEL:
        raise ShapeError(f"{where}: parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
    if not isinstance(gid, str):  # the required keys were checked above; this narrows the type
        raise ShapeError(f"{where}: missing key 'id'")
    _only_for(entry, where, parallel)
    K = _positive(entry["K"], "K", where)
    fields: dict[str, Any] = {}
    if parallel == "qkv":
        fields = {k: _positive(entry.get(k), k, where) for k in ("heads", "kv_heads", "head_dim")}
        if fields["heads"] % fields["kv_heads"]:
            raise ShapeError(f"{where}: kv_heads ({fields['kv_heads']}) does not divide heads ({fields['heads']})")
        derived, how = (fields["heads"] + 2 * fields["kv_heads"]) * fields["head_dim"], "(heads + 2 kv_heads) head_dim"
    elif parallel == "vocab":
        fields = {"vocab": _positive(entry.get("vocab"), "vocab", where),
                  "pad_to": _positive(entry.get("pad_to", VOCAB_PADDING), "pad_to", where)}  # fmt: skip
        derived, how = fields["vocab"], "vocab"
    if parallel in ("qkv", "vocab"):
        N = _positive(entry.get("N", derived), "N", where)
        if N != derived:
            raise ShapeError(f"{where}: N {N} is not {how} = {derived}")
    elif "N" not in entry:
        raise ShapeError(f"{where}: missing field 'N'")
    else:
        N = _positive(entry["N"], "N", where)
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
    if E > 1 and parallel not in ("column", "row", "none"):
        raise ShapeError(f"{where}: experts (E > 1) are column, row or none, not {parallel}")
    fold = _count(entry.get("fold_shared", 0), "fold_shared", where)
    if fold and E == 1:
        raise ShapeError(f"{where}: fold_shared is for expert GEMMs (E > 1), but E is 1")
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
    parts = _parts(entry, where, N, gid, fields)
    return Gemm(name=gid, N=N, K=K, parallel=parallel, E=E, topk=topk, layer=layer, role=role, parts=parts,
                fold_shared=fold, **fields)  # fmt: skip


def _only_for(entry: dict, where: str, parallel: str) -> None:
    """Keys that belong to one kind of GEMM are refused on another (a `vocab` on a row-parallel GEMM says nothing)."""
    for kind, keys in (("qkv", ("heads", "kv_heads", "head_dim")), ("vocab", ("vocab", "pad_to"))):
        given = [k for k in keys if k in entry]
        if given and parallel != kind:
            raise ShapeError(f"{where}: {given[0]} is only for parallel: {kind}, not {parallel}")


def _count(value: Any, what: str, where: str) -> int:
    if not _is_int(value) or value < 0:
        raise ShapeError(f"{where}: {what} must be a non-negative integer, got {value!r}")
    return value


def _parts(entry: dict, where: str, N: int, gid: str, qkv: dict) -> tuple[tuple[str, int], ...]:
    """A fused GEMM's tensors: `parts` as given (ids -> N, adding up to N), or a QKV's q, k and v from its heads."""
    if "parts" in entry and entry["parallel"] == "vocab":
        raise ShapeError(f"{where}: parts are not for parallel: vocab (an LM head is one tensor)")
    if "parts" not in entry:
        if entry["parallel"] != "qkv":
            return ()
        stem = gid[: -len("qkv")] if gid.endswith("qkv") else f"{gid}_"
        q, kv = qkv["heads"] * qkv["head_dim"], qkv["kv_heads"] * qkv["head_dim"]
        return ((f"{stem}q", q), (f"{stem}k", kv), (f"{stem}v", kv))
    parts = entry["parts"]
    if not isinstance(parts, dict) or len(parts) < 2 or not all(isinstance(k, str) and k for k in parts):
        raise ShapeError(f"{where}: parts must map two or more tensor ids to their N, got {parts!r}")
    out = tuple((k, _positive(v, f"part {k!r}'s N", where)) for k, v in parts.items())
    if sum(n for _, n in out) != N:
        raise ShapeError(f"{where}: parts add up to N {sum(n for _, n in out)}, not the GEMM's N {N}")
    return out


def _old_qkv(g: Gemm) -> bool:
    return g.parallel == "column" and not g.is_moe and "qkv" in g.name.lower()
