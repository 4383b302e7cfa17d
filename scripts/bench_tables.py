"""Markdown tables for docs/BENCHMARKS.md from a gemmbench Parquet file.

    python scripts/bench_tables.py --check docs/BENCHMARKS.md    # exit 1 where a table differs from its files
    python scripts/bench_tables.py --update docs/BENCHMARKS.md   # write every table again from its files

In BENCHMARKS a table stands between `<!-- bench_tables.py ARGS -->` and `<!-- /bench_tables.py -->`: ARGS are this
script's arguments, so each table is reproduced from the committed Parquet files it names.

    python scripts/bench_tables.py benchmarks/data/RUN/llama70b-attn-cold.parquet \
        [--group DP=triton_dp_*] [--group SplitK=triton_splitk_*]
    python scripts/bench_tables.py --moe benchmarks/data/RUN/moe-tp2-cold.parquet

One row per (GEMM, TP, dtype, M): the dtype's cuBLAS baseline (µs, % of roofline), cuBLAS fp8 row-wise
where it ran, then for each group (default: one per non-cuBLAS family) its fastest ok variant, µs,
% of roofline and speedup over the baseline.  Only ok rows are used; the header counts every status.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from gemmbench import dtypes
from gemmbench.results import store
from gemmbench.results.md_table import md_table
from gemmbench.results.tables import baseline_for, fp8_accum


def _groups(rows, specs):
    """(name, match, prefix) per column group: --group NAME=GLOB by variant name, else one group per family."""
    if specs:
        pairs = [tuple(s.split("=", 1)) for s in specs]
        return [(n, lambda r, g=g: fnmatch.fnmatch(r["variant"], g), g.rstrip("*")) for n, g in pairs]
    fams = sorted({r["family"] for r in rows if r["family"] != "cublas"})
    return [(f, lambda r, f=f: r["family"] == f, f + "_") for f in fams]


def dtype_label(r: dict) -> str:
    """The dtype column, as gemmbench labels it: fp8's scaling and accumulation contract where not the reference."""
    return dtypes.label(r["dtype"], r.get("scaling"), fp8_accum(r))


def _table(head: str, cols: list[str], body: list[list[str]]) -> str:
    """The counts line, then the table: the first three columns (names) left-aligned, the numbers right."""
    return "\n".join([head, "", *md_table(cols, body, "lll" + "r" * (len(cols) - 3))])


def render(path: str, specs: list[str] | None = None) -> str:
    rows = store.load(path).to_dict("records")
    counts = Counter(r["status"] for r in rows)
    head = f"`{path}`: {len(rows)} cells, " + ", ".join(f"{n} {s}" for s, n in counts.most_common())
    ok = [r for r in rows if r["status"] == "ok"]
    groups = _groups(ok, specs)

    def key(r):  # fp8's scalings and accumulation contracts are cells of their own ("fp8 fast", "fp8 row")
        return (r["gemm"], r["N"], r["K"], r["tp"], dtype_label(r), r["M"])

    cells: dict = {}
    for r in ok:
        cells.setdefault(key(r), {})[r["variant"]] = r
    rowwise = any(r["variant"] == "cublas_fp8_rowwise" for r in ok)
    cols = ["GEMM (N, K)", "TP", "dtype", "M", "cuBLAS µs", "% roof"] + (["fp8 row-wise µs"] if rowwise else [])
    for name, _, _ in groups:
        cols += [f"best {name}", "µs", "% roof", "vs cuBLAS"]
    body = []
    first_seen = {g: i for i, g in reversed(list(enumerate(r["gemm"] for r in rows)))}
    order = sorted(cells, key=lambda k: (first_seen[k[0]], k[3], not k[4].startswith("fp8"), k[4], k[5]))
    for k in order:
        by = cells[k]
        any_row = next(iter(by.values()))
        base = by.get(baseline_for(any_row))
        out = [f"{k[0]} ({k[1]}, {k[2]})", str(k[3]), k[4], str(k[5])]
        out += [f"{base['time_us_median']:.1f}", f"{base['pct_of_roofline']:.0f}"] if base else ["", ""]
        if rowwise:
            rw = by.get("cublas_fp8_rowwise")
            out.append(f"{rw['time_us_median']:.1f}" if rw else "")
        for _, match, prefix in groups:
            cand = [r for r in by.values() if match(r)]
            if not cand:
                out += ["", "", "", ""]
                continue
            best = min(cand, key=lambda r: r["time_us_median"])
            label = best["variant"].removeprefix(prefix) or best["variant"].rsplit("_", 1)[-1]
            split = json.loads(best["config"] or "{}").get("SPLIT_K")
            label += f" k{split}" if split else ""
            speed = f"{base['time_us_median'] / best['time_us_median']:.2f}x" if base else ""
            out += [label or best["variant"], f"{best['time_us_median']:.1f}", f"{best['pct_of_roofline']:.0f}", speed]
        body.append(out)
    return _table(head, cols, body)


