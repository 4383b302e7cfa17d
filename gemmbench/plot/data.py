"""What `gemmbench plot` and `gemmbench report` draw: RESULTS files sorted into runs and profile tables, the filters
(--shapes, --variants, --dtype, --tp, --gpu), speedups against a baseline (gemmbench.results.tables' rules), and the groups
that become one figure each, with their file names.  pandas only: the drawing is gemmbench.plot.figures."""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from gemmbench.results import store, tables
from gemmbench.results.side_tables import load_layer_tables, load_profile_tables, table_kind
from gemmbench.results.store import StoreError, records

# One figure of the per-GEMM kinds: one GEMM (at its TP degree and MoE routing) in one dtype, scaling and timing mode.
# Timing modes are never mixed in one figure: cold and stream times of one cell answer different questions; nor are
# fp8 scalings (per tensor, row, block): each moves other bytes and does other work, so each is a figure of its own;
# nor fp8 accumulation contracts (precise, fast): each promises another error, so each is a figure of its own too.
GEMM_COLS = ("shape_set", "gemm", "N", "K", "E", "topk", "routing", "tp", "ep")
FIGURE_COLS = GEMM_COLS + ("dtype", "scaling", "fp8_accum", "timing_mode")
# a roofline holds every GEMM of a dtype, scaling and accumulation contract: the point is where each sits
ROOFLINE_COLS = ("dtype", "scaling", "fp8_accum", "timing_mode")
# ncu profiles one eager launch, caches flushed: no timing mode
PROFILE_COLS = GEMM_COLS + ("dtype", "scaling", "fp8_accum")


@dataclass
class Results:
    runs: Optional[pd.DataFrame]  # store.load rows; None where RESULTS held no run file
    profiles: Optional[pd.DataFrame]  # side_tables.load_profile_tables rows; None where it held no profile table
    files: list[Path]
    layers: Optional[pd.DataFrame] = (
        None  # side_tables.load_layer_tables rows (`gemmbench layer` tables); None where it held none
    )


@dataclass
class Filters:
    shapes: Optional[list[str]] = None  # globs on the GEMM id (attn_qkv) or the shape set (llama70b-attn)
    variants: Optional[list[str]] = None  # globs on the variant: which series are drawn (baselines still count)
    dtypes: Optional[list[str]] = None
    tps: Optional[list[int]] = None
    gpu: Optional[str] = None  # the GPU name, or a case-insensitive part of it ("H100")


def read(paths: Sequence) -> Results:
    """Every file under `paths` (files, or folders of *.parquet), each read as a run or as a profile table."""
    if not paths:
        raise StoreError("no result files given")
    files: list[Path] = []
    for p in paths:
        for f in store.result_files(Path(p)):
            if f.resolve() not in {x.resolve() for x in files}:  # a folder and a file in it: its rows once
                files.append(f)
    kinds = {f: table_kind(f) for f in files}
    run_files = [f for f in files if kinds[f] == "run"]
    profile_files = [f for f in files if kinds[f] == "profile"]
    layer_files = [f for f in files if kinds[f] == "layer"]
    runs = store.load(run_files) if run_files else None
    profiles = load_profile_tables(profile_files) if profile_files else None  # one version only: side_tables
    if runs is not None:
        runs = _fill_timing_mode(runs)
    return Results(runs, profiles, files, load_layer_tables(layer_files) if layer_files else None)


def _fill_timing_mode(df: pd.DataFrame) -> pd.DataFrame:
    """A row without a timing mode (a cell skipped before timing) takes its run's, so that it is counted in the
    footnote of the figure its cell belongs to."""
    if not df["timing_mode"].isna().any():
        return df
    df = df.copy()
    mode = df.dropna(subset=["timing_mode"]).groupby("run_id")["timing_mode"].agg(lambda s: s.mode().iloc[0])
    df["timing_mode"] = df["timing_mode"].fillna(df["run_id"].map(mode))
    return df


def _matches(values: pd.Series, globs: list[str]) -> pd.Series:
    return values.map(lambda v: isinstance(v, str) and any(fnmatch.fnmatchcase(v, g) for g in globs)).astype(bool)


def _held(values: pd.Series) -> str:
    return ", ".join(str(v) for v in sorted(values.dropna().unique(), key=str)) or "none"


def _narrow(df: pd.DataFrame, keep: pd.Series, option: str, what: str, held: str) -> pd.DataFrame:
    if not keep.any():
        raise StoreError(f"no {what} match {option} (they hold {held})")
    return df[keep]


