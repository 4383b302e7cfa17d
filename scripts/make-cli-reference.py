#!/usr/bin/env python3
"""Write docs/CLI.md, every command and option of gemmbench, from the code: Typer's `utils docs` over gemmbench.cli.

    python3 scripts/make-cli-reference.py           # (re)write docs/CLI.md
    python3 scripts/make-cli-reference.py --check   # exit 1 if docs/CLI.md differs from what the code makes

The text is Typer's, word for word, under a header that says how it was made (tests/test_cli_reference.py checks the
file against the code), so the reference cannot drift from the help texts: change those, then run this.

The same code makes the same file on any machine: Typer runs in a process of its own, in this checkout, with an
environment made here rather than inherited (a fixed terminal of 80 columns, no colour, UTF-8, gemmbench's user
folders named as their Linux defaults under `~`), and a default that would still name a folder of this machine (the
home folder, this checkout, the Python environment) stops the script instead of being written.
What Typer writes can change with Typer's version (its metavars, its HTML escaping, which options it lists), so the
header names the version that made the file; the test compares word for word only under that version.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "CLI.md"
COMMAND = "python3 scripts/make-cli-reference.py"
VERSION_NOTE = re.compile(r"Typer's `utils docs`, typer ([^)\s]+)\)")  # the version in header()


def header(typer_version: str) -> str:
    return (
        f"> Generated from the code by `{COMMAND}` (Typer's `utils docs`, typer {typer_version}): do not edit.\n"
        "> Change the help texts in `gemmbench/cli/` and run that command; `tests/test_cli_reference.py` fails while\n"
        "> this file and the code differ.\n\n"
    )


def environment() -> dict[str, str]:
    """What Typer runs under: nothing of the caller's terminal, colours or folders, only what finds Python."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": os.environ.get("HOME", "/"),  # Python's user site; a default that shows it stops render()
        "PYTHONUTF8": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TERM": "dumb",
        "COLUMNS": "80",
        "LINES": "24",
        "NO_COLOR": "1",
        # the user's folders, named as their Linux defaults are (gemmbench/locations.py and measure/ceilings.py read
        # these verbatim before platformdirs or the home folder; platformdirs takes no relative XDG_* folder)
        "GEMMBENCH_CONFIG_DIR": "~/.config/gemmbench/configs",
        "GEMMBENCH_BASELINE_DIR": "~/.local/share/gemmbench/baselines",
        "GEMMBENCH_CACHE": "~/.cache/gemmbench",
    }
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH"):  # where this Python finds its packages and libraries, if set
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def machine_paths() -> list[str]:
    """Folders of this machine that no line of the reference may name."""
    home = str(Path.home())
    deep = [str(ROOT), sys.prefix, str(Path(sys.executable).resolve().parent)]  # /usr alone would match any /usr/...
    return sorted({p for p in deep if len(Path(p).parts) >= 3} | ({home} if home != "/" else set()))


def render() -> str:
    """The text of docs/CLI.md."""
    typer_cmd = [sys.executable, "-m", "typer", "gemmbench.cli", "utils", "docs", "--name", "gemmbench"]
    # cwd: `python -m` imports gemmbench from this checkout, whatever else is installed
    done = subprocess.run(typer_cmd, cwd=ROOT, env=environment(), capture_output=True, text=True, encoding="utf-8")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(typer_cmd[1:])} failed (exit {done.returncode}):\n{done.stderr}")
    text = done.stdout.rstrip("\n") + "\n"  # typer.echo adds a newline to its own
    refuse_machine_paths(text)
    return header(version("typer")) + text


def refuse_machine_paths(text: str) -> None:
    """Stop (exit 1, naming the lines) where the text names a folder of this machine: a default computed from the
    home folder, the working directory or the Python environment would make the file differ from machine to machine."""
    leaks = [p for p in machine_paths() if p in text]
    if leaks:
        lines = dict.fromkeys(line for line in text.splitlines() if any(p in line for p in leaks))
        raise SystemExit(
            f"the reference would name folders of this machine ({', '.join(leaks)}); give those options a default "
            "that does not depend on the machine, or show it in words (typer.Option(show_default=...)):\n"
            + "\n".join(lines)
        )


def recorded_typer_version(text: str) -> str | None:
    """The typer version a docs/CLI.md text says it was made with."""
    found = VERSION_NOTE.search(text)
    return found.group(1) if found else None


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: make-cli-reference.py [--check]", file=sys.stderr)
        return 2
    text = render()
    if not check:
        OUTPUT.write_text(text, encoding="utf-8")
        return 0
    committed = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
    if committed == text:
        return 0
    made_with, now = recorded_typer_version(committed), version("typer")
    why = f" (it was made with typer {made_with}, this is typer {now})" if made_with and made_with != now else ""
    print(f"docs/CLI.md differs from what the code makes{why}: run {COMMAND}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
