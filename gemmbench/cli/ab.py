"""`gemmbench run --repeat N --ab BASELINE_COMMAND`: the baseline build's sweep and this build's, in 2N fresh
processes interleaved A B A B ... (A: baseline, B: candidate), as TritonBench's A/B runs alternate its two sides, so
that a drift of the machine during the run (clocks, temperature, a neighbour's load) falls on both sides alike instead
of on the side that ran last.

The baseline is any command that runs a gemmbench build (another venv's `gemmbench`, `python -m gemmbench` under
another checkout): it is called as `BASELINE_COMMAND run <this run's sweep options> --out PART.parquet`, with every
sweep option its `run --help` lists, defaults included (two builds with other defaults still sweep the same cells); an
option it does not list is left out where this sweep leaves it at its default, and refused where it does not.
Its N part files are joined into one baseline file beside the candidate's, `<candidate>-baseline.parquet`, with one
run id and `process` 0..N-1, so `gemmbench compare` tests per-process medians on both sides."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Optional, Sequence

BASELINE, CANDIDATE = "baseline", "candidate"


class AbError(Exception):
    """A baseline process failed: its command, exit code and last line of stderr."""


def order(repeat: int) -> list[tuple[str, int]]:
    """The processes in the order they run: (side, process index), baseline first in each pair."""
    return [(side, i) for i in range(repeat) for side in (BASELINE, CANDIDATE)]


def parse_command(text: str) -> list[str]:
    """The baseline command as argv; ValueError (one line) when it is empty, unparsable or not a program here."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"--ab {text!r}: {exc}") from None
    if not argv:
        raise ValueError("--ab: give the command that runs the baseline build's gemmbench")
    if shutil.which(argv[0]) is None:
        raise ValueError(f"--ab {text!r}: {argv[0]!r} is not an executable program (a path or a name on PATH)")
    return argv


def baseline_options(command: list[str]) -> set[str]:
    """The options the baseline build's `run --help` lists; AbError when it cannot say."""
    import os
    import re

    cmd = [*command, "run", "--help"]
    try:  # wide and plain: every option on a line of its own, whole
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, COLUMNS="300", NO_COLOR="1"))
    except OSError as exc:
        raise AbError(f"baseline `{shlex.join(cmd)}` could not start: {exc}") from None
    if done.returncode != 0:
        raise AbError(f"baseline `{shlex.join(cmd)}` exited {done.returncode}{_last_line(done.stderr)}")
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))


def sweep_args(options: Sequence[tuple[str, object, object]], known: Optional[set[str]] = None) -> list[str]:
    """(flag, value, default) -> the command-line words for the baseline: every option `known` lists (its `run
    --help`), defaults too; without `known`, those that differ from their default.  A list value is the flag once per
    item, True the bare flag (False, the default of every flag here, is no word).  An option set off its default that
    `known` lacks is an AbError naming it."""
    words: list[str] = []
    for flag, value, default in options:
        if known is not None and flag not in known:
            if value != default and value is not None:
                raise AbError(f"this sweep sets {flag}, which the baseline build's `run` does not have")
            continue
        if value is None or value is False or (known is None and value == default):
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                words += [flag, str(item)]
        else:
            words += [flag, str(value)]
    return words


def baseline_path(candidate: Path) -> Path:
    return candidate.with_name(f"{candidate.stem}-baseline.parquet")


STOP_S = 60  # how long a baseline process stopped by a signal may take to save its finished rows


def run_baseline(command: list[str], args: list[str], out: Path) -> None:
    """One baseline process: the sweep into `out`; AbError when it exits non-zero or writes no file.  Stopped here
    (Ctrl-C, SIGTERM: KeyboardInterrupt), the baseline is stopped the same way, and waited for while it saves its
    finished rows, before the interrupt goes on."""
    cmd = [*command, "run", *args, "--out", str(out)]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        raise AbError(f"baseline `{shlex.join(cmd)}` could not start: {exc}") from None
    try:
        _, stderr = proc.communicate()
    except BaseException:
        proc.send_signal(signal.SIGTERM)  # gemmbench stops on it as on Ctrl-C, keeping its finished rows
        try:
            proc.communicate(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    if proc.returncode != 0 or not out.is_file():
        raise AbError(f"baseline `{shlex.join(cmd)}` exited {proc.returncode}{_last_line(stderr)}")


def _last_line(stderr: Optional[str]) -> str:
    lines = [line for line in (stderr or "").splitlines() if line.strip()]
    return f": {lines[-1].strip()}" if lines else ""


def join_baseline(parts: Sequence[Path], path: Path) -> Optional[int]:
    """The baseline processes' run files (part i: process i; a process stopped on the way may have left only its
    parts folder) as one file of one run; its row count (None: no part)."""
    from gemmbench.results import store  # heavy (pandas)

    if not parts:
        return None
    rows: list[dict] = []
    run_id = None
    for process, part in enumerate(parts):
        got = store.records(store.load([part]))
        run_id = run_id or (got[0]["run_id"] if got else None)
        rows += [{**r, "process": process, "run_id": run_id or r["run_id"]} for r in got]
    store.write_rows(path, rows)
    return len(rows)
