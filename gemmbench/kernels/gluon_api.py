"""The Gluon names the kernels of gluon_ws_device.py and gluon_ws_promote.py are written against, or why this Triton
lacks them (GLUON_IMPORT_ERROR: gluon_ws.py's supports() then refuses, naming it)."""

from __future__ import annotations

from typing import Optional

__all__ = ["GLUON_IMPORT_ERROR", "TensorDescriptor", "async_copy", "fence_async_shared", "gl", "gluon", "mbarrier",
           "tma", "warpgroup_mma", "warpgroup_mma_wait"]  # fmt: skip

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    GLUON_IMPORT_ERROR: Optional[str] = None
except ImportError as exc:  # pragma: no cover - an older or newer Triton without these names
    GLUON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