MOE_COLUMNS = [
    ("moe_align", "moe_align"),
    ("loop", "torch_moe_loop"),
    ("grouped_mm", "torch_grouped_mm"),
    ("row", "triton_moe_row"),
    ("col", "triton_moe_col"),
    ("grouped", "triton_moe_grouped"),
    ("splitk", "triton_moe_splitk"),
]


def render_moe(path: str) -> str:
    """One row per (GEMM, TP, EP, dtype, tokens) of the MoE rows: µs of each variant (splitk with its SPLIT_K),
    then the best fused variant's % of roofline and its speedups over the loop and torch._grouped_mm."""
    rows = [r for r in store.load(path).to_dict("records") if r["E"] > 1]
    counts = Counter(r["status"] for r in rows)
    head = f"`{path}`: {len(rows)} MoE cells, " + ", ".join(f"{n} {s}" for s, n in counts.most_common())
    cells: dict = {}
    for r in rows:
        if r["status"] == "ok":
            key = (r["gemm"], r["N"], r["K"], r["tp"], r.get("ep") or 1, r["dtype"], r["M"])
            cells.setdefault(key, {})[r["variant"]] = r
    cols = ["GEMM (N, K)", "TP", "EP", "dtype", "tokens"] + [f"{c} µs" for c, _ in MOE_COLUMNS]
    cols += ["best fused", "% roof", "vs loop", "vs grouped_mm"]
    body = []
    t = lambda r: float(r["time_us_median"])  # noqa: E731
    for k in sorted(cells):
        by = cells[k]
        out = [f"{k[0]} ({k[1]}, {k[2]})", str(k[3]), str(k[4]), k[5], str(k[6])]
        for _, v in MOE_COLUMNS:
            r = by.get(v)
            split = json.loads(r["config"] or "{}").get("SPLIT_K") if r and v == "triton_moe_splitk" else None
            out.append("" if r is None else f"{t(r):.1f}" + (f" (k{split})" if split and split > 1 else ""))
        fused = [r for v, r in by.items() if v.startswith("triton_moe_")]
        best = min(fused, key=t) if fused else None
        loop, gmm = by.get("torch_moe_loop"), by.get("torch_grouped_mm")
        out += [
            best["variant"].removeprefix("triton_moe_") if best else "",
            f"{best['pct_of_roofline']:.0f}" if best and best["pct_of_roofline"] == best["pct_of_roofline"] else "",
            f"{t(loop) / t(best):.2f}x" if best and loop else "",
            f"{t(gmm) / t(best):.2f}x" if best and gmm else "",
        ]
        body.append(out)
    return _table(head, cols, body)


