"""Persisting L2 lines: cold timing's one blind spot.  A launch may set aside part of L2 for "persisting" accesses
(cudaLimitPersistingL2CacheSize) and mark its operands persisting with an access-policy window on its stream; the
eviction read then cannot push them out, and a cold sample reads them from L2 (llm.c PR 851 reported 4x an L40S's
DRAM bandwidth so).  torch has no binding for these, so they are read and reset through the CUDA driver API (ctypes).

`Guard.after_batch()` runs after each variant's set-up and warm-up and after each of its batches of samples: it resets
the persisting lines, reads the set-aside and the caller's stream's window, and when either is set says so (that
variant is then flagged) and clears them, so that the next variant starts from a plain L2.  Where the driver cannot be
loaded (a CPU), there is no guard.
"""

from __future__ import annotations

import ctypes
from typing import Callable, Optional

LIMIT_PERSISTING_L2 = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
ATTR_ACCESS_POLICY_WINDOW = 1  # CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW (a stream attribute too)


class _Window(ctypes.Structure):
    """CUaccessPolicyWindow."""

    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]  # fmt: skip


class _StreamAttr(ctypes.Union):
    """CUstreamAttrValue (CUlaunchAttributeValue): 64 bytes, of which the window is one member."""

    _fields_ = [("window", _Window), ("pad", ctypes.c_char * 64)]


def what_was_set(limit_bytes: int, window_bytes: int) -> Optional[str]:
    """The flag's words for what a launch left set, or None when nothing is (pure: tested on a CPU)."""
    parts = []
    if limit_bytes > 0:
        parts.append(f"{limit_bytes / (1 << 20):.1f} MiB of L2 set aside for persisting lines")
    if window_bytes > 0:
        parts.append(f"an access-policy window of {window_bytes / (1 << 20):.1f} MiB on the timed stream")
    if not parts:
        return None
    return ("a launch set persisting L2 (" + "; ".join(parts) + "): its operands can stay in L2 through the "
            "eviction, so cold samples are not cold")  # fmt: skip


class Guard:
    """Reads and clears the persisting-L2 state of the current CUDA context (driver API calls through `call`)."""

    def __init__(self, call: Callable[[str, tuple], int], stream: Callable[[], int]):
        self.call, self.stream = call, stream

    def _limit(self) -> int:
        value = ctypes.c_size_t(0)
        self.call("cuCtxGetLimit", (ctypes.byref(value), LIMIT_PERSISTING_L2))
        return int(value.value)

    def _window(self) -> int:
        attr = _StreamAttr()
        handle = ctypes.c_void_p(self.stream())
        try:
            self.call("cuStreamGetAttribute", (handle, ATTR_ACCESS_POLICY_WINDOW, ctypes.byref(attr)))
        except RuntimeError:  # the legacy default stream takes no attributes: nothing can be set on it either
            return 0
        return int(attr.window.num_bytes)

    def clear(self) -> None:
        """Persisting lines back to normal, no L2 set aside, no window on the current stream."""
        self.call("cuCtxResetPersistingL2Cache", ())
        self.call("cuCtxSetLimit", (LIMIT_PERSISTING_L2, ctypes.c_size_t(0)))
        if self._window():
            self.call("cuStreamSetAttribute", (ctypes.c_void_p(self.stream()), ATTR_ACCESS_POLICY_WINDOW,
                                               ctypes.byref(_StreamAttr())))  # fmt: skip

    def after_batch(self) -> Optional[str]:
        """What the batch just run left set (what_was_set), after which it is cleared; None: nothing was."""
        found = what_was_set(self._limit(), self._window())
        self.call("cuCtxResetPersistingL2Cache", ())
        if found:
            self.clear()
        return found


def _driver_call(lib) -> Callable[[str, tuple], int]:
    def call(name: str, args: tuple) -> int:
        rc = getattr(lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned CUresult {rc}")
        return rc

    return call


def guard() -> Optional[Guard]:
    """The guard of this process's CUDA context, or None where there is none (no GPU, no driver library)."""
    import torch  # heavy: only where a GPU measures

    if not torch.cuda.is_available():
        return None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    torch.cuda.init()  # the primary context is current on this thread, as the driver calls need
    g = Guard(_driver_call(lib), lambda: torch.cuda.current_stream().cuda_stream)
    try:
        g._limit()  # read, not cleared: what a launch made before this guard set is still its own to be found
    except (RuntimeError, AttributeError):  # a driver without these calls (before CUDA 11) has no persisting L2
        return None
    return g
