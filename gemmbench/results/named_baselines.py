"""Named baselines for `gemmbench compare`: the search path, resolving a name, and what `baseline list` shows.

A name (`h100`) is looked up as NAME.parquet in these folders, the first that has it winning:

  1. ./results/baselines          the working directory's (a checkout's, or where `baseline save` wrote by default)
  2. the user's baselines folder   GEMMBENCH_BASELINE_DIR, else platformdirs' data dir + /baselines
  3. the shipped baselines         gemmbench/baselines in the package

Anything that reads as a path (it exists, ends in .parquet, or holds a /) is used as it is, never searched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gemmbench import locations

SAVE_DIR = Path("results") / "baselines"  # `baseline save` writes here by default: the first folder searched
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a baseline's name becomes a file name


class BaselineError(ValueError):
    """One line for the user (exit 2)."""


def search_path() -> list[tuple[str, Path]]:
    """(where, folder) in the order a name is looked up: "cwd", "user", "shipped"."""
    return [
        ("cwd", SAVE_DIR),
        ("user", locations.user_baselines_dir()),
        ("shipped", locations.shipped_baselines_dir()),
    ]


def is_path(spec: str) -> bool:
    """Whether `spec` is a path to use as it is rather than a name to look up."""
    return Path(spec).exists() or spec.endswith(".parquet") or "/" in spec or "\\" in spec


def resolve(spec: str) -> Path:
    """The run file or folder a baseline argument means: a path as it is, a name through search_path()."""
    if is_path(spec):
        return Path(spec)
    if not NAME.fullmatch(spec):
        raise BaselineError(f"baseline {spec!r}: not a name (letters, digits, '.', '_', '-') nor an existing path")
    for _, folder in search_path():
        if (folder / f"{spec}.parquet").is_file():
            return folder / f"{spec}.parquet"
    raise BaselineError(f"no baseline named {spec!r} (looked in {shown_path()}; `gemmbench baseline list` shows them)")


def shown_path() -> str:
    """The search path as messages show it: "./results/baselines, /home/u/.local/share/gemmbench/baselines, …"."""
    return ", ".join(str(f) if f.is_absolute() else f"./{f}" for _, f in search_path())


@dataclass(frozen=True)
class Entry:
    """A named baseline found on the search path; `shadowed` where a folder earlier on the path has the name."""

    name: str
    where: str  # "cwd" | "user" | "shipped", or two joined by " = " (one folder met twice on the path)
    path: Path
    shadowed: bool


def entries() -> list[Entry]:
    """Every NAME.parquet on the search path, in search order, each name's first one unshadowed.  A folder met
    twice (in a checkout's root ./results/baselines is the shipped folder) is listed once, as both ("cwd =
    shipped")."""
    folders: dict[Path, tuple[str, Path]] = {}  # resolved folder -> (where, as found first)
    for where, folder in search_path():
        if folder.is_dir():
            key = folder.resolve()
            first = folders.get(key)
            folders[key] = (f"{first[0]} = {where}", first[1]) if first else (where, folder)
    seen: set[str] = set()
    found = []
    for where, folder in folders.values():
        for f in sorted(folder.glob("*.parquet")):
            found.append(Entry(f.stem, where, f, f.stem in seen))
            seen.add(f.stem)
    return found


@dataclass(frozen=True)
class Summary:
    """What `baseline list` shows of one baseline file: its stack, when it was measured, how many rows."""

    gpu: str
    torch: str
    triton: str
    cuda: str
    driver: str
    date: str  # the first and last day of its rows
    rows: int
    error: Optional[str] = None  # a file that cannot be read: why (the other columns are empty)


def summary(path: Path) -> Summary:
    from gemmbench.results.store import StoreError, load  # heavy (pandas, pyarrow): only when listing

    try:
        df = load([path])
    except StoreError as exc:
        return Summary("", "", "", "", "", "", 0, error=str(exc))

    def values(col: str) -> str:
        return ", ".join(sorted(set(df[col].dropna()))) or "-"

    days = sorted({str(t)[:10] for t in df["timestamp"].dropna()})
    date = "-" if not days else days[0] if days[0] == days[-1] else f"{days[0]} … {days[-1]}"
    return Summary(values("gpu"), values("torch"), values("triton"), values("cuda"), values("driver"), date, len(df))


def for_gpu(gpu: str) -> Optional[Entry]:
    """The first baseline on the search path (unshadowed) measured on exactly this GPU model, or None: the gate
    compares a runner's GPU only with a baseline of its own model (scripts/ci-perf.sh)."""
    return next((e for e in entries() if not e.shadowed and summary(e.path).gpu == gpu), None)