def render_layer(path: str) -> str:
    """One row per layer (model, TP, dtype, M): its variants, the kernels' sum, eager launches, one CUDA graph."""
    from gemmbench.results.side_tables import load_layer_tables

    rows = load_layer_tables([path]).to_dict("records")
    layers = [r for r in rows if r["part"] == "layer"]
    head = f"`{path}`: {len(layers)} layers, " + ", ".join(
        f"{n} {s}" for s, n in Counter(r["status"] for r in layers).most_common()
    )
    cols = ["model", "TP", "dtype", "M", "variants", "kernels µs", "eager µs", "graph µs", "graph speedup"]
    num = lambda v: "" if v != v or v is None else f"{v:.1f}"  # noqa: E731 - NaN or None: empty
    body = [[r["model"], str(r["tp"]), r["dtype"], str(r["M"]), r["variant"], num(r["kernel_us"]), num(r["eager_us"]),
             num(r["graph_us"]), f"{r['graph_speedup']:.2f}x" if r["graph_speedup"] == r["graph_speedup"] else ""]
            for r in layers]  # fmt: skip
    return _table(head, cols, body)


def _profiled(path: str) -> tuple[list[dict], list[dict], int]:
    """A profile table's rows (one per kernel, and a summed one per cell), its ok cells' summed rows, and its cells
    (a failed cell has one row, no summed one)."""
    from gemmbench.profile.ncu import SUM_KERNEL
    from gemmbench.results.side_tables import load_profile_tables

    records = load_profile_tables([path]).to_dict("records")
    cells = [r for r in records if r["ncu_kernel"] == SUM_KERNEL or r["status"] != "ok"]
    return records, [r for r in cells if r["status"] == "ok"], len(cells)


def render_profile(path: str) -> str:
    """One row per profiled cell (its kernels summed): time under ncu, DRAM throughput and % of peak, L2 hit rate,
    tensor pipe."""
    _, rows, cells = _profiled(path)
    head = f"`{path}`: {cells} cells, {len(rows)} profiled"
    cols = ["GEMM (N, K)", "dtype", "M", "variant", "kernels", "µs", "DRAM GB/s", "% DRAM peak", "L2 hit %", "tensor %"]
    body = [[f"{r['gemm']} ({r['N']}, {r['K']})", r["dtype"], str(r["M"]), r["variant"], str(int(r["ncu_kernels"])),
             f"{r['ncu_duration_us']:.1f}", f"{r['ncu_dram_gbps']:.0f}", f"{r['ncu_dram_pct_peak']:.0f}",
             f"{r['ncu_l2_hit_pct']:.0f}", f"{r['ncu_tensor_pipe_pct']:.0f}"] for r in rows]  # fmt: skip
    return _table(head, cols, body)


def tile_label(variant: str, config: str, kernel: str) -> str:
    """What a profiled kernel computes a tile at: gluon_ws's config (schedule, rows x columns, ring, split), else the
    tile, ring and cluster an nvjet kernel's name gives (`..._144x128_128x6_1x2_...`: 144 x 128, K 128 in 6 stages,
    clusters of 1 x 2), read as cuBLAS's column-major m x n: the weight's columns by the tokens."""
    if variant == "gluon_ws":
        c = json.loads(config)
        width = f"({c['BLOCK_N']} + {c['BLOCK_N2']})" if c.get("BLOCK_N2") else str(c["BLOCK_N"])
        split = f", split {c['SPLIT_K']}" if c.get("SPLIT_K", 1) > 1 else ""
        return f"{c['SCHEDULE']} {c['BLOCK_M']} x {width}, {c['num_stages']} stages{split}"
    m = re.search(r"_(\d+)x(\d+)_\d+x(\d+)_(\d+)x(\d+)_", kernel)
    return f"{m[1]} x {m[2]}, {m[3]} stages, cluster {m[4]} x {m[5]}" if m else ""


