"""YAML shape sets -> gemmbench.shapes.ShapeSet: built-in sets by name (shapes/, installed as
``gemmbench.shapesets``), files by path, YAML text; `include`s resolved; every key and value checked.

A shape set is a YAML file::

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
from pathlib import Path
from typing import Any

import yaml

from gemmbench.shapes import PRESETS, Gemm, ShapeError, ShapeSet, _one_line, _parse_m, _positive

PARALLEL = ("column", "row", "none")
_TOP_KEYS = ("name", "description", "m", "include", "gemms")
_GEMM_KEYS = ("id", "N", "K", "parallel", "E", "topk", "layer", "role")
ROLES = ("router",)


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
