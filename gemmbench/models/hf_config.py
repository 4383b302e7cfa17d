"""A Hugging Face config.json -> a shape set (YAML that shape_sets.load_text accepts).

    from_hf_config(config, name=None, source=None, family=None) -> (set name, YAML text)
    convert(...) -> Converted: the same, and which of the config's fields were read and which ignored

`config` is a path to a config.json or the parsed dict.  Its family is `architectures[0]` (`model_type` where
`architectures` is missing), or `family` (an architecture of FAMILIES, for a model of a new name built like a known
one); gemmbench/models/hf_families.py has one function per family, the fields each reads and the conventions of the GEMMs
it lists (parallel, layer, role).  The set is named by `name`, else the config's `_name_or_path`, else its file's
name (config.json: its folder's), else its `model_type`.  A config that is not JSON, not an object, of an unknown
architecture, or that lacks or mis-sizes a field its family needs is a ShapeError: one line naming the file and the
field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from gemmbench.models.hf_families import FAMILIES, MODEL_TYPES, MOE_SEQUENCE_PARALLEL, Fields, Spec

# the private helper is shapes.py's own rule (messages on one line): reused, not copied
from gemmbench.shapes import ShapeError, _one_line


def read_config(path: str | Path) -> dict:
    """A config.json's top-level object; a ShapeError naming the file when it cannot be read or is not one."""
    src = str(path)
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ShapeError(f"{src}: cannot read: {_one_line(getattr(e, 'strerror', None) or e)}") from None
    except json.JSONDecodeError as e:
        raise ShapeError(f"{src}: not JSON (line {e.lineno}): {e.msg}") from None
    if not isinstance(cfg, dict):
        raise ShapeError(f"{src}: not a model config (top level is {type(cfg).__name__}, not an object)")
    return cfg


def architecture(cfg: dict, src: str, family: str | None = None) -> str:
    """The family key of FAMILIES: `family` where given, else architectures[0], else model_type through MODEL_TYPES."""
    if family is not None:
        if family not in FAMILIES:
            raise ShapeError(f"--as {family!r}: not a family gemmbench knows ({', '.join(FAMILIES)})")
        return family
    archs = cfg.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise ShapeError(f"{src}: field 'architectures' must be a list of class names, got {archs!r}")
        if archs[0] not in FAMILIES:
            raise ShapeError(
                f"{src}: field 'architectures': {archs[0]!r} is not an architecture gemmbench knows "
                f"({', '.join(FAMILIES)}); if it is built like one of them, read it as that one with --as FAMILY"
            )
        return archs[0]
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ShapeError(f"{src}: missing field 'architectures' (or 'model_type')")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise ShapeError(
            f"{src}: field 'model_type': {model_type!r} is not a model type gemmbench knows ({', '.join(MODEL_TYPES)})"
        )
    return MODEL_TYPES[model_type]


def _set_name(cfg: dict, src: str, path: Path | None) -> str:
    """_name_or_path's last part; else the file's name (a config.json: its folder's, as a downloaded model has it)."""
    name = str(cfg.get("_name_or_path") or "").rstrip("/").split("/")[-1]
    if not name and path is not None:
        name = path.resolve().parent.name if path.name == "config.json" else path.stem
    found = name or cfg.get("model_type")
    if not isinstance(found, str) or not found:
        raise ShapeError(f"{src}: missing field '_name_or_path' or 'model_type' (or pass a name)")
    return found.lower()


@dataclass(frozen=True)
class Converted:
    name: str  # the set's
    text: str  # its YAML
    family: str  # the FAMILIES key it was read as
    read: tuple[str, ...]  # the config's fields the family read (in the order it read them)
    ignored: tuple[str, ...]  # the config's other fields: nothing in them changes a GEMM


def from_hf_config(
    config: str | Path | dict, name: str | None = None, source: str | None = None, family: str | None = None
) -> tuple[str, str]:
    """A config.json (path or parsed dict) -> (set name, YAML text).  `source` names the config in messages, in the
    description and in the header (default: the path, or "config")."""
    c = convert(config, name, source, family)
    return c.name, c.text


def convert(
    config: str | Path | dict, name: str | None = None, source: str | None = None, family: str | None = None
) -> Converted:
    """from_hf_config, and what it read and ignored of the config."""
    if isinstance(config, dict):
        cfg, src, path = config, source or "config", None
    else:
        cfg, src, path = read_config(config), source or str(config), Path(config)
    arch = architecture(cfg, src, family)
    fields, prefix = cfg, ""
    if arch == "Llama4ForConditionalGeneration":  # a vision-language config: the decoder's fields are text_config
        text_config = cfg.get("text_config")
        if not isinstance(text_config, dict):
            raise ShapeError(f"{src}: missing field 'text_config' (an object with the language model's fields)")
        fields, prefix = text_config, "text_config."
    f = Fields(fields, src, arch, prefix)
    model = FAMILIES[arch](f)
    f.refuse_unread()
    name = name or _set_name(cfg, src, path)
    description = f"{arch}: {'; '.join(model.summary)} (from {src})"
    read = tuple(prefix + k for k in f.order)
    ignored = tuple(prefix + k for k in fields if k not in f.read)
    text = render(name, description, model.gemms, src, arch in MOE_SEQUENCE_PARALLEL)
    return Converted(name, text, arch, read, ignored)


def render(name: str, description: str, gemms: list[Spec], src: str, moe_sequence_parallel: bool = False) -> str:
    """The YAML text: one flow mapping per GEMM with the arithmetic behind its sizes as a comment."""
    top: dict = {"name": name, "description": description, "m": "all"}
    if (
        moe_sequence_parallel
    ):  # the family's vLLM code chunks its MoE blocks' tokens (hf_families.MOE_SEQUENCE_PARALLEL)
        top["moe_sequence_parallel"] = True
    head = yaml.safe_dump(top, sort_keys=False, width=10**6)
    lines = [f"# Generated by gemmbench from the Hugging Face config {_one_line(src)}", head.rstrip("\n"), "gemms:"]
    for g in gemms:
        flow = yaml.safe_dump(g.as_yaml(), default_flow_style=True, sort_keys=False, width=10**6).strip()
        lines.append(f"  - {flow}  # {g.why}" if g.why else f"  - {flow}")
    return "\n".join(lines) + "\n"
