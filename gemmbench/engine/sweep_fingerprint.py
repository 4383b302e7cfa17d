"""What identifies a sweep, stored in its run file's metadata, so that `run --resume` adds only the cells of that
very sweep, measured the same way by the same build: a file of another sweep is refused, naming the difference,
rather than mixed into it under its run id."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Optional

KEY = b"gemmbench.sweep"  # the file metadata key (store.file_metadata)
# what the sweep measures and how; the build that measured it: each named when it differs
SAME = {
    "timing": "timing mode",
    "inputs": "--inputs",
    "budget": "--budget",
    "seed": "--seed",
    "sanitize": "--sanitize",
    "retune": "--retune",
    "configs": "configs lookup (--no-borrow, --no-store)",
    "plugins": "plugins (by content)",
    "imported": "--import-config files (by content)",
    "build": "gemmbench build",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def content(paths: Iterable) -> dict[str, str]:
    """{file: hash of its bytes}, a folder's .py files each (registry.load_plugin loads them): a plugin or an
    imported config edited between the two runs is another one."""
    files = [f for p in map(Path, paths) for f in (sorted(p.glob("*.py")) if p.is_dir() else [p]) if f.is_file()]
    return {str(f.resolve()): _sha(f.read_bytes()) for f in files}


def fingerprint(cell_keys: Iterable[str], shape_set: str, **same) -> dict:
    """The sweep: its cells (problem x variant keys: the shapes, M, dtypes, scalings, fp8 accumulation contracts,
    parallelism, routing and variants all in them), the set's name, and the SAME fields."""
    keys = sorted(cell_keys)
    return {"cells": _sha("\n".join(keys).encode()), "n_cells": len(keys), "shape_set": shape_set, **same}


def encode(fp: dict) -> dict[bytes, bytes]:
    return {KEY: json.dumps(fp, sort_keys=True).encode()}


def decode(meta: Optional[dict]) -> Optional[dict]:
    raw = (meta or {}).get(KEY)
    return json.loads(raw) if raw else None


def difference(stored: Optional[dict], current: dict) -> Optional[str]:
    """Why a file with `stored` cannot be resumed by a sweep with `current`, in a few words; None when it can."""
    if stored is None:
        return "it was written without a sweep fingerprint (by an older gemmbench, or not by `run`)"
    if stored.get("cells") != current["cells"]:
        return (f"it is another sweep ({stored.get('n_cells')} cells of {stored.get('shape_set')!r} there, "
                f"{current['n_cells']} of {current['shape_set']!r} here: other shapes, M, dtypes, scalings, "
                "fp8 accumulation, parallelism, routing or variants)")  # fmt: skip
    for key, what in SAME.items():
        if stored.get(key) != current.get(key):
            return f"its {what} was {stored.get(key)!r}, this run's is {current.get(key)!r}"
    return None