def render_bounds(path: str) -> str:
    """One row per profiled cell (its kernels summed) with what bounds it under ncu --set full: the tile, time, tensor
    pipe, the SMs' balance (mean active cycles over the busiest's), cycles between a warp's issues and their top
    stall reasons, and the L2's sectors (what the SMs moved through it)."""
    records, rows, _ = _profiled(path)
    head = f"`{path}`: {len(rows)} cells profiled with `--set full`"
    cols = ["GEMM (N, K)", "dtype", "M", "variant", "tile", "µs", "tensor %", "SM balance", "cycles / issue",
            "top stalls (cycles / issue)", "L2 sectors (M)"]  # fmt: skip

    def first_kernel(cell: dict) -> str:  # a cell's rows come in launch order, its summed row last
        key = ("gemm", "M", "dtype", "scaling", "fp8_accum", "variant")
        same = [r for r in records if r is not cell and all(r[k] == cell[k] for k in key)]
        return str(same[0]["ncu_kernel"]) if same else ""

    body = [[f"{r['gemm']} ({r['N']}, {r['K']})", dtype_label(r), str(r["M"]), r["variant"],
             tile_label(r["variant"], r["config"], first_kernel(r)), f"{r['ncu_duration_us']:.1f}",
             f"{r['ncu_tensor_pipe_pct']:.0f}", f"{r['ncu_sm_balance']:.2f}", f"{r['ncu_issue_cycles']:.1f}",
             r["ncu_stall_top"], f"{r['ncu_l2_sectors'] / 1e6:.2f}"] for r in rows]  # fmt: skip
    return "\n".join([head, "", *md_table(cols, body, "lllll" + "rrrr" + "lr")])


class TargetCell(NamedTuple):
    """One problem of one shape set under one timing mode: a row of the targets table."""

    shape_set: str
    gemm: str
    N: int
    K: int
    tp: int
    dtype: str  # dtype_label: "fp8 fast" is a cell of its own
    timing: str
    M: int


class Verdict(NamedTuple):
    """A cell's best gemmbench variant: the median and the lowest of cuBLAS's time over its own, one per process."""

    cell: TargetCell
    variant: str
    median: float
    worst: float
    processes: int
    target: float

    @property
    def met(self) -> bool:
        return self.worst >= self.target


def target_for(c: TargetCell) -> float:
    """The time against cuBLAS (cuBLAS's over the variant's) a cell is held to: BENCHMARKS "Targets against cuBLAS"."""
    if c.M <= 64:
        return 1.3 if (c.gemm, c.tp, c.dtype, c.timing) == ("attn_qkv", 8, "fp8", "stream") else 0.97
    return 0.95 if c.M >= 512 else 0.9


def target_verdicts(rows: list[dict]) -> list[Verdict]:
    """rows: ok rows, each with its file in "path"; a process is one (file, run, process) triple.  Per cell, the
    non-cuBLAS variant with the best median over processes of cuBLAS's time over its own, in that process."""
    key = lambda r: TargetCell(r["shape_set"], r["gemm"], r["N"], r["K"], r["tp"], dtype_label(r), r["timing_mode"],  # noqa: E731
                               r["M"])  # fmt: skip
    verdicts = []
    for cell, procs in by_process(rows, key).items():
        ratios: dict = {}
        for by in procs.values():
            base = by.get(baseline_for(next(iter(by.values()))))
            for v, r in by.items():
                if base is not None and r["family"] != "cublas":
                    ratios.setdefault(v, []).append(base["time_us_median"] / r["time_us_median"])
        if ratios:
            v, rs = max(ratios.items(), key=lambda kv: statistics.median(kv[1]))
            verdicts.append(Verdict(cell, v, statistics.median(rs), min(rs), len(rs), target_for(cell)))
    return verdicts


def _processes(paths: list[str]) -> tuple[str, list[dict]]:
    """The files' counts line, and their rows, each with its file in "path" (one process of a sweep is one
    (file, run, process) triple)."""
    rows = [dict(r, path=p) for p in paths for r in store.load(p).to_dict("records")]
    counts = Counter(r["status"] for r in rows)
    return f"{len(paths)} files, {len(rows)} cells, " + ", ".join(f"{n} {s}" for s, n in counts.most_common()), rows


