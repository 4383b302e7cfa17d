"""docs/CLI.md is what the code makes (scripts/make-cli-reference.py, Typer's `utils docs`): word for word under the
typer version its header names, and, under any typer, one section per command listing exactly that command's
options.  Each failure names the one command that fixes it."""

from __future__ import annotations

import difflib
import importlib.util
import re
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
import typer.main

from gemmbench.cli import app

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "CLI.md"
REGENERATE = "python3 scripts/make-cli-reference.py"
# Typer's shell-completion options: `gemmbench --help` lists them, `utils docs` leaves them out
COMPLETION = {"--install-completion", "--show-completion"}


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("make_cli_reference", ROOT / "scripts" / "make-cli-reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def made(gen) -> str:
    return gen.render()


def _diff(committed: str, made: str, lines: int = 40) -> str:
    diff = list(difflib.unified_diff(committed.splitlines(), made.splitlines(), "docs/CLI.md", "the code", lineterm=""))
    return "\n".join(diff[:lines] + ([f"... ({len(diff) - lines} more lines)"] if len(diff) > lines else []))


def test_cli_reference_is_what_the_code_makes(gen, made):
    committed = REFERENCE.read_text(encoding="utf-8")
    made_with, now = gen.recorded_typer_version(committed), version("typer")
    if made_with is not None and made_with != now:
        pytest.skip(
            f"docs/CLI.md was made with typer {made_with}, this is typer {now}, whose `utils docs` may write it "
            f"otherwise: not compared word for word (its commands and options still are); run {REGENERATE}"
        )
    assert committed == made, (
        f"docs/CLI.md differs from what the code makes: run {REGENERATE}\n{_diff(committed, made)}"
    )


def _live() -> dict[str, set[str]]:
    """Each command path of the app (`gemmbench`, `gemmbench baseline save`, ...) and the flags of its options."""
    out: dict[str, set[str]] = {}

    def walk(cmd, path: str) -> None:
        flags = set()
        for param in cmd.get_params(typer.Context(cmd, info_name=path.split()[-1])):
            if param.param_type_name == "option" and not getattr(param, "hidden", False):
                flags |= {*param.opts, *param.secondary_opts}
        out[path] = flags - COMPLETION
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not getattr(sub, "hidden", False):
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "gemmbench")
    return out


def _documented(text: str) -> dict[str, set[str]]:
    """Each section of docs/CLI.md (a heading `gemmbench ...`) and the flags of its option bullets."""
    out: dict[str, set[str]] = {}
    section, code = None, False
    for line in text.splitlines():
        if line.startswith("```"):
            code = not code
        elif code:
            continue
        elif heading := re.fullmatch(r"#+ `(gemmbench(?: [\w-]+)*)`", line):
            section = heading.group(1)
            out[section] = set()
        elif (bullet := re.match(r"\* `(-[^`]*)`", line)) and section:
            out[section] |= set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", bullet.group(1)))
    return out


def test_cli_reference_has_every_command_and_option():
    """The check that holds under any typer: a command, an option or a flag added, renamed or removed in the code
    and not in docs/CLI.md fails here."""
    live, documented = _live(), _documented(REFERENCE.read_text(encoding="utf-8"))
    assert len(live) > 10 and "--shapes" in live["gemmbench run"]  # the walk sees the app
    problems = [f"{cmd}: missing from docs/CLI.md" for cmd in live.keys() - documented.keys()]
    problems += [f"{cmd}: no such command" for cmd in documented.keys() - live.keys()]
    for cmd in sorted(live.keys() & documented.keys()):
        if missing := live[cmd] - documented[cmd]:
            problems.append(f"{cmd}: {', '.join(sorted(missing))} not in docs/CLI.md")
        if extra := documented[cmd] - live[cmd]:
            problems.append(f"{cmd}: docs/CLI.md has {', '.join(sorted(extra))}, which the code has not")
    assert not problems, f"docs/CLI.md differs from the code's commands: run {REGENERATE}\n" + "\n".join(problems)


def test_cli_reference_ignores_the_callers_terminal_and_folders(gen, made, monkeypatch):
    """What the caller's shell sets (a narrow terminal, colour forced, rich's and Typer's width, gemmbench's folders)
    does not reach the file."""
    callers = {"COLUMNS": "33", "LINES": "5", "TERM": "xterm-256color", "FORCE_COLOR": "1", "TERMINAL_WIDTH": "50",
               "TTY_COMPATIBLE": "1", "GEMMBENCH_CONFIG_DIR": "/elsewhere/configs",
               "GEMMBENCH_BASELINE_DIR": "/elsewhere/baselines", "GEMMBENCH_CACHE": "/elsewhere/cache"}  # fmt: skip
    for name, value in callers.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert gen.render() == made


def test_a_folder_of_this_machine_stops_the_generator(gen):
    home_default = f"* `--dir <path>`: Where it goes.  [default: {Path.home()}/.local/share/gemmbench]\n"
    with pytest.raises(SystemExit, match="folders of this machine"):
        gen.refuse_machine_paths("# `gemmbench`\n\n" + home_default)
    gen.refuse_machine_paths("* `--dir <path>`: Where it goes.  [default: ~/.local/share/gemmbench]\n")