# Where a CPU row may name its processor, the first column present and set winning; `gpu` last, for rows that
# wrote the device's name there whatever the device was.
PROCESSOR_COLS = ("cpu", "processor", "gpu")


def _set(values: pd.Series) -> pd.Series:
    """`values` as objects, None where missing or blank."""
    v = values.astype(object)
    return v.where(v.notna() & (v.astype(str).str.strip() != ""), None)


def gpu_names(df: pd.DataFrame) -> pd.Series:
    """The device of each row as titles print it and --gpu matches it: the GPU's name; "CPU (<processor>)" for a
    row run on the CPU (device == "cpu": no GPU name), "CPU" where no column names the processor; "unknown GPU"
    for a GPU row without a name."""
    gpu = _set(df["gpu"])
    names = gpu.where(gpu.notna(), "unknown GPU")
    if "device" not in df.columns:
        return names
    cpu = df["device"].astype(object) == "cpu"
    if not cpu.any():
        return names
    processor = pd.Series(None, index=df.index, dtype=object)
    for col in PROCESSOR_COLS:
        if col in df.columns:
            processor = processor.where(processor.notna(), _set(df[col]))
    cpus = processor.map(lambda p: "CPU" if p is None else f"CPU ({p})")
    return names.where(~cpu, cpus)


def select(df: pd.DataFrame, f: Filters, what: str = "rows") -> pd.DataFrame:
    """The rows of one GPU model that pass --gpu, --shapes, --dtype and --tp (--variants: keep_variants, after the
    speedups, which need the baseline's rows whether or not they are drawn)."""
    names = gpu_names(df)
    if f.gpu:
        exact = names.str.lower() == f.gpu.lower()
        keep = exact if exact.any() else names.str.lower().str.contains(f.gpu.lower(), regex=False)
        df = _narrow(df, keep, f"--gpu {f.gpu!r}", what, f"GPUs: {_held(names)}")
        names = names[keep]
    models = sorted(names.unique())
    if len(models) > 1:
        said = f", all matching --gpu {f.gpu!r}" if f.gpu else ""
        raise StoreError(
            f"the {what} come from {len(models)} GPU models ({'; '.join(models)}{said}): choose one with --gpu"
        )
    if f.shapes:
        keep = _matches(df["gemm"], f.shapes) | _matches(df["shape_set"], f.shapes)
        df = _narrow(
            df,
            keep,
            f"--shapes {','.join(f.shapes)!r}",
            what,
            f"GEMMs {_held(df['gemm'])}; shape sets {_held(df['shape_set'])}",
        )
    if f.dtypes:
        df = _narrow(
            df, df["dtype"].isin(f.dtypes), f"--dtype {','.join(f.dtypes)!r}", what, f"dtypes {_held(df['dtype'])}"
        )
    if f.tps:
        df = _narrow(df, df["tp"].isin(f.tps), f"--tp {','.join(map(str, f.tps))!r}", what, f"tp {_held(df['tp'])}")
    return df


