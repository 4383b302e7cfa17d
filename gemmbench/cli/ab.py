"""`gemmbench run --repeat N --ab BASELINE_COMMAND`: the baseline build's sweep and this build's, in 2N fresh
processes interleaved A B A B ... (A: baseline, B: candidate), as TritonBench's A/B runs alternate its two sides, so
that a drift of the machine during the run (clocks, temperature, a neighbour's load) falls on both sides alike instead
of on the side that ran last.

The baseline is any command that runs a gemmbench build (another venv's `gemmbench`, `python -m gemmbench` under
another checkout): it is called as `BASELINE_COMMAND run <this run's sweep options> --out PART.parquet`, with only
the sweep options given other than their defaults (an older build may not know newer options it is not asked for).
Its N part files are joined into one baseline file beside the candidate's, `<candidate>-baseline.parquet`, with one
run id and `process` 0..N-1, so `gemmbench compare` tests per-process medians on both sides."""

from __future__ import annotations

import shlex
import shutil
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


def sweep_args(options: Sequence[tuple[str, object, object]]) -> list[str]:
    """(flag, value, default) -> the command-line words of those that differ from their default: a list value is
    the flag once per item, True is the bare flag (False is the default of every flag here)."""
    words: list[str] = []
    for flag, value, default in options:
        if value == default or value is None:
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


def run_baseline(command: list[str], args: list[str], out: Path) -> None:
    """One baseline process: the sweep into `out`; AbError when it exits non-zero or writes no file."""
    cmd = [*command, "run", *args, "--out", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise AbError(f"baseline `{shlex.join(cmd)}` could not start: {exc}") from None
    if done.returncode != 0 or not out.is_file():
        lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
        last = f": {lines[-1].strip()}" if lines else ""
        raise AbError(f"baseline `{shlex.join(cmd)}` exited {done.returncode}{last}")


def join_baseline(parts: Sequence[Path], path: Path) -> Optional[int]:
    """The baseline processes' part files (part i: process i) as one file of one run; its row count (None: no part)."""
    from gemmbench import store  # heavy (pandas)

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