def render_targets(paths: list[str]) -> str:
    """Each file one process.  A summary per shape set, dtype and timing (a cell meets its target when every process
    does), then the cells that miss."""
    head, rows = _processes(paths)
    groups: dict = {}
    for v in target_verdicts([r for r in rows if r["status"] == "ok"]):
        groups.setdefault((v.cell.shape_set, v.cell.dtype, v.cell.timing), []).append(v)
    cols = ["shape set", "dtype", "timing", "cells", "processes", "met in every process", "≥ 1.0x (median)",
            "median", "lowest median (GEMM, TP, M)"]  # fmt: skip
    body, misses = [], []
    for (shape_set, label, timing), vs in sorted(groups.items()):
        low = min(vs, key=lambda v: v.median)
        body.append([shape_set, label, timing, str(len(vs)), str(min(v.processes for v in vs)),
                     str(sum(v.met for v in vs)), str(sum(v.median >= 1.0 for v in vs)),
                     f"{statistics.median(v.median for v in vs):.2f}x",
                     f"{low.median:.2f}x ({low.cell.gemm}, {low.cell.tp}, {low.cell.M})"])  # fmt: skip
        misses += [v for v in vs if not v.met]
    miss_cols = ["shape set", "GEMM (N, K)", "TP", "dtype", "timing", "M", "variant", "vs cuBLAS (median)", "worst process",
                 "target"]  # fmt: skip
    miss_body = [[c.shape_set, f"{c.gemm} ({c.N}, {c.K})", str(c.tp), c.dtype, c.timing, str(c.M), v.variant,
                  f"{v.median:.2f}x", f"{v.worst:.2f}x", f"{v.target:.2f}x"]
                 for v in sorted(misses, key=lambda v: (v.cell.shape_set, v.median)) for c in [v.cell]]  # fmt: skip
    return "\n".join([_table(head, cols, body), "", f"The {len(miss_body)} cells that miss:", "",
                      *md_table(miss_cols, miss_body, "llllll" + "r" * 4)])  # fmt: skip


VLLM_KERNEL, OURS_VLLM_CONFIG, OURS = "vllm_fused_moe", "triton_moe_grouped@vllm", "triton_moe_grouped"


def _per_process(paths: list[str], key) -> tuple[str, dict]:
    """The files' counts line, and their rows grouped by by_process."""
    head, rows = _processes(paths)
    return head, by_process(rows, key)


def by_process(rows: list[dict], key) -> dict:
    """{key(row): {(file, run, process): {variant: row}}}, a variant's ok row before any other of its status."""
    cells: dict = {}
    for r in rows:
        by = cells.setdefault(key(r), {}).setdefault((r["path"], r["run_id"], r["process"]), {})
        if r.get("status") == "ok" or r["variant"] not in by:
            by[r["variant"]] = r
    return cells


def _ok_times(procs: dict, variant: str) -> list[float]:
    return [by[variant]["time_us_median"] for by in procs.values() if by.get(variant, {}).get("status") == "ok"]


def _status_or_us(procs: dict, variant: str) -> str:
    """The median µs of a variant's ok rows over the processes, else its statuses (e.g. wrong)."""
    times = _ok_times(procs, variant)
    if times:
        return f"{statistics.median(times):.1f}"
    return ", ".join(sorted({by[variant]["status"] for by in procs.values() if variant in by}))


def _against(procs: dict, variant: str) -> tuple[str, str, float]:
    """(µs, 'median (lowest)' of vLLM's time over the variant's per process, that lowest) of one variant."""
    pairs = [by[VLLM_KERNEL]["time_us_median"] / by[variant]["time_us_median"] for by in procs.values()
             if all(by.get(v, {}).get("status") == "ok" for v in (VLLM_KERNEL, variant))]  # fmt: skip
    if not pairs:
        return _status_or_us(procs, variant), "", 0.0
    return _status_or_us(procs, variant), f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}x)", min(pairs)


def vllm_key(r: dict) -> tuple:
    return (r["gemm"], r["N"], r["K"], r["tp"], dtype_label(r), r["M"])


