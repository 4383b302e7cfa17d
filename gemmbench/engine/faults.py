"""What a fault is, in the worker: its one-line reason (naming the plugin's line, not torch's) and whether it left the
CUDA context unusable (then only a new process recovers)."""

from __future__ import annotations

import os
import traceback


def one_line(exc: BaseException) -> str:
    """'Type: first line of the message (at file:line)' — the place is the innermost frame outside torch and
    Triton, so that a plugin's bug names the plugin's line."""
    text = str(exc).strip().splitlines()
    where = ""
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not _library(f.filename) and f.name != "refuse_exit"
    ]
    if frames:
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500] + where


def _library(path: str) -> bool:
    return any(f"{os.sep}{lib}{os.sep}" in path for lib in ("torch", "triton", "site-packages"))


def context_poisoned() -> bool:
    """True when the CUDA context is unusable (a sticky error): only a new process recovers."""
    import torch  # heavy, off this module's top: main reports a failed import as startup_failed

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return True
