"""Splitting one sweep across hosts (`gemmbench run --shard I/N`) and putting the parts back together
(`gemmbench merge`).

A sweep's cells (problem x variant, in the order `run` lists them) are partitioned into N shards balanced by an
estimated cost: the longest-processing-time rule (heaviest cell first, onto the least loaded shard, ties to the
lowest index), so the partition depends only on the cell list and N: every Slurm array task or Kubernetes indexed
pod that lists the same cells computes the same shards.  Cost: a constant per cell (check, warm-up and the
sampling budget dominate small cells) plus one unit per GB of the problem's minimum traffic (large weights take
longer to draw, check and stream).

Each part file carries, in its Parquet metadata, which shard it is and the keys of the cells it was given, so
merge() can say which cells are missing (a shard that died or never ran) and which are there twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

META_KEY = b"gemmbench.shard"


class ShardError(ValueError):
    """One line for the user."""


def parse(text: str) -> tuple[int, int]:
    """'I/N' with 0 <= I < N (0-based, as SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX count)."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ShardError(f"--shard {text!r}: give I/N with 0 <= I < N, e.g. 0/8 (I counts from 0)")
    return int(m.group(1)), int(m.group(2))


def cell_key(problem, variant: str) -> str:
    """store.cell_key of the row this cell will have."""
    from gemmbench.results.store import cell_key as key  # heavy (pandas, pyarrow): the CLI imports this light module

    return key(dict(vars(problem), routing=problem.routing if problem.is_moe else None, variant=variant))


def describe(key: str, variant: bool = True) -> str:
    """A cell key as a person reads it:
    'smoke smoke_tails fp16 M5 N80 K48 [E8 top2 uniform] [tp2] [ep2] [dp2] [sglang] cublas_fp16'; fp8 names a scaling other
    than per tensor and fast accumulation: 'fp8 block', 'fp8 fast'."""
    from gemmbench.dtypes import label  # light; here with the other imports of this light module

    shape_set, gemm, M, N, K, E, topk, routing, tp, ep, dp, layout, dtype, scaling, accum, name = key.split("|")
    dtype = label(dtype, scaling, accum)
    moe = f" E{E} top{topk} {routing}" if E not in ("", "1") else ""
    par = "".join(f" {flag}{value}" for flag, value in (("tp", tp), ("ep", ep), ("dp", dp)) if value not in ("", "1"))
    par += f" {layout}" if layout not in ("", "vllm") else ""
    return f"{shape_set} {gemm} {dtype} M{M} N{N} K{K}{moe}{par}" + (f" {name}" if variant else "")


def cost(problem) -> float:
    from gemmbench.results.metrics import bytes_min  # heavy (numpy): the CLI imports this light module

    if not problem.is_moe:
        return 1.0 + bytes_min(problem) / 1e9
    # about this many experts hit and pairs on this rank: its share of the M * topk pairs (uniform routing)
    pairs = max(1, problem.M * problem.topk // problem.ep)
    work = dict(experts_hit=min(problem.local_experts, pairs), pairs=pairs, tokens=min(problem.M, pairs))
    return 1.0 + bytes_min(problem, **work) / 1e9


def partition(cells: list, n: int) -> list[list]:
    """cells: [(problem, [variant names])] -> n lists of the same form; every (problem, variant) in exactly one."""
    flat = [(p, v, cell_key(p, v)) for p, names in cells for v in names]
    order = sorted(range(len(flat)), key=lambda i: (-cost(flat[i][0]), flat[i][2]))
    load, owner = [0.0] * n, {}
    for i in order:
        s = min(range(n), key=lambda j: (load[j], j))
        owner[i] = s
        load[s] += cost(flat[i][0])
    shards = []
    for s in range(n):  # back to run's order: problems in sequence, their variants together
        mine, by_problem = [], {}
        for i, (p, v, _) in enumerate(flat):
            if owner[i] == s:
                if id(p) not in by_problem:
                    by_problem[id(p)] = []
                    mine.append((p, by_problem[id(p)]))
                by_problem[id(p)].append(v)
        shards.append(mine)
    return shards


def digest(cells: list) -> str:
    """A fingerprint of the whole cell list: parts of one sweep share it."""
    keys = "\n".join(cell_key(p, v) for p, names in cells for v in names)
    return hashlib.sha256(keys.encode()).hexdigest()[:16]


def metadata(cells: list, index: int, n: int) -> dict:
    """What a part file records about itself (stored as JSON under META_KEY)."""
    shards = partition(cells, n)
    return {
        "shard": index,
        "of": n,
        "sweep": digest(cells),
        "shard_cells": [sum(len(v) for _, v in sh) for sh in shards],
        "cells": [cell_key(p, v) for p, names in shards[index] for v in names],
    }


def read_metadata(path: Path) -> dict | None:
    import pyarrow.parquet as pq  # heavy: only when merging

    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - store.load reports an unreadable file in its own words
        return None
    if META_KEY not in meta:
        return None
    return json.loads(meta[META_KEY])


@dataclass
class MergeReport:
    rows: int
    missing: list  # cell keys
    duplicated: list  # cell keys
    shards_missing: list  # (shard index, its cell count) with no part


def check_parts(parts: list[tuple[Path, dict | None]], keys_by_part: dict) -> MergeReport:
    """parts: (file, its shard metadata or None); keys_by_part: file -> the cell keys of its rows."""
    metas = [m for _, m in parts if m]
    sweeps = {(m["sweep"], m["of"]) for m in metas}
    if len(sweeps) > 1:
        raise ShardError(
            "the parts come from different sweeps or shard counts "
            f"({', '.join(f'{s} of {n}' for s, n in sorted(sweeps))}): merge the parts of one sweep"
        )
    seen: dict = {}
    for f, _ in parts:
        for k in set(keys_by_part[f]):  # a --repeat part holds each cell once per process: still one part
            seen[k] = seen.get(k, 0) + 1
    duplicated = sorted(k for k, c in seen.items() if c > 1)
    expected = [k for m in metas for k in m["cells"]]
    missing = [k for k in expected if k not in seen]
    shards_missing = []
    if metas:
        n = metas[0]["of"]
        have = {m["shard"] for m in metas}
        shards_missing = [(i, metas[0]["shard_cells"][i]) for i in range(n) if i not in have]
    return MergeReport(sum(len(v) for v in keys_by_part.values()), missing, duplicated, shards_missing)


def read_parts(files: list[Path]) -> tuple[list[dict], MergeReport]:
    """The rows of part files (store.load checks each) and what check_parts finds in them."""
    from gemmbench.results.store import cell_keys, load, records  # heavy (pandas, pyarrow): only when merging

    frames = {f: load([f]) for f in files}
    report = check_parts([(f, read_metadata(f)) for f in files], {f: list(cell_keys(df)) for f, df in frames.items()})
    return [r for df in frames.values() for r in records(df)], report


def split_jobs(jobs: list, n: int) -> list[list]:
    """Tune jobs [(problem, variant)] -> n lists of them, through partition (deterministic, cost-balanced), so every
    host of a --shard array computes the same split.  Each list keeps the jobs' order; a problem's variants stay
    together (they share its inputs one after another)."""
    cells, names_of = [], {}
    variants = {v.name: v for _, v in jobs}
    for p, v in jobs:
        if p.label not in names_of:
            names_of[p.label] = []
            cells.append((p, names_of[p.label]))
        names_of[p.label].append(v.name)
    return [[(p, variants[name]) for p, names in part for name in names] for part in partition(cells, n)]
