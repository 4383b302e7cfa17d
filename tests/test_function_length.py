"""No function of gemmbench is longer than MAX_LINES, from its def line to its last line (read from the syntax tree):
a longer one does several jobs, each of which wants a name.  The kernels are left out: a Triton kernel is one
function by nature (its body is what the GPU runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import gemmbench

MAX_LINES = 80
PACKAGE = Path(gemmbench.__file__).resolve().parent
EXEMPT = PACKAGE / "kernels"


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of each function or method (nested ones too) longer than `limit` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def _function(lines: int, indent: str = "") -> str:
    """A function of `lines` lines, from its def line to its last, decorated (a decorator is not counted)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}@decorator\n{indent}def f():\n{body}"


def test_the_count_runs_from_the_def_line_to_the_last_line():
    assert long_functions(_function(MAX_LINES)) == []
    assert long_functions(_function(MAX_LINES + 1)) == [("f", MAX_LINES + 1)]
    assert long_functions("class C:\n" + _function(MAX_LINES + 1, indent="    ")) == [("f", MAX_LINES + 1)]


def test_no_function_outside_the_kernels_is_longer_than_max_lines():
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {name} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        if EXEMPT not in path.parents
        for name, lines in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert found == [], f"functions over {MAX_LINES} lines (split each into helpers of one job):\n" + "\n".join(found)
