"""Result rows: checked against the run schema (gemmbench.results.run_schema), crash-safe writes, and loading many runs
(of this run format only: run_schema.RUN_FORMAT) into one DataFrame.

One row per measured cell (problem x variant).  A run is one Parquet file, its rows written in parts as they land and
joined at the end (RunWriter), so a run killed at any moment still leaves every finished cell readable.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gemmbench.results.atomic_write import write_atomic
from gemmbench.results.cells import CELL_KEY
from gemmbench.results.metrics import missing
from gemmbench.results.run_schema import (
    ADDED_COLUMNS,
    COLUMNS,
    COMPLETE,
    LAST_READER,
    META_KEY,
    OLD_META_KEY,
    REQUIRED,
    RUN_FORMAT,
    SCHEMA,
    STATUSES,
    TYPES,
)

RUN_ID_NAME = 80


def new_run_id(shape_set: str) -> str:
    """<UTC time>-<set>-<4 hex>: sorts by time, names its set (its first RUN_ID_NAME characters: the id is a file
    name, and file systems refuse names past 255 bytes), never collides within a second."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", shape_set)[:RUN_ID_NAME].strip(".") or "run"
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{safe}-{uuid.uuid4().hex[:4]}"


def resume_key(row) -> str:
    """What makes a finished cell count as done for `run --resume`: the cell, its timing mode and the build."""
    return "|".join([cell_key(row), str(row.get("timing_mode")), str(row.get("gemmbench_version")),
                     str(row.get("git_sha"))])  # fmt: skip


def cell_key(row) -> str:
    """One cell's key from a mapping with the CELL_KEY columns (a result row, or a problem's fields and its
    variant): the string cell_keys makes for the cell's row, missing values as ""."""
    return "|".join("" if missing(row.get(c)) else str(row[c]) for c in CELL_KEY)


def cell_keys(df: pd.DataFrame) -> pd.Series:
    """CELL_KEY as one string per row, the same for a run row and a profile row of one cell whatever the dtypes
    (int64 or nullable Int64, string or object, None or NA for a dense cell's routing)."""
    if df.empty:  # agg(axis=1) of no rows is a DataFrame, not a Series
        return pd.Series([], index=df.index, dtype=object)
    part = df[list(CELL_KEY)].astype(object)
    # missing as "": pandas 3's astype(str) keeps None/NA missing (a float NaN), which "|".join refuses
    return part.where(part.notna(), "").astype(str).agg("|".join, axis=1)


class StoreError(ValueError):
    """A row or a file that cannot be stored or loaded; the one-line message is meant for users."""


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def normalize_row(row: dict) -> dict:
    """A row in column order, checked: every column known, every column a producer must fill (REQUIRED, and
    COMPLETE) filled, the status one of STATUSES, each value of its column's type; absent measured columns None,
    run_format set.  Rows are complete by construction (engine/rows.cell_row, then the sink's run_id, process and
    timestamp): nothing here makes up a value a producer left out.

    A dict `config` is serialized to JSON text (sorted keys, so equal configs compare equal).
    """
    unknown = [k for k in row if k not in TYPES]
    if unknown:
        raise StoreError(f"unknown column {unknown[0]!r} in result row")
    out = {name: row.get(name) for name in COLUMNS}
    out["run_format"] = RUN_FORMAT
    if out["config"] is not None and not isinstance(out["config"], str):
        out["config"] = json.dumps(out["config"], sort_keys=True)
    if out["samples_us"] is not None:
        out["samples_us"] = [float(x) for x in out["samples_us"]]  # numpy arrays, tuples -> list
    for name in REQUIRED + COMPLETE:
        if out[name] is None:
            raise StoreError(f"result row is missing required column {name!r}")
    if out["status"] not in STATUSES:
        raise StoreError(f"bad status {out['status']!r} (expected one of {', '.join(STATUSES)})")
    # Type-check each value now, so the error names the column and happens at append(), not
    # later as an anonymous Arrow error while rewriting the file.
    for name, value in out.items():
        if value is not None:
            try:
                pa.array([value], type=TYPES[name])
            except (pa.ArrowException, TypeError, ValueError) as e:
                raise StoreError(f"column {name!r}: bad value {value!r} ({_one_line(e)})") from None
    return out


def write_rows(path: str | Path, rows: list[dict], meta: dict | None = None) -> None:
    """Write `rows` as one Parquet file, atomically.  meta: extra file metadata (bytes -> bytes), e.g. a shard's.

    Temp file in the same folder (os.replace is only atomic within one file system), fsync, then
    rename over `path`: readers see the old complete file or the new complete file, never half.
    """
    table = pa.Table.from_pylist([normalize_row(r) for r in rows], schema=SCHEMA)
    if meta:
        table = table.replace_schema_metadata({**SCHEMA.metadata, **meta})
    write_table(path, table)