def render_moe_vllm(paths: list[str]) -> str:
    """vLLM's kernel (a plugin) against triton_moe_grouped with vLLM's config entries and with its own, per token
    count: µs (median over processes) and vLLM's time over ours (median, lowest process).  `met`: ours, with one
    of the two configs, at least as fast as vLLM's kernel in every process."""
    head, cells = _per_process(paths, vllm_key)
    cols = ["GEMM (N, K)", "TP", "dtype", "tokens", "vLLM µs", "ours, vLLM's config µs", "vs vLLM", "ours µs",
            "vs vLLM ", "met"]  # fmt: skip
    return _table(head, cols, [moe_vllm_row(k, procs) for k, procs in sorted(cells.items())])


def moe_vllm_row(key: tuple, procs: dict) -> list[str]:
    gemm, N, K, tp, label, M = key
    their, own = _against(procs, OURS_VLLM_CONFIG), _against(procs, OURS)
    met = "yes" if max(their[2], own[2]) >= 1.0 else "no" if _ok_times(procs, VLLM_KERNEL) else ""
    return [f"{gemm} ({N}, {K})", str(tp), label, str(M), _status_or_us(procs, VLLM_KERNEL), *their[:2], *own[:2], met]


def roofline_target(tokens: int) -> float:
    """% of roofline a routed-expert GEMM is held to: BENCHMARKS "Fused MoE against its roofline"."""
    return 90.0 if tokens <= 64 else 80.0


def roofline_key(r: dict) -> tuple:
    return (r["shape_set"], r["gemm"], r["N"], r["K"], r["tp"], r["ep"], dtype_label(r), r["M"])


def render_moe_roofline(paths: list[str]) -> str:
    """Per (model, GEMM, dtype, tokens): the fused variant with the best median % of roofline over the processes,
    that median and its lowest process, against roofline_target."""
    head, cells = _per_process(paths, roofline_key)
    cols = ["model", "GEMM (N, K)", "TP", "EP", "dtype", "tokens", "best fused", "% roof (median)", "lowest process",
            "target", "met"]  # fmt: skip
    body = [row for k, procs in sorted(cells.items()) if (row := moe_roofline_row(k, procs))]
    return "\n".join([head, "", *md_table(cols, body, "lllllr" + "l" + "r" * 4)])


def moe_roofline_row(key: tuple, procs: dict) -> list[str] | None:
    """None for a cell of skipped rows only (bf16 under --scaling block: the header counts them)."""
    model, gemm, N, K, tp, ep, label, M = key
    rows = [r for by in procs.values() for r in by.values() if r["status"] == "ok"]
    if not rows:
        return None
    pct: dict = {}
    for r in rows:
        if r["pct_of_roofline"] == r["pct_of_roofline"]:  # NaN: no bound
            pct.setdefault(r["variant"], []).append(r["pct_of_roofline"])
    target = roofline_target(M)
    named = [model, f"{gemm} ({N}, {K})", str(tp), str(ep), label, str(M)]
    if not pct:  # e.g. one token under EP: none of its experts on this rank, nothing to bound
        return named + ["no rows routed here", "", "", f"{target:.0f}", ""]
    v, ps = max(pct.items(), key=lambda kv: statistics.median(kv[1]))
    return named + [v.removeprefix("triton_moe_"), f"{statistics.median(ps):.0f}", f"{min(ps):.0f}", f"{target:.0f}",
                    "yes" if min(ps) >= target else "no"]  # fmt: skip


TRANSFER = ("own", "borrowed", "searched")


def _median_times(path: str) -> tuple[dict, dict]:
    """({(gemm, N, K, dtype, M, variant): median over processes of its ok rows' µs}, {the same key: config source})."""
    times: dict = {}
    sources: dict = {}
    for r in store.load(path).to_dict("records"):
        key = (r["gemm"], r["N"], r["K"], dtype_label(r), r["M"], r["variant"])
        if r["status"] == "ok":
            times.setdefault(key, []).append(r["time_us_median"])
            sources[key] = json.loads(r["config"] or "{}").get("source", "")
    return {k: statistics.median(v) for k, v in times.items()}, sources


