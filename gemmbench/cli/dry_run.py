"""`run --dry-run`: what a sweep would run, one rank's problem per cell, without running or writing anything."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import Deployment, err, out
from gemmbench.cli.formats import print_json
from gemmbench.cli.options import OUTPUT

DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print each cell as rank 0 of the deployment runs it (N, K, local experts, tokens) and the variants that "
        "would run or skip it; run and write nothing (any machine).",
        rich_help_panel=OUTPUT,
    ),
]
NEEDS_GPU = "unknown: needs a GPU"  # a variant's own support check asks the device, and there is none here


def print_dry_run(sset, cells: list, dep: Deployment, as_json: bool) -> None:
    """The cells of `run` (select_cells') as a table, or as the `gemmbench.dry-run/1` JSON document."""
    from gemmbench.dtypes import label  # not at --help
    from gemmbench.measure import device  # heavy (torch)

    dev = device.detect()
    docs = [_cell(p, names, dev if dev.kind == "cuda" else None) for p, names in cells]
    if as_json:
        print_json({"schema": "gemmbench.dry-run/1", "shape_set": sset.name, "source": sset.source,
                    "deployment": {"tp": list(dep.tps), "dp": list(dep.dps), "ep": list(dep.eps),
                                   "layout": dep.layout},
                    "cells": docs})  # fmt: skip
        return
    table = Table(title=escape(f"{sset.name}: rank 0's GEMMs, layout {dep.layout} (dry run: nothing runs)"))
    for col in ("gemm", "tp", "dp", "ep", "M", "tokens", "N", "K", "E", "local E", "topk", "dtype", "runs", "skips"):
        table.add_column(col, justify="left" if col in ("gemm", "dtype", "runs", "skips") else "right")
    for c in docs:
        moe = c["E"] > 1
        skips = "; ".join(f"{v}: {why}" for v, why in c["skips"].items())
        table.add_row(
            escape(c["gemm"]), *(str(c[k]) for k in ("tp", "dp", "ep", "M", "tokens", "N", "K")),
            *((str(c["E"]), str(c["local_experts"]), str(c["topk"])) if moe else ("", "", "")),
            escape(label(c["dtype"], c["scaling"], c["fp8_accum"]) if c["scaling"] != "none" else c["dtype"]),
            escape(", ".join(c["runs"])), escape(skips),
        )  # fmt: skip
    out.print(table)
    err.print(f"{len(docs)} problems, {sum(len(c['runs']) for c in docs)} cells would run", highlight=False)


def _cell(p, names: list[str], dev: Any) -> dict:
    """One problem as the dry run shows it: M is one DP rank's tokens, `tokens` what the GEMM sees (M x DP for an
    expert GEMM: every DP rank's tokens, routed over all E experts, of which rank 0 holds `local_experts`)."""
    from gemmbench import registry

    runs, skips = [], {}
    for name in names:
        v = registry.get(name)
        why = v.declared_reason(p)
        if why is None and v.supports is not None:
            why = v.supports(p, dev) if dev is not None else NEEDS_GPU
        if why is None:
            runs.append(name)
        else:
            skips[name] = why
    doc = dict(gemm=p.gemm, M=p.M // p.dp_tokens, tokens=p.M, N=p.N, K=p.K, E=p.E, local_experts=p.local_experts,
               topk=p.topk, shared_experts=p.shared_experts, routing=p.routing if p.is_moe else None,
               pairs_routed=p.M * p.topk if p.is_moe else None, tp=p.tp, ep=p.ep, dp=p.dp, layout=p.layout,
               dtype=p.dtype, scaling=p.scaling, fp8_accum=p.fp8_accum)  # fmt: skip
    return dict(doc, runs=runs, skips=skips)