def write_table(path: str | Path, table: pa.Table) -> None:
    """Any Arrow table as a Parquet file, atomically (see write_rows)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_atomic(path, sink.getvalue().to_pybytes())


PART_ROWS, PART_S = 64, 5.0  # a part is written once it holds this many rows, or its first row is this old
# A joined file's metadata: the highest part number its rows include.  Parts up to it are already in the file (a
# sweep killed between the join and the parts' removal leaves them), so no reader counts them twice.
JOINED_KEY = b"gemmbench.joined_parts"
_PART = re.compile(r"part-(\d+)\.parquet")


def parts_dir(path: str | Path) -> Path:
    """Where a run file's rows go while its sweep runs: <file>.parts/, one Parquet part per batch of rows."""
    path = Path(path)
    return path.with_name(path.name + ".parts")


def _parts(path: Path) -> list[tuple[int, Path]]:
    """The parts in a run file's parts folder, by number: only files named as RunWriter names them (a stray file
    there is not a part)."""
    found = ((_PART.fullmatch(f.name), f) for f in parts_dir(path).glob("part-*.parquet") if f.is_file())
    return sorted((int(m[1]), f) for m, f in found if m)


def _joined(path: Path) -> int:
    """The highest part number a run file's rows include (its JOINED_KEY), 0 for none or no file."""
    try:
        value = (pq.read_schema(path).metadata or {}).get(JOINED_KEY, b"0")
    except (OSError, pa.ArrowException):
        return 0  # absent, or not readable: the reader that opens it says why
    return int(value) if value.isdigit() else 0


def live_parts(path: str | Path) -> list[Path]:
    """The parts of a run file that hold rows its joined file does not: those numbered after its JOINED_KEY."""
    path = Path(path)
    after = _joined(path) if path.is_file() else 0
    return [f for n, f in _parts(path) if n > after]


class RunWriter:
    """The rows of one run, written as they come at a cost that grows with the rows, not with their square.

    New rows go to parts in `parts_dir(path)` (each part written once, atomically: every PART_ROWS rows, or when the
    oldest unwritten row is PART_S old: a thread of its own looks, so a cell that hangs for minutes does not hold the
    rows before it); `close` joins the file's rows into `path` by one atomic rename and removes the parts.  A sweep killed on the way leaves `path` as it was and the parts beside
    it: every loader reads them as the file's rows (result_files), and `run --resume` finishes them into one file.
    `rows`: the file's rows so far (run --append or --resume: kept, the new ones added); without them an existing
    file at `path` is replaced at `close` (the command refuses that without --force).  The joined file names the
    last part it holds (JOINED_KEY), and parts are numbered on from it, so a kill between the join and the parts'
    removal doubles no row.  A write that fails (a full disk), in the sweep's thread or the clock's, is raised at
    the next row, which stops the sweep; what could not be written is `unwritten`."""

    def __init__(self, path: str | Path, meta: dict | None = None, rows: Sequence[dict] = ()):
        self.path = Path(path)
        self.meta = meta  # extra file metadata, in every part and the joined file (write_rows)
        self._rows: list[dict] = [normalize_row(r) for r in rows]
        self.kept = len(self._rows)
        self._pending: list[dict] = []
        self._since = 0.0  # when the oldest pending row came (time.monotonic)
        numbers = [n for n, _ in _parts(self.path)] + [_joined(self.path) if self.path.is_file() else 0]
        self._next = 1 + max(numbers)
        self._lock = threading.RLock()
        self._stop: Optional[threading.Event] = None  # the clock thread's, started with the first row
        self.failed: Optional[OSError] = None  # the first write that failed, raised at the next row

    @property
    def added(self) -> int:
        return len(self._rows) - self.kept

    @property
    def rows(self) -> list[dict]:
        return list(self._rows)

    @property
    def unwritten(self) -> int:
        """Rows measured but in no file: those of parts that failed to be written (after close)."""
        return len(self._pending)

    def append(self, row: dict) -> None:
        with self._lock:
            self._rows.append(normalize_row(row))
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(self._rows[-1])
            if self.failed is not None:
                raise self.failed
            if len(self._pending) >= PART_ROWS:
                self.flush()
            if self._stop is None:
                self._stop = threading.Event()
                threading.Thread(target=self._watch, args=(self._stop,), daemon=True).start()

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(PART_S / 5):
            try:
                self.tick()
            except OSError:  # a full disk: kept in self.failed, raised at the sweep's next row
                return

    def tick(self) -> None:
        """Writes the pending rows once the oldest is PART_S old."""
        with self._lock:
            if self._pending and time.monotonic() - self._since >= PART_S:
                self.flush()

    def flush(self) -> None:
        """The pending rows as the next part (atomic: a part is whole or absent)."""
        with self._lock:
            if not self._pending:
                return
            try:
                write_rows(parts_dir(self.path) / f"part-{self._next:05d}.parquet", self._pending, self.meta)
            except OSError as exc:
                self.failed = self.failed or exc
                raise
            self._pending, self._next = [], self._next + 1

    def close(self) -> None:
        """Every row of the file (kept and new) as `path`, one atomic rename; then the parts go.  A file that gained
        no row is left as it was.  After a failed write: the rows not yet in a part are tried once more as one, and
        the join is made only where every row is in a part (else the parts stay for `run --resume`), raising the
        write's error."""
        with self._lock:
            if self._stop is not None:  # a later row (run --repeat's next sweep) starts a clock of its own
                self._stop.set()
                self._stop = None
            if self.failed is not None:
                self.flush()  # raises while the disk is still full; the parts written before stay
            self._pending = []
            if not self.added and not parts_dir(self.path).exists():
                return
            write_rows(self.path, self._rows, {**(self.meta or {}), JOINED_KEY: str(self._next - 1).encode()})
            shutil.rmtree(parts_dir(self.path), ignore_errors=True)