def _geomean(xs: list[float]) -> float:
    return statistics.geometric_mean(xs) if xs else float("nan")


def render_transfer(paths: list[str]) -> str:
    """Three runs of one set on one GPU (its own configs, borrowed with --no-own --borrow, searched with --no-own):
    per Triton variant, its time with borrowed and searched configs over its time with its own (geomean and worst cell;
    > 1: slower), and which configs the borrowed run took; then, per run, cuBLAS's time over the fastest Triton
    variant's in each fp8 cell (median, lowest, highest)."""
    (own, _), (lent, lent_src), (found, _) = (_median_times(p) for p in paths)
    triton = sorted({k[-1] for k in own if not k[-1].startswith("cublas")})
    cols = ["variant", "cells", "borrowed ÷ own (geomean)", "worst cell", "searched ÷ own (geomean)", "worst cell",
            "the borrowed run's configs"]  # fmt: skip
    body = []
    for v in triton + ["all"]:
        keys = [k for k in own if (k[-1] == v or (v == "all" and k[-1] in triton)) and k in lent and k in found]
        b = [lent[k] / own[k] for k in keys]
        f = [found[k] / own[k] for k in keys]
        took = Counter(lent_src[k] for k in keys)
        body.append([v, str(len(keys)), f"{_geomean(b):.3f}", f"{max(b):.3f}", f"{_geomean(f):.3f}", f"{max(f):.3f}",
                     ", ".join(f"{s} {n}" for s, n in sorted(took.items()))])  # fmt: skip
    vs_cublas = []
    for name, times in zip(TRANSFER, (own, lent, found), strict=True):
        ratios = []
        for cell in {k[:-1] for k in times if k[3] == "fp8"}:
            best = min((t for k, t in times.items() if k[:-1] == cell and k[-1] in triton), default=None)
            base = times.get((*cell, "cublas_fp8"))
            if best and base:
                ratios.append(base / best)
        vs_cublas.append([name, str(len(ratios)), f"{statistics.median(ratios):.2f}x", f"{min(ratios):.2f}x",
                          f"{max(ratios):.2f}x"])  # fmt: skip
    head = "configs: " + ", ".join(f"{n} {Path(p).name}" for n, p in zip(TRANSFER, paths, strict=True))
    fp8 = ["configs", "fp8 cells", "cuBLAS ÷ best Triton (median)", "lowest", "highest"]
    return "\n".join([_table(head, cols, body), "", *md_table(fp8, vs_cublas, "lrrrr")])


