"""The table of timing modes (gemmbench.measure.timing_modes) is the one place a mode's facts live: every mode has
every fact, the modules that act on a mode read them from it, and no other module of gemmbench branches on a mode's
name (found by reading their syntax trees)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gemmbench.measure import telemetry, timing, timing_modes
from gemmbench.measure.timing_modes import ALL, MODES, TimingMode
from gemmbench.plot import style

PACKAGE = Path(timing_modes.__file__).resolve().parent.parent
TABLE = Path(timing_modes.__file__).resolve()
L2_STATES = {"cold", "warm", "streaming"}


@pytest.mark.parametrize("name", MODES)
def test_every_mode_has_every_fact(name):
    m = ALL[name]
    assert m.name == name
    assert m.l2_state in L2_STATES
    assert m.sampler in timing.SAMPLERS, f"{name}: no sampler {m.sampler!r} in timing.SAMPLERS"
    assert m.calls in (timing_modes.ONE, timing_modes.PER_COPY, timing_modes.CHOSEN)
    assert isinstance(m.energy_per_call, bool) and isinstance(m.gpu, bool) and isinstance(m.captures_graph, bool)
    # a ladder is measured in a mode of its own name, which measures its own (ceilings caches it under that name)
    assert m.ladder in ALL and ALL[m.ladder].ladder == m.ladder
    assert m.label.startswith(f"{name} timing (") and m.label.endswith(")")
    assert m.help and "\n" not in m.help and not m.help.endswith(".")
    # J/call needs the calls a sample runs
    assert not (m.energy_per_call and m.calls == timing_modes.CHOSEN)


def test_the_option_the_names_and_the_samplers_are_the_table_s():
    assert [m.value for m in TimingMode] == list(MODES)
    assert set(timing.SAMPLERS) == {m.sampler for m in ALL.values()}
    assert timing_modes.L2_STATE == {n: m.l2_state for n, m in ALL.items()}
    assert timing_modes.DEFAULT in ALL and not ALL[timing_modes.CPU].gpu
    assert [n for n, m in ALL.items() if not m.gpu] == [timing_modes.CPU]  # the CPU has one mode
    assert timing_modes.default(True) == timing_modes.DEFAULT and timing_modes.default(False) == timing_modes.CPU


def test_run_timing_help_names_every_mode_with_its_words():
    text = timing_modes.help_text()
    for m in ALL.values():
        assert f"{m.name} ({m.help})" in text


@pytest.mark.parametrize("name", MODES)
def test_readers_take_the_mode_facts_from_the_table(name):
    m = ALL[name]
    assert telemetry.calls_per_sample(name, 7) == (m.calls_per_sample(7) if m.energy_per_call else None)
    assert style._timing_label(name) == m.label
    assert timing.plan_copies(name, 8, 1, 1 << 40).copies == (8 if m.over_copies else 1)


def test_calls_per_sample_by_kind():
    assert [ALL[n].calls_per_sample(8) for n in MODES] == [
        {timing_modes.ONE: 1, timing_modes.PER_COPY: 8, timing_modes.CHOSEN: None}[ALL[n].calls] for n in MODES
    ]


def test_an_unknown_mode_is_one_line_naming_the_modes():
    with pytest.raises(ValueError, match="unknown timing mode 'fast'") as info:
        timing_modes.get("fast")
    assert all(n in str(info.value) for n in MODES)
    assert style._timing_label("fast") == "fast timing"  # a row of another build still gets a title


# ---------------------------------------------------------------- no branching on a mode's name outside the table


def _names(node: ast.AST) -> set[str]:
    """The string constants of a constant or of a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names(e) for e in node.elts)) if node.elts else set()
    return set()


def mode_branches(source: str) -> list[tuple[int, str]]:
    """(line, code) of each place a module decides by a timing mode's name: a comparison with it (==, !=, in, not
    in), a dict keyed by two or more of them (a table of its own), a match case on one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hit = any(_names(side) & set(MODES) for side in (node.left, *node.comparators))
        elif isinstance(node, ast.Dict):
            hit = len(set().union(*(_names(k) for k in node.keys if k is not None)) & set(MODES)) >= 2
        elif isinstance(node, ast.MatchValue):
            hit = bool(_names(node.value) & set(MODES))
        else:
            continue
        if hit:
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


@pytest.mark.parametrize(
    "code",
    [
        'if mode == "stream":\n    pass',
        'x = 1 if m != "wall" else 2',
        'ok = mode in ("graph", "stream")',
        'ok = rows["timing_mode"] == "cold"',
        'LABELS = {"cold": "a", "cupti": "b"}',
        'match mode:\n    case "graph":\n        pass',
    ],
)
def test_the_search_finds_a_branch_on_a_mode_name(code):
    assert mode_branches(code), code


@pytest.mark.parametrize(
    "code",
    ['if kind == "eager":\n    pass', "mode = timing_modes.default(gpu)", 'COLUMN = {"eager": "gap_us", "graph": "x"}'],
)
def test_the_search_leaves_other_strings_alone(code):
    assert mode_branches(code) == []


def test_no_module_but_the_table_branches_on_a_mode_name():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {code}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() != TABLE
        for line, code in mode_branches(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "read the mode's fact from gemmbench.measure.timing_modes instead:\n" + "\n".join(found)