def file_metadata(path: str | Path) -> dict:
    """A run file's key-value metadata (bytes -> bytes): its newest part's where a sweep writing it was killed on the
    way (that sweep's, for --resume), else the file's; {} where it has none."""
    files = result_files(Path(path))
    return dict(pq.read_schema(files[-1]).metadata or {})


SAVED_BASELINES = "baselines"  # `baseline save`'s folder (results/baselines): copies of runs, not runs


def result_files(p: Path, skipped: Optional[list[Path]] = None) -> list[Path]:
    """A file as given, with the parts of a sweep still writing it or killed on the way (RunWriter), or every
    .parquet file under a folder, its subfolders included (results/h100-*/…), a parts folder's live parts only.  In a
    folder, saved baselines (a `baselines` subfolder: copies of runs) are left out, and added to `skipped` where it
    is given."""
    p = Path(p)
    if p.name.endswith(".parts") and p.is_dir():  # a run's parts folder given for the run file it belongs to
        p = p.with_name(p.name[: -len(".parts")])
    if p.is_dir():
        found = (f for f in p.rglob("*.parquet") if f.is_file() and not f.name.endswith(".tmp"))
        runs = sorted(f for f in found if not f.parent.name.endswith(".parts"))
        parts = [f for d in sorted(p.rglob("*.parts")) if d.is_dir() for f in live_parts(d.with_name(d.name[:-6]))]
        left_out = [f for f in runs if SAVED_BASELINES in f.relative_to(p).parts[:-1]]
        files = sorted(set(runs + parts) - set(left_out))
        if skipped is not None:
            skipped += left_out
        if not files:
            raise StoreError(
                f"{p}: no run file in the folder or its subfolders"
                + (f" ({len(left_out)} saved baselines or side tables left out)" if left_out else "")
            )
        return files
    parts = live_parts(p)
    if p.is_file() or parts:
        return ([p] if p.is_file() else []) + parts
    raise StoreError(f"{p}: no such file or folder")


def _run_files(p: Path, skipped: Optional[list[Path]]) -> list[Path]:
    """result_files, less the side tables a folder holds (added to `skipped`): a side table given by name is read,
    and refused as not a run file."""
    files = result_files(p, skipped)
    if not p.is_dir():
        return files
    side = [f for f in files if _side_table(f)]
    if skipped is not None:
        skipped += side
    if side and len(side) == len(files):
        raise StoreError(f"{p}: no run file in the folder or its subfolders ({len(side)} side tables left out)")
    return [f for f in files if f not in side]


def _side_table(f: Path) -> bool:
    """Whether a Parquet file is a `layer` or `profile` table (side_tables.py), not a run file."""
    try:
        names = pq.read_schema(f).names
    except (pa.ArrowException, OSError):
        return False  # the reader says what is wrong with it
    return "layer_schema" in names or "profile_schema" in names


def skipped_line(skipped: Sequence[Path]) -> Optional[str]:
    """'left out 2 side tables and 1 saved baseline' for files result_files left out of folders, or None."""
    saved = sum(1 for f in skipped if SAVED_BASELINES in f.parts[:-1])
    side = len(skipped) - saved
    parts = [f"{n} {what}{'s' if n > 1 else ''}" for n, what in ((side, "side table"), (saved, "saved baseline")) if n]
    return (
        f"left out {' and '.join(parts)} (not runs: `layer` or `profile` tables, `baseline save` copies)"
        if parts
        else None
    )


