"""Nsight Systems: one cell's launch under `nsys profile`, read back from its SQLite export.

Per cell: the host duration of the "profile <cell>" NVTX range, the kernels launched from inside it (a
CUDA runtime/driver launch call that starts in the range, matched to its kernel by correlation id),
their summed GPU time and count.  The range minus the kernels' time is what the launch path costs
around them (Python, Triton's launcher, cuBLAS heuristics) for one eager call.

Tables read (nsys's SQLite export): NVTX_EVENTS (push/pop ranges are eventType 59; a registered
string's text is in StringIds), CUPTI_ACTIVITY_KIND_RUNTIME (the launch calls) and
CUPTI_ACTIVITY_KIND_KERNEL (the kernels).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Optional, Sequence

from gemmbench.profile.ncu import find_tool, missing_tool

NVTX_PUSH_POP = 59


class NsysError(RuntimeError):
    """One line for the user."""


def find_nsys() -> str:
    found = find_tool("nsys")
    if not found:
        raise NsysError(missing_tool("nsys", "Nsight Systems"))
    return found


def profile_command(nsys: str, report_stem: Path, target: Sequence[str]) -> list[str]:
    """CUDA and NVTX traces only: no CPU sampling or context-switch tracing to perturb the launch path."""
    return [
        nsys,
        "profile",
        "--trace",
        "cuda,nvtx",
        "--sample",
        "none",
        "--cpuctxsw",
        "none",
        "--force-overwrite",
        "true",
        "--output",
        str(report_stem),
        *target,
    ]


def export_command(nsys: str, report: Path, sqlite_path: Path) -> list[str]:
    return [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(sqlite_path), str(report)]


def range_columns(sqlite_path: Path, range_name: str) -> Optional[dict]:
    """nsys_* columns of the first push/pop range named `range_name`, or None if the export has no such range."""
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        text = "COALESCE(e.text, s.value)" if "StringIds" in tables else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "StringIds" in tables else ""
        found = con.execute(
            f"SELECT e.start, e.end, e.globalTid FROM NVTX_EVENTS e {join} "
            f"WHERE e.eventType = ? AND {text} = ? ORDER BY e.start LIMIT 1",
            (NVTX_PUSH_POP, range_name),
        ).fetchone()
        if found is None:
            return None
        start, end, tid = found
        kernels = []
        if {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
            kernels = con.execute(
                "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
                "WHERE r.globalTid = ? AND r.start >= ? AND r.start <= ?",
                (tid, start, end),
            ).fetchall()
    finally:
        con.close()
    kernel_ns = sum(e - s for s, e in kernels)
    range_ns = end - start
    return {
        "nsys_range_us": range_ns / 1e3,
        "nsys_kernels": len(kernels),
        "nsys_kernel_us": kernel_ns / 1e3,
        "nsys_gpu_span_us": (max(e for _, e in kernels) - min(s for s, _ in kernels)) / 1e3 if kernels else None,
        "nsys_launch_overhead_us": (range_ns - kernel_ns) / 1e3,
    }
