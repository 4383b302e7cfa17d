"""The Gluon names the kernels of gluon_ws_device.py and gluon_ws_promote.py are written against, or why this Triton
lacks them (GLUON_IMPORT_ERROR: gluon_ws.py's supports() then refuses, naming it)."""

from __future__ import annotations

from typing import Optional

__all__ = ["GLUON_IMPORT_ERROR", "TensorDescriptor", "cp_async_load", "cta_barrier", "fence_async_shared", "gl",
           "gluon", "mbarrier", "mbarrier_arrive_on_copies", "tma", "tma_load", "tma_store", "warpgroup_mma",
           "warpgroup_mma_wait"]  # fmt: skip

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

    # Triton after 3.6 renamed these (and refuses the old names): the kernels call them by these names on either
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
    cp_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
    mbarrier_arrive_on_copies = async_copy.mbarrier_arrive
    cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier

    GLUON_IMPORT_ERROR: Optional[str] = None
except (ImportError, AttributeError) as exc:  # pragma: no cover - an older or newer Triton without these names
    GLUON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"