def _run_format(f: Path, table: pa.Table) -> int:
    """The file's run format (its metadata key); a one-line refusal for a file of an older gemmbench or none."""
    meta = table.schema.metadata or {}
    found = meta.get(META_KEY)
    if found is not None and found.isdigit():
        return int(found)
    if OLD_META_KEY in meta or "schema_version" in table.column_names:
        raise StoreError(f"{f}: a run file of gemmbench 0.1 (run schema {meta.get(OLD_META_KEY, b'?').decode()}); "
                         f"read it with gemmbench at commit {LAST_READER}, or re-run it")  # fmt: skip
    if not {"variant", "status", "run_id"} <= set(table.column_names):  # not a run file at all
        raise StoreError(f"{f}: not a gemmbench run file (no variant, status and run_id columns: gemmbench did not "
                         f"write it)")  # fmt: skip
    raise StoreError(f"{f}: has no gemmbench.run_format metadata (written by something other than gemmbench's store)")


def _read(f: Path) -> pa.Table:
    try:
        # one open file object: pq.read_table(path) opens the path more than once, and a RunWriter's
        # os.replace between the opens made concurrent reads fail.  No threads: after a threaded read through a
        # Python file object, pyarrow's CPU pool can abort the process at exit (a finished command exits 134)
        with open(f, "rb") as fh:
            table = pq.read_table(fh, use_threads=False)
    except (pa.ArrowException, OSError) as e:
        raise StoreError(f"{f}: not a readable Parquet file, truncated or not Parquet ({_one_line(e)})") from None
    v = _run_format(f, table)
    if v != RUN_FORMAT:
        newer = "a newer gemmbench: upgrade gemmbench" if v > RUN_FORMAT else "an older gemmbench: re-run it"
        raise StoreError(f"{f}: run format {v}, this gemmbench reads {RUN_FORMAT} (written by {newer})")
    for name, default in ADDED_COLUMNS.items():
        if name not in table.column_names:
            table = table.append_column(name, pa.array([default] * table.num_rows, TYPES[name]))
    absent = [c for c in COLUMNS if c not in table.column_names]
    if absent:
        raise StoreError(f"{f}: missing column {absent[0]!r} for run format {RUN_FORMAT}")
    try:
        return table.select(COLUMNS).cast(SCHEMA)  # drop extras, unify column order and types
    except (pa.ArrowException, ValueError) as e:
        raise StoreError(f"{f}: columns do not match run format {RUN_FORMAT} ({_one_line(e)})") from None


def records(df: pd.DataFrame) -> list[dict]:
    """The rows of a loaded frame as write_rows takes them again (pandas' NA and NaN back to None)."""

    def plain(v):
        if isinstance(v, np.ndarray):  # samples_us
            return v.tolist()
        if missing(v):
            return None
        return v.item() if isinstance(v, np.generic) else v

    return [{k: plain(v) for k, v in r.items()} for r in df.to_dict("records")]


def load(paths: Sequence[str | Path], skipped: Optional[list[Path]] = None) -> pd.DataFrame:
    """All rows of the given runs as one DataFrame (columns in COLUMNS order); a row read twice (one run's file
    copied into two places a folder holds) counts once, where `run --repeat`'s rows differ by `process`.  skipped:
    gets the files folders held that are not runs (result_files).

    Each path is a .parquet file or a folder (its *.parquet files, sorted, not recursive; *.tmp
    left by a killed writer are skipped).  dtypes do not depend on the data: strings are pandas'
    string dtype, floats float64 (None -> NaN), required ints int64, nullable ints Int64 (None ->
    <NA>), samples_us holds numpy float64 arrays or None.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise StoreError("no result files given")
    files = list(dict.fromkeys(f.resolve() for p in paths for f in _run_files(Path(p), skipped)))
    table = pa.concat_tables([_read(f) for f in files])
    # Int64 for nullable ints: without it a column's dtype would flip between int64 and float64
    # depending on whether some row (e.g. a skipped cell) has a null.
    df = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    for name in REQUIRED:
        if TYPES[name] == pa.int64():
            df[name] = df[name].astype("int64")
    if len(files) > 1 and not df.empty:
        which = df[["run_id", "process", "timing_mode"]].astype(object)
        key = which.where(which.notna(), "").astype(str).agg("|".join, axis=1) + "|" + cell_keys(df)
        df = df[~key.duplicated()].reset_index(drop=True)
    return df
