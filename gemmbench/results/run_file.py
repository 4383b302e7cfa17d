"""A results file's life around its rows: where it goes (output_path), one writer at a time (lock), never replaced
without being told (refuse_existing, refuse_written), and opened as a new run, an --append, a --force or a --resume
(open_run: the writer, the run id and, for a resume, the cells the file still lacks).  Writing rows as parts and
joining them into the file is RunWriter's (store.py), and reading an unfinished file's parts is store.load's.
A refusal is a RunFileError: one line, which the command prints (exit 2)."""

from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path
from typing import Optional, Sequence


class RunFileError(ValueError):
    """A results file that may not be written as asked: one line for the user."""


def refuse_existing(paths: list[Path], force: bool) -> None:
    """Results already written are never replaced without --force: one line naming the first that exists."""
    there = [p for p in paths if p.exists()]
    if there and not force:
        more = f" (and {len(there) - 1} more)" if len(there) > 1 else ""
        raise RunFileError(f"--out: {there[0]} exists{more}; --force replaces it")


_HELD: dict = {}  # the lock files this process holds, open until it ends (a command run again in it holds them)


def lock(path: Path) -> None:
    """One writer per results file: a second gemmbench writing the same file at the same time is refused in one
    line (the lock is a hidden file beside it, `.NAME.lock`, held until this process ends)."""
    import fcntl  # POSIX; the commands that write results run where the GPUs are

    lockfile = path.with_name(f".{path.name}.lock").resolve()
    if lockfile in _HELD:
        return
    handle = open(lockfile, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        who = handle.read().strip() or "another process"
        handle.close()
        raise RunFileError(
            f"--out {path}: gemmbench {who} is writing it now; wait for it, or give another --out"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    if not _HELD:
        atexit.register(release_locks)
    _HELD[lockfile] = handle


def release_locks() -> None:
    """The locks this process holds, let go (at exit, or before it dies by a signal).  The files stay: one removed
    while another process waits on it would let two writers in."""
    for handle in _HELD.values():
        handle.close()
    _HELD.clear()


def output_path(out: Path, run_id: str) -> Path:
    """A run's Parquet path (`out` itself when it ends in .parquet), its folder made and writable, before any
    cell runs."""
    import tempfile

    path = out if out.suffix == ".parquet" else out / f"{run_id}.parquet"
    if path.is_dir():
        raise RunFileError(f"--out {out}: is a folder; give a folder without the .parquet suffix, or a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFileError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    try:  # a file made and removed: the only sure test (os.access says yes to root, and /proc refuses anyway)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".gemmbench-probe-"):
            pass
    except OSError as exc:
        raise RunFileError(f"--out {out}: cannot write in {path.parent} ({exc.strerror or exc})") from None
    return path


def refuse_written(path: Path) -> None:
    """One line where a run file, or an unfinished sweep's parts of one, is at `path` (nothing to replace without
    --append or --force)."""
    from gemmbench.results.store import parts_dir  # heavy (pandas)

    if path.exists():
        raise RunFileError(f"--out {path} exists; --append adds this sweep's rows to it, --force replaces it")
    if parts_dir(path).exists():
        raise RunFileError(f"--out {path}: an unfinished sweep's rows are in {parts_dir(path)}; --resume {path} finishes "
                   "it, --force replaces it")  # fmt: skip


def open_run(out_path: Path, run_id: str, meta: dict, cells: list, build: Sequence[str], append: bool, force: bool,
             resume: Optional[Path]) -> tuple:  # fmt: skip
    """(the run's writer, its run id, the cells still to run, the rows kept): a new file; an existing --out only with
    --append (its rows kept) or --force (its rows and parts removed now); --resume: the file's own run, less the
    cells it has finished (`build`: this sweep's timing mode, gemmbench version and commit, as store.resume_key
    has them).  The file is locked first, and held until this process ends."""
    from gemmbench.results import store

    path = resume if resume is not None else output_path(out_path, run_id)
    lock(path)
    if resume is None and not (append or force):  # written by a run that ended while this one started
        refuse_written(path)
    written = path.exists() or store.parts_dir(path).exists()
    if written and force:  # replaced now: never read later as one run with this sweep's parts
        path.unlink(missing_ok=True)
        shutil.rmtree(store.parts_dir(path), ignore_errors=True)
    kept: list = []
    if resume is not None or (append and written):
        option = "--resume" if resume is not None else "--append"
        try:
            kept = store.records(store.load([path]))
        except store.StoreError as exc:
            raise RunFileError(f"{option}: {exc}") from None
    writer = store.RunWriter(path, meta, kept)
    if resume is None:
        return writer, run_id, cells, kept
    return writer, kept[0]["run_id"] if kept else run_id, not_done(cells, kept, build), kept


def not_done(cells: list, kept: list, build: Sequence[str]) -> list:
    """The cells a resumed run still has to run: a row of the same cell, timing mode and build is done (an error
    row too); a cell never run has no row at all."""
    from gemmbench.results import store
    from gemmbench.results.shard import cell_key

    done = {store.resume_key(r) for r in kept}
    left = [(p, [n for n in names if "|".join([cell_key(p, n), *build]) not in done]) for p, names in cells]
    return [(p, names) for p, names in left if names]