def versus_ratios(rows: list[dict]) -> dict:
    """{(GEMM, N, K, TP, dtype label, M): cuBLAS's time over the fastest other variant's} of one process's ok rows;
    a cell without both is left out."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["gemm"], r["N"], r["K"], r["tp"], dtype_label(r), r["M"]), []).append(r)
    ratios = {}
    for k, rs in cells.items():
        base = [r["time_us_median"] for r in rs if r["variant"] == baseline_for(rs[0])]
        others = [r["time_us_median"] for r in rs if r["family"] != "cublas"]
        if base and others:
            ratios[k] = base[0] / min(others)
    return ratios


def render_versus(paths: list[str]) -> str:
    """Builds side by side, one file each (one process of one sweep): per GEMM, TP and dtype, each M's time of cuBLAS
    over the file's fastest other variant, in file order ("0.81x → 0.96x"); then per file the cells, their median,
    and how many reach 0.95x and 1.0x.  Only the cells every file holds: like against like."""
    per_file = [versus_ratios([r for r in store.load(p).to_dict("records") if r["status"] == "ok"]) for p in paths]
    common = set.intersection(*(set(r) for r in per_file))
    per_file = [{k: v for k, v in r.items() if k in common} for r in per_file]
    shapes = sorted({k[:5] for ratios in per_file for k in ratios})
    ms = sorted({k[5] for ratios in per_file for k in ratios})
    cols = ["GEMM (N, K)", "TP", "dtype", *[f"M {m}" for m in ms]]
    body = [[f"{g} ({n}, {kk})", str(tp), label,
             *[" → ".join(f"{r[(g, n, kk, tp, label, m)]:.2f}x" if (g, n, kk, tp, label, m) in r else "-"
                          for r in per_file) for m in ms]]
            for g, n, kk, tp, label in shapes]  # fmt: skip
    summary = [[Path(p).name, str(len(r)), f"{statistics.median(r.values()):.2f}x",
                str(sum(x >= 0.95 for x in r.values())), str(sum(x >= 1.0 for x in r.values()))]
               for p, r in zip(paths, per_file, strict=True)]  # fmt: skip
    head = " → ".join(f"`{Path(p).name}`" for p in paths) + ": cuBLAS's time over the fastest other variant's"
    return "\n".join([_table(head, cols, body), "",
                      *md_table(["file", "cells", "median", "≥ 0.95x", "≥ 1.0x"], summary, "lrrrr")])  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parquet", nargs="*")
    ap.add_argument("--group", action="append", help="NAME=GLOB: a column group of variants (repeatable)")
    ap.add_argument("--moe", action="store_true", help="the MoE table (fused schedules against the baselines)")
    ap.add_argument("--layer", action="store_true", help="the layer table (`gemmbench layer` output)")
    ap.add_argument("--profile", action="store_true", help="the profile table (`gemmbench profile` output)")
    ap.add_argument("--bounds", action="store_true", help="the profile table's bounds: tile, stalls, balance, L2")
    ap.add_argument("--targets", action="store_true", help="the targets table: every file one process of one sweep")
    ap.add_argument("--moe-vllm", action="store_true", help="the fused MoE table against vLLM's kernel (a plugin)")
    ap.add_argument("--moe-roofline", action="store_true", help="the fused MoE table against its roofline targets")
    ap.add_argument("--transfer", action="store_true", help="configs across GPUs: the own, borrowed, searched runs")
    ap.add_argument("--versus", action="store_true", help="builds side by side: each file one process, in order")
    ap.add_argument("--check", metavar="MD", help="exit 1 where a marked table of this file differs from its files")
    ap.add_argument("--update", metavar="MD", help="write every marked table of this file again from its files")
    return ap


def tables(args: argparse.Namespace) -> str:
    for flag, whole in ((args.targets, render_targets), (args.moe_vllm, render_moe_vllm),
                        (args.moe_roofline, render_moe_roofline), (args.transfer, render_transfer),
                        (args.versus, render_versus)):  # fmt: skip
        if flag:
            return whole(args.parquet)
    kinds = ((args.moe, render_moe), (args.layer, render_layer), (args.profile, render_profile),
             (args.bounds, render_bounds))  # fmt: skip
    kind = next((render for flag, render in kinds if flag), None)
    return "\n\n".join(kind(p) if kind else render(p, args.group) for p in args.parquet)


MARKED = re.compile(r"(<!-- bench_tables\.py (?P<args>.*?) -->\n)(?P<body>.*?)(<!-- /bench_tables\.py -->)", re.S)


def refreshed(text: str) -> str:
    """The Markdown text with every marked table rendered again from the files its marker names."""
    return MARKED.sub(lambda m: m[1] + tables(_parser().parse_args(shlex.split(m["args"]))) + "\n" + m[4], text)


def main() -> None:
    args = _parser().parse_args()
    for path in filter(None, (args.check, args.update)):
        old = Path(path).read_text(encoding="utf-8")
        new = refreshed(old)
        if args.update:
            Path(path).write_text(new, encoding="utf-8")
        elif new != old:
            sys.exit(f"{path}: a table differs from its Parquet files: python3 scripts/bench_tables.py --update {path}")
        return
    if not args.parquet:
        sys.exit("give Parquet files, or --check / --update a Markdown file")
    print(tables(args))


if __name__ == "__main__":
    main()
