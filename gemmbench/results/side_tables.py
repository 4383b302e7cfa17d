"""The side tables, profile and layer (not run files): their versions, atomic writes, and loading them.

`gemmbench profile` and `gemmbench layer` write them; a file is told apart from a run file by its schema column
(profile_schema, layer_schema: table_kind).  A table of another version is refused in one line, as run files are.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gemmbench import dtypes
from gemmbench.results.store import StoreError, result_files, write_table
from gemmbench.results.table_versions import LAYER_SCHEMA, PROFILE_SCHEMA


def load_side_tables(paths, column: str, not_one: str) -> list[tuple[Path, pd.DataFrame]]:
    """The files of a side table (profile, layer: not run files), each whole, with its path.  A file without the
    table's schema `column` is the one-line error "<file>: not_one"."""
    out = []
    for p in [paths] if isinstance(paths, (str, Path)) else paths:
        for f in result_files(Path(p)):
            try:
                df = pd.read_parquet(f, use_threads=False)  # off pyarrow's CPU pool: see store._read
            except Exception as exc:  # noqa: BLE001 - any unreadable file is the same one-line error
                raise StoreError(f"{f}: not a readable Parquet file ({str(exc).splitlines()[0][:200]})") from None
            if column not in df.columns:
                raise StoreError(f"{f}: {not_one}")
            out.append((f, df))
    return out


def table_kind(f: Path) -> str:
    """ "profile" (a profile_schema column), "layer" (a layer_schema column)
    or "run"."""
    try:
        names = pq.read_schema(f).names
    except (pa.ArrowException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise StoreError(f"{f}: not a readable Parquet file, truncated or not Parquet ({first})") from None
    return "profile" if "profile_schema" in names else "layer" if "layer_schema" in names else "run"


def write_profile_table(path: Path, rows: list[dict]) -> None:
    """A `gemmbench profile` table, atomically: rewritten after every cell."""
    write_table(path, pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False))


def load_profile_tables(paths) -> pd.DataFrame:
    """Profile tables (write_profile_table), one DataFrame; a file that is not one is a one-line error."""
    tables = load_side_tables(paths, "profile_schema", "not a gemmbench profile table (no profile_schema column)")
    _refuse_other_versions(tables, "profile_schema", PROFILE_SCHEMA, "profile table")
    return pd.concat([df for _, df in tables], ignore_index=True)


def _refuse_other_versions(tables, column: str, version: int, kind: str) -> None:
    for f, df in tables:
        found = sorted({int(v) for v in df[column].dropna()})
        if found != [version]:
            raise StoreError(f"{f}: {kind} of another gemmbench version ({column} {found}, this one reads {version})")


# Every column, whether or not a row has it (a CPU run has no graph time: its graph columns are null, not absent).
LAYER_COLUMNS = (
    "run_id",
    "timestamp",
    "family",
    "model",
    "shape_set",
    "layer_kind",  # "" when every layer of the model is alike; "dense" / "moe" for DeepSeek-V3, Llama-4 Maverick
    "tp",
    "ep",
    "dp",  # data-parallel groups (gemmbench.models.sharding); tables without it ran DP 1
    "layout",  # whose GEMMs (gemmbench.models.sharding.LAYOUTS); tables without it: "vllm"
    "dtype",
    "scaling",  # the fp8 scaling of every GEMM of the layer (dtypes.SCALINGS); 16-bit: "none"
    "fp8_accum",  # the fp8 accumulation contract of every GEMM (dtypes.FP8_ACCUMS); 16-bit "none"; without it: precise
    "M",
    "layers",
    "part",
    "step",
    "gemm",
    "N",
    "K",
    "E",
    "topk",
    "variant",
    "plan",
    "config",
    "steps",
    "status",
    "reason",
    "fallback",  # a step's: the variants of --variants that failed before its own ran, each with why (else null)
    "max_rel_err",
    "timing_mode",
    "l2_state",
    "kernel_us",
    "kernel_us_p20",
    "kernel_us_p80",
    "samples_us",
    "eager_us",
    "eager_samples",
    "gap_us",
    "graph_us",
    "graph_samples",
    "graph_gap_us",
    "gap_note",  # why a gap below zero is shown as N/A (metrics.gap_note)
    "graph_speedup",
    "graph_reason",
    "graph_max_rel_err",
    "device",
    "gpu",
    "gpu_uuid",
    "sm_count",
    "driver",
    "cuda",
    "torch",
    "triton",
    "gemmbench_version",
    "git_sha",
    "host",
    "cpu",
    "layer_schema",
)


def write_layer_table(path: Path, rows: list[dict]) -> None:
    """A `gemmbench layer` table, atomically: rewritten after every layer."""
    df = pd.DataFrame(rows).reindex(columns=list(LAYER_COLUMNS))
    for c in ("step", "N", "K", "E", "topk", "ep", "dp", "steps", "sm_count"):
        df[c] = df[c].astype("Int64")
    for c in (
        "kernel_us",
        "kernel_us_p20",
        "kernel_us_p80",
        "eager_us",
        "gap_us",
        "graph_us",
        "graph_gap_us",
        "graph_speedup",
        "max_rel_err",
        "graph_max_rel_err",
    ):
        df[c] = df[c].astype("float64")
    write_table(path, pa.Table.from_pandas(df, preserve_index=False))


def load_layer_tables(paths) -> pd.DataFrame:
    """Layer tables (files, or folders of them) as one frame; a file of another kind or version is refused."""
    if not isinstance(paths, (str, Path)) and not paths:
        raise StoreError("no layer tables given")
    tables = load_side_tables(paths, "layer_schema", "not a layer table (`gemmbench layer` output)")
    _refuse_other_versions(tables, "layer_schema", LAYER_SCHEMA, "layer table")
    df = pd.concat([df for _, df in tables], ignore_index=True)
    # a table from before the accumulation contracts ran fp8 precise: its rows group with today's precise ones
    contract = df["dtype"].map(dtypes.fp8_accum)
    # (a column of only missing values reads as float: made object first, so strings may fill it)
    return df.assign(fp8_accum=df["fp8_accum"].astype(object).fillna(contract) if "fp8_accum" in df else contract)
