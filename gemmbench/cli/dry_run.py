"""`run --dry-run`: what a sweep would run, one rank's problem per cell, without running or writing anything."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import err, out
from gemmbench.cli.formats import print_json
from gemmbench.cli.options import OUTPUT
from gemmbench.engine.plan import Deployment

DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print each cell as rank 0 of the deployment runs it (N, K, local experts, tokens) and the variants that "
        "would run or skip it; run and write nothing (any machine).",
        rich_help_panel=OUTPUT,
    ),
]
DEFAULT_GPU = "NVIDIA H200"  # what a dry run on a machine without a GPU answers for (--gpu NAME: another part)


def print_dry_run(sset, cells: list, dep: Deployment, as_json: bool, gpu, policy=None) -> None:
    """The cells of `run` (plan.cells') as a table of one line per problem with footnotes, or as the
    `gemmbench.dry-run/1` JSON document; gpu (a cli.target_gpu.TargetGpu): whose support and configs are predicted,
    under the lookup's policy (config_sources.Policy).  A rule a GPU described from the parts table cannot settle here
    (a probe of the GPU machine's own torch or Triton) is listed apart, as decided on the GPU."""
    from gemmbench.dtypes import label  # not at --help

    docs = [_cell(p, names, gpu, policy) for p, names in cells]
    configs = _configs_summary(docs, gpu)
    if as_json:
        print_json({"schema": "gemmbench.dry-run/1", "shape_set": sset.name, "source": sset.source,
                    "deployment": {"tp": list(dep.tps), "dp": list(dep.dps), "ep": list(dep.eps),
                                   "layout": dep.layout},
                    "gpu": gpu.name, "stand_in": bool(gpu.device.stand_in), "configs": configs,
                    "cells": docs})  # fmt: skip
        return
    where = "described from the parts table" if gpu.device.stand_in else "this machine's"
    table = Table(title=escape(f"{sset.name}: rank 0's GEMMs on {gpu.name} ({where}), layout {dep.layout} (dry run: "
                               "nothing runs)"))  # fmt: skip
    cols = ("gemm", "tp", "dp", "ep", "M", "tokens", "N", "K", "E", "local E", "topk", "dtype", "run", "on the GPU",
            "skip")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("gemm", "dtype") else "right", no_wrap=True)
    for c in docs:
        moe = c["E"] > 1
        table.add_row(
            escape(c["gemm"]), *(str(c[k]) for k in ("tp", "dp", "ep", "M", "tokens", "N", "K")),
            *((str(c["E"]), str(c["local_experts"]), str(c["topk"])) if moe else ("", "", "")),
            escape(label(c["dtype"], c["scaling"], c["fp8_accum"]) if c["scaling"] != "none" else c["dtype"]),
            str(len(c["runs"])), str(len(c["on_the_gpu"])) if c["on_the_gpu"] else "", str(len(c["skips"])) if c["skips"] else "",
        )  # fmt: skip
    out.print(table)
    for line in _footnotes(docs):
        out.print(escape(line), highlight=False, soft_wrap=True)
    if configs is not None:
        out.print(escape(_configs_line(configs)), highlight=False, soft_wrap=True)
    later = sum(len(c["on_the_gpu"]) for c in docs)
    err.print(f"{len(docs)} problems, {sum(len(c['runs']) for c in docs)} cells would run"
              + (f", {later} more decided on the GPU" if later else ""), highlight=False)  # fmt: skip


def _footnotes(docs: list[dict]) -> list[str]:
    """Who runs, who is left to the GPU and who is skipped, one line per variant set or reason, with the problems."""
    from gemmbench.measure.device import ON_THE_GPU  # torch: not at --help

    groups: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(docs):
        groups.setdefault(("run", ", ".join(c["runs"]) or "nothing"), []).append(i)
        for v, why in c["on_the_gpu"].items():
            groups.setdefault((why, v), []).append(i)
        for v, why in c["skips"].items():
            groups.setdefault((why, v), []).append(i)
    lines: list[str] = []
    by_reason: dict[str, list[tuple[str, list[int]]]] = {}
    for (kind, what), rows in groups.items():
        if kind == "run":
            lines.append(f"runs: {what} ({_count(rows, docs)})")
        else:
            by_reason.setdefault(kind, []).append((what, rows))
    for why, variants in by_reason.items():
        names = ", ".join(v for v, _ in variants)
        rows = sorted({i for _, r in variants for i in r})
        kind = "" if why.startswith(ON_THE_GPU) else "skipped: "
        lines.append(f"{kind}{names}: {why} ({_count(rows, docs)})")
    return lines


def _count(rows: list[int], docs: list[dict]) -> str:
    return "every problem" if len(rows) == len(docs) else f"{len(rows)} of {len(docs)} problems"


def _cell(p, names: list[str], gpu: Any, policy: Any = None) -> dict:
    """One problem as the dry run shows it: M is one DP rank's tokens, `tokens` what the GEMM sees (M x DP for an
    expert GEMM: every DP rank's tokens, routed over all E experts, of which rank 0 holds `local_experts`); for each
    Triton variant that runs, the config a run on the GPU would take (config_sources.predict)."""
    from gemmbench import registry
    from gemmbench.configs import config_sources
    from gemmbench.measure.device import ON_THE_GPU

    runs, later, skips, configs = [], {}, {}, {}
    for name in names:
        v = registry.get(name)
        why = v.declared_reason(p)
        if why is None and v.supports is not None:
            why = v.supports(p, gpu.device)
        if why is None:
            runs.append(name)
        elif why.startswith(ON_THE_GPU):
            later[name] = why
        else:
            skips[name] = why
            continue
        if v.tunable is not None:  # left to the GPU's machine too: should it run, this is the config it would take
            configs[name] = config_sources.predict(name, p, gpu.name, gpu.part, policy or config_sources.Policy())
    doc = dict(gemm=p.gemm, M=p.dp_rank_m or p.M, tokens=p.M, N=p.N, K=p.K, E=p.E, local_experts=p.local_experts,
               topk=p.topk, shared_experts=p.shared_experts, routing=p.routing if p.is_moe else None,
               pairs_routed=p.M * p.topk if p.is_moe else None, tp=p.tp, ep=p.ep, dp=p.dp, layout=p.layout,
               dtype=p.dtype, scaling=p.scaling, fp8_accum=p.fp8_accum)  # fmt: skip
    return dict(doc, runs=runs, on_the_gpu=later, skips=skips, configs=configs)


def _configs_summary(docs: list[dict], gpu: Any) -> Optional[dict]:
    """{"gpu", "own", "borrowed": {lender: cells}, "searched", "search"}: the cells of Triton variants by the source a
    run would take; None without a GPU to ask about."""
    if gpu is None:
        return None
    got = [c for d in docs for c in d["configs"].values()]
    lent: dict[str, int] = {}
    for c in got:
        if c["source"] == "borrowed":
            lent[c["from"]] = lent.get(c["from"], 0) + 1
    counts = {k: sum(c["source"] == k for c in got) for k in ("own", "searched", "search")}
    return {"gpu": gpu.name, **counts, "borrowed": dict(sorted(lent.items()))}


def _configs_line(s: dict) -> str:
    lent = [f"borrowed from {k} {n}" for k, n in s["borrowed"].items()] or ["borrowed 0"]
    return (
        f"configs on {s['gpu']}, as a run would take them: own {s['own']}, {', '.join(lent)}, searched by an "
        f"earlier run {s['searched']}, to search {s['search']} (cells)"
    )