def keep_variants(df: pd.DataFrame, f: Filters, what: str = "rows") -> pd.DataFrame:
    if not f.variants:
        return df
    return _narrow(
        df,
        _matches(df["variant"], f.variants),
        f"--variants {','.join(f.variants)!r}",
        what,
        f"variants {_held(df['variant'])}",
    )


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows as tables.py takes them: plain dicts with None, not NA, for what is missing."""
    cols = ["gemm", "M", "N", "K", "E", "tp", "ep", "dtype", "scaling", "fp8_accum", "routing", "variant", "status",
            "time_us_median", "flops"]  # fmt: skip
    return records(df[[c for c in cols if c in df.columns]])


def with_speedups(df: pd.DataFrame, baseline: Optional[str] = None) -> pd.DataFrame:
    """`df` plus `speedup` (baseline time / this row's time; NaN unless both rows are ok, in the same run and at the
    same cell) and `baseline` (the variant each row is measured against).  The default baseline is tables.baseline_for
    (the one the registry declares for the row's dtype, kind and fp8 scaling: cuBLAS of the row's dtype, cuBLAS
    row-wise for row-wise fp8, torch_moe_loop for MoE); `baseline` puts one variant in its place for every row."""
    speedup = pd.Series(math.nan, index=df.index, dtype="float64")
    against = pd.Series(baseline, index=df.index, dtype=object)
    for _, g in df.groupby("run_id", sort=False):  # tables.speedups pairs rows of one run only
        rows = _records(g)
        if baseline is None:
            sp = tables.speedups(rows)
            against.loc[g.index] = [tables.baseline_for(r) for r in rows]
        else:
            base = {
                tables._cell(r): r["time_us_median"] for r in rows if r["variant"] == baseline and r["status"] == "ok"
            }
            sp = {
                id(r): base[tables._cell(r)] / r["time_us_median"]
                for r in rows
                if r["status"] == "ok" and tables._is_gemm(r) and base.get(tables._cell(r))
            }
        speedup.loc[g.index] = [sp.get(id(r), math.nan) for r in rows]
    return df.assign(speedup=speedup, baseline=against)


def groups(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[dict, pd.DataFrame]]:
    """(key, rows) per distinct value of `cols`, in order of first appearance (a shape set's GEMM order)."""
    cols = [c for c in cols if c in df.columns]
    out = []
    for key, g in df.groupby(cols, sort=False, dropna=False):
        values = key if isinstance(key, tuple) else (key,)
        out.append(({c: (None if pd.isna(v) else v) for c, v in zip(cols, values, strict=False)}, g))
    return out


def _stem(kind: str, k: dict, level: int) -> str:
    parts = [kind]
    if k.get("gemm") is not None:
        parts.append(k["gemm"])
    if (k.get("tp") or 1) > 1:
        parts.append(f"tp{k['tp']}")
    if (k.get("ep") or 1) > 1:
        parts.append(f"ep{k['ep']}")
    if k.get("routing") not in (None, "uniform"):
        parts.append(k["routing"])
    parts.append(k.get("dtype") or "")
    if k.get("scaling") not in (None, "none", "tensor"):  # fp8 per tensor keeps the names it had before scalings
        parts.append(k["scaling"])
    if k.get("fp8_accum") == "fast":  # precise keeps the names it had before accumulation contracts
        parts.append("fast")
    if level >= 1 and k.get("timing_mode"):
        parts.append(k["timing_mode"])
    if level >= 2 and k.get("shape_set"):
        parts.append(k["shape_set"])
    if level >= 3 and k.get("N") is not None:
        parts.append(f"N{k['N']}-K{k['K']}")
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", "-".join(str(p) for p in parts if p != ""))


def stems(kind: str, keys: list[dict]) -> list[str]:
    """File names (no suffix) for the figures of one kind: kind-GEMM[-tpN]-dtype[-scaling][-fast], e.g.
    speedup-attn_qkv-fp8 (fp8 per tensor, precise), speedup-attn_qkv-fp8-block or speedup-attn_qkv-fp8-fast; the
    timing mode, the shape set, then N and K are added only where two figures would otherwise share a name."""
    for level in range(4):
        names = [_stem(kind, k, level) for k in keys]
        if len(set(names)) == len(names):
            return names
    return [f"{n}-{i + 1}" for i, n in enumerate(names)]


def series(g: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One series per variant, sorted by name; one per (variant, run) where two runs measured a variant at the same
    M (runs at different M, e.g. a decode and a prefill sweep, make one curve)."""
    out = []
    for variant, s in g.groupby("variant", sort=True):
        if s["run_id"].nunique() > 1 and s.duplicated(["M"]).any():
            out += [(f"{variant} ({run})", r) for run, r in s.groupby("run_id", sort=True)]
        else:
            out.append((str(variant), s))
    return out


def dates(df: pd.DataFrame) -> str:
    days = sorted({str(t)[:10] for t in df["timestamp"].dropna()})
    if not days:
        return "date unknown"
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def not_drawn(g: pd.DataFrame) -> Optional[str]:
    """'Not drawn: 56 skipped (torch_moe_loop, torch_grouped_mm: <reason>; moe_align: <its reason>)' for the rows that
    are not ok, or None: each reason with the variants it is theirs."""
    bad = g[g["status"] != "ok"]
    if bad.empty:
        return None
    parts = []
    for status in ("wrong", "impossible", "error", "skipped"):
        s = bad[bad["status"] == status]
        if s.empty:
            continue
        reasons = s["reason"].fillna("").astype(str).map(lambda r: _short(r, 160))
        whys = []
        for why, variants in s.groupby(reasons, sort=False)["variant"]:
            names = ", ".join(sorted(variants.astype(str).unique()))
            whys.append(f"{names}: {why}" if why else names)
        parts.append(f"{len(s)} {status} ({'; '.join(whys)})")
    return "Not drawn: " + "; ".join(parts)


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
