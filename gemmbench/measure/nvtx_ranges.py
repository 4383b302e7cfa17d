"""NVTX ranges around every check, warm-up and timed region, so that Nsight Systems and Nsight Compute can
select one cell's kernels by name (cuBLAS kernels are named nvjet_*/sm90_*: select by range, not by kernel).

Ranges are push/pop ranges in the domain "gemmbench", made with the `nvtx` package; where it cannot be
imported (the GPU image has no `nvtx`), torch.cuda.nvtx makes them in the default domain instead, and
ncu_include() writes the filter for whichever is in use.  Names are "<phase> <variant> <problem label>",
e.g. "check triton_splitk_atomic attn_qkv fp8 M16 N1280 K8192 tp8", with no '/' (ncu reads '/' as
nesting) and no '@' (ncu's domain separator).
"""

from __future__ import annotations

import contextlib
import functools
import re

DOMAIN = "gemmbench"
PHASES = ("check", "warmup", "time", "profile")


@functools.lru_cache(maxsize=1)
def _backend():
    """("nvtx", module) when the nvtx package imports, else ("torch", torch.cuda.nvtx), or None without CUDA."""
    try:
        import nvtx  # optional (the GPU image has none); torch below is heavy, and the CLI imports this module

        return "nvtx", nvtx
    except ImportError:
        pass
    import torch

    if not torch.cuda.is_available():
        return None
    return "torch", torch.cuda.nvtx


def domain_in_use() -> str | None:
    """The domain our ranges land in: "gemmbench" with the nvtx package, None (the default one) with torch's."""
    backend = _backend()
    return DOMAIN if backend is None or backend[0] == "nvtx" else None


def cell_name(variant: str, problem) -> str:
    """One cell's part of its range names (problem: a shapes.Problem)."""
    return re.sub(r"[/@\"\\]", "_", f"{variant} {problem.label}")


def range_name(phase: str, cell: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    return f"{phase} {cell}"


@contextlib.contextmanager
def annotate(name: str | None):
    """A push/pop range named `name` around the block (none for name None, or on a machine with neither
    backend)."""
    backend = _backend()
    if backend is None or name is None:
        yield
        return
    kind, mod = backend
    if kind == "nvtx":
        mod.push_range(message=name, domain=DOMAIN)
    else:
        mod.range_push(name)
    try:
        yield
    finally:
        if kind == "nvtx":
            mod.pop_range(domain=DOMAIN)
        else:
            mod.range_pop()


def ncu_include(name: str, domain: str | None = DOMAIN) -> str:
    """The --nvtx-include filter that selects the push/pop range `name` (the trailing '/' marks push/pop)."""
    return f"{domain}@{name}/" if domain else f"{name}/"
