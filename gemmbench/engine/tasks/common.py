"""What the tasks' worker functions share: a variant's supports() as a phase of its own."""

from __future__ import annotations

from typing import Any, Callable

from gemmbench.shapes import Problem

FAILED = object()  # a variant's supports() raised: its error is recorded already


def unsupported(ctx, name: str, variant, problem: Problem, rows_for: Callable[[str], list]) -> Any:
    """variant.unsupported_reason(), as a phase of its own: a plugin's supports() that hangs is stopped by the
    watchdog and blamed on this variant, and one that raises is this variant's error (FAILED, recorded)."""
    ctx.begin(name, "supports")
    try:
        return variant.unsupported_reason(problem, ctx.dev)
    except Exception as exc:  # noqa: BLE001 - a plugin's bug: this variant's error row, the cell goes on
        ctx.failed(name, rows_for, "supports", exc)
        return FAILED
