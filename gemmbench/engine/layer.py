"""`gemmbench layer`: the GEMMs of one decoder layer, end to end, eager launches against one CUDA graph.

The question is the seed's (docs/SEEDS.md, TK-GEMM §5).

A layer is its model's GEMMs in order (QKV, o, gate_up, down; for an MoE model the routing step before the expert
GEMMs), one variant each, on persistent buffers as a model holds them.  Each GEMM is checked against the fp32
reference first.  Then, per M:

  kernels  each step timed alone, cold L2 (gemmbench.measure.timing), summed: the GPU work of a layer;
  eager    host wall time of the layer launched from Python, GPU idle and L2 emptied before, synchronised after;
  graph    the same launches captured once in a CUDA graph and replayed, timed the same way;
  gaps     (eager - kernels) / steps and (graph - kernels) / steps: what each launch costs beyond its kernel
           (the seed measured 165 µs between TK-GEMM launches eager and 6.65 µs in a graph); one below zero is
           noise, not a cost: kept, marked in gap_note, shown as N/A (metrics.gap_note).

Attention, norms and activations are not part of it: the seed's simulated layer is its GEMMs back to back, and
these are what gemmbench measures.  `--layers N` builds N copies (distinct weights, as N layers of a model have)
and launches them back to back: steady-state throughput, per layer.

Rows go to a layer table (table_versions.LAYER_SCHEMA), not a run file: one `part=layer` row per (model, TP, dtype,
M) and one `part=step` row per step with its own kernel time; every row has family "layer".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from gemmbench import registry
from gemmbench.engine.layer_plan import Step, plan_label
from gemmbench.measure import check as check_mod
from gemmbench.measure import timing, timing_modes
from gemmbench.measure.inputs import GemmInputs, cell_seed, local_ids, make_inputs
from gemmbench.results.metrics import gap_note, summarize
from gemmbench.results.table_versions import LAYER_SCHEMA
from gemmbench.shapes import Problem

# ---------------------------------------------------------------- buffers and launches


@dataclass
class Built:
    """One step of one layer copy, ready to launch."""

    step: Step
    fn: Callable
    graph_safe: bool = True
    config: dict = field(default_factory=dict)
    inputs: Optional[GemmInputs] = None  # None for the routing step
    out: object = None


class Routing:
    """The MoE routing of a layer: router logits, softmax, top-k, weights renormalised (Mixtral), written into the
    ids and weights every expert GEMM of the layer reads, then the block alignment for each BLOCK_M those GEMMs
    use: what a model does on the GPU before its expert GEMMs, with no host sync.  Under expert parallelism the
    router still picks among all E experts; the ids are then mapped to rank 0's (-1: another rank's expert).
    Every model is routed this way (softmax top-k): DeepSeek-V3 scores with a sigmoid and picks within expert groups,
    Llama-4 takes a sigmoid top-1; those are a few more elementwise kernels on the same (M, E) logits, not modelled."""

    def __init__(self, p: Problem, seed: int, device: str):
        gen = torch.Generator(device=device).manual_seed(seed)
        dt = torch.float32 if device == "cpu" else torch.bfloat16  # routers stay 16-bit in fp8 deployments
        self.x = (torch.randn((p.M, p.K), generator=gen, device=device) / math.sqrt(p.K)).to(dt)
        self.w = torch.randn((p.E, p.K), generator=gen, device=device).to(dt)
        self.local, self.topk = p.local_experts, p.topk
        self.ids = torch.zeros((p.M, p.topk), dtype=torch.int32, device=device)
        self.weights = torch.zeros((p.M, p.topk), dtype=torch.float32, device=device)
        self.block_ms: list[int] = []

    def __call__(self):
        from gemmbench.kernels.moe_align import moe_align  # gemmbench.kernels: after TRITON_INTERPRET is set

        probs = torch.softmax((self.x @ self.w.t()).float(), dim=-1)
        w, i = torch.topk(probs, self.topk, dim=-1)
        self.weights.copy_(w / w.sum(dim=-1, keepdim=True))
        self.ids.copy_(local_ids(i, self.local))
        for bm in self.block_ms:
            moe_align(self.ids, self.local, bm)
        return self.ids


class StepFailed(Exception):
    """A GEMM step's variant raised while the layer was built or checked: `step` names it, `exc` is what it raised."""

    def __init__(self, step: str, exc: Exception):
        super().__init__(f"{step}: {exc}")
        self.step, self.exc = step, exc


def build(steps: Sequence[Step], seed: int, device: str) -> list[Built]:
    """One layer copy: inputs drawn on the device, the routing run once so that every expert GEMM is made (its
    alignment computed) for the routing it will see, then each variant's launch."""
    routings: dict = {}  # (E, topk) -> its Routing, made for the first expert GEMM it feeds (the router reads its K)
    for s in steps:
        # s.is_gemm, spelled out so that the type checker narrows s.problem
        if s.problem is not None and s.problem.is_moe and (s.problem.E, s.problem.topk) not in routings:
            routings[(s.problem.E, s.problem.topk)] = r = Routing(s.problem, seed, device)
            r()
    built = []
    for s in steps:
        if not s.is_gemm:
            built.append(Built(s, routings[s.routes]))
            continue
        assert s.problem is not None and s.variant is not None  # a GEMM step has both
        v = registry.get(s.variant)
        inputs = make_inputs(s.problem, cell_seed(seed, s.problem), device)
        routing = routings.get((s.problem.E, s.problem.topk))
        if routing is not None:  # the layer's routing, not each GEMM's own
            inputs.topk_ids, inputs.topk_weights = routing.ids, routing.weights
        try:
            launch = v.make(s.problem, inputs)
        except Exception as exc:  # noqa: BLE001 - the step's variant refused it: the layer may take the next one
            raise StepFailed(s.name, exc) from exc
        built.append(Built(s, launch.fn, launch.graph_safe, dict(launch.config), inputs, launch.out))
        if s.problem.is_moe and "BLOCK_M" in launch.config:
            assert routing is not None  # the first loop made one for every expert GEMM
            if launch.config["BLOCK_M"] not in routing.block_ms:
                routing.block_ms.append(int(launch.config["BLOCK_M"]))
    return built


def check(built: Sequence[Built]) -> list[dict]:
    """Each GEMM of the layer through the one check (check.check_cell, on the launch the layer built, so that its
    routing is the layer's): [{step, ok, max_rel_err, detail}]."""
    out = []
    for b in built:
        if not b.step.is_gemm:
            continue
        assert b.step.problem is not None and b.step.variant is not None and b.inputs is not None  # built as a GEMM
        try:
            res = check_mod.check_cell(b.step.problem, registry.get(b.step.variant), b.inputs, launch=b).result
        except Exception as exc:  # noqa: BLE001 - the step's variant failed its launch: the layer may take the next one
            raise StepFailed(b.step.name, exc) from exc
        out.append(dict(step=b.step.name, ok=res.ok, max_rel_err=res.max_rel_err, detail=res.detail))
    return out


def graph_blockers(built: Sequence[Built]) -> list[str]:
    """Why the layer cannot be captured in a CUDA graph, one entry per step that cannot be (named)."""
    return [
        f"{b.step.variant} ({b.step.name}) syncs with the host and cannot be captured"
        for b in built
        if not b.graph_safe
    ]


# ---------------------------------------------------------------- timing


@dataclass
class Measured:
    kernel_samples: list  # per step of the first copy: its samples (µs)
    eager: list  # per-layer µs samples
    graph: Optional[list] = None
    graph_reason: Optional[str] = None  # why there is no graph time
    graph_max_rel_err: Optional[float] = None
    kernel_modes: list = field(default_factory=list)  # per step: the timing mode of its kernel time


def _kernel_time(b: Built, gpu: bool, budget_s: float) -> tuple[list, str]:
    """One step's GPU time alone, L2 emptied first: captured in a CUDA graph with its events (timing mode
    "graph"), so that a step of several launches (the routing) counts its kernels and not its host launch costs;
    a step that cannot be captured is timed eagerly ("cold"), its own host syncs included; on a CPU, "wall"."""
    if gpu and b.graph_safe:
        try:
            return timing.Timer("graph", budget_s=budget_s, warmup_ms=10).measure([b.fn]), "graph"
        except (timing.TimingError, RuntimeError):  # not capturable after all: its eager time is the best there is
            torch.cuda.synchronize()
    mode = timing_modes.default(gpu)
    return timing.Timer(mode, budget_s=budget_s, warmup_ms=10).measure([b.fn], b.graph_safe), mode


def measure(copies: list[list[Built]], budget_s: float, label: str) -> Measured:
    """Kernel times per step (first copy), then eager and graph samples of the whole layer through the one timing
    primitive (timing.Timer's host-wall sampler: GPU idle with L2 emptied, host clock around the launches and a
    synchronize), in interleaved batches so that a clock drift favours neither, under Timer's one stopping rule."""
    gpu = torch.cuda.is_available()
    timed = [_kernel_time(b, gpu, budget_s / 4) for b in copies[0]]
    fns = [b.fn for copy in copies for b in copy]

    def eager():
        for fn in fns:
            fn()

    m = Measured([t for t, _ in timed], [], kernel_modes=[mode for _, mode in timed])
    timer = timing.Timer("wall", budget_s=budget_s / 2, batch=5)  # the budget covers eager and graph together
    prepared = {"eager": timer.prepare_host(eager, evict=gpu, per_sample=len(copies), cell=f"eager layer {label}")}
    blockers = graph_blockers(copies[0])
    if not gpu:
        m.graph_reason = "no CUDA GPU: graph mode skipped"
    elif blockers:
        m.graph_reason = "; ".join(blockers)
    else:
        replay, m.graph_reason, m.graph_max_rel_err = _capture(copies, fns)
        if replay is not None:
            prepared["graph"] = timer.prepare_host(replay, evict=gpu, per_sample=len(copies),
                                                   cell=f"graph layer {label}")  # fmt: skip
    samples = timer.run(prepared)
    m.eager, m.graph = samples["eager"], samples.get("graph")
    return m


def _capture(copies: list[list[Built]], fns: list) -> tuple[Optional[Callable], Optional[str], Optional[float]]:
    """The layer copies captured in one CUDA graph: (replay, None, max rel. difference graph vs eager) or
    (None, why, None) when capture fails or the replay's outputs differ from the eager launches'."""
    eager_out = [b.fn() for copy in copies for b in copy]
    eager_out = [o.clone() if isinstance(o, torch.Tensor) else o for o in eager_out]
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            graph_out = [fn() for fn in fns]
    except Exception as exc:  # capture refused (a sync or host copy inside): name it, keep the eager time
        torch.cuda.synchronize()
        return (
            None,
            f"capture failed: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
            None,
        )
    graph.replay()
    torch.cuda.synchronize()
    worst = 0.0
    layer_built = [b for copy in copies for b in copy]
    for b, e, g in zip(layer_built, eager_out, graph_out, strict=False):
        s = b.step
        if not s.is_gemm:
            if not torch.equal(e, g):
                return None, "graph replay routed tokens differently from the eager launches", None
            continue
        assert s.problem is not None and b.inputs is not None  # a GEMM step's, built with its inputs
        res = check_mod.compare(s.problem, g, e.float(), check_mod.owned_rows(b.inputs))
        if not res.ok:
            return None, f"graph replay output of {s.name} differs from eager: {res.detail}", res.max_rel_err
        worst = max(worst, res.max_rel_err)
    return graph.replay, None, worst


# ---------------------------------------------------------------- rows


def rows_for(
    meta: dict,
    steps: Sequence[Step],
    built: Sequence[Built],
    m: Optional[Measured],
    status: str,
    reason: Optional[str],
    checks: Sequence[dict] = (),
) -> list[dict]:
    """The layer row and one row per step.  meta: run_id, model, shape_set, tp, dtype, M, layers, provenance."""
    base = dict(meta, family="layer", layer_schema=LAYER_SCHEMA)
    errs = {c["step"]: c["max_rel_err"] for c in checks}
    step_rows = []
    for i, s in enumerate(steps):
        b = built[i] if i < len(built) else None
        row = dict(
            base,
            part="step",
            step=i,
            gemm=s.name,
            variant=s.variant or "torch",
            config=json.dumps(b.config, sort_keys=True) if b and b.config else None,
            status=status,
            max_rel_err=errs.get(s.name),
            fallback="; ".join(s.failed) or None,
        )
        if s.is_gemm:
            assert s.problem is not None
            row.update(N=s.problem.N, K=s.problem.K, E=s.problem.E, topk=s.problem.topk)
        if m is not None:
            stats = summarize(m.kernel_samples[i])
            row.update(
                kernel_us=stats["time_us_median"],
                kernel_us_p20=stats["time_us_p20"],
                kernel_us_p80=stats["time_us_p80"],
                samples_us=list(m.kernel_samples[i]),
                timing_mode=m.kernel_modes[i],
                l2_state="cold",
            )
        step_rows.append(row)
    layer = dict(
        base,
        part="layer",
        step=None,
        gemm="layer",
        variant=plan_label(steps),
        status=status,
        reason=reason,
        steps=len(steps),
        plan=json.dumps({s.name: s.variant or "torch" for s in steps}),
        max_rel_err=max(errs.values()) if errs else None,
    )
    if m is not None:
        kernels = float(sum(r["kernel_us"] for r in step_rows))
        eager = float(np.median(m.eager))
        layer.update(
            kernel_us=kernels,
            eager_us=eager,
            eager_samples=list(m.eager),
            gap_us=(eager - kernels) / len(steps),
            graph_reason=m.graph_reason,
            graph_max_rel_err=m.graph_max_rel_err,
        )
        if m.graph:
            graph = float(np.median(m.graph))
            layer.update(
                graph_us=graph,
                graph_samples=list(m.graph),
                graph_gap_us=(graph - kernels) / len(steps),
                graph_speedup=eager / graph,
            )
        layer["gap_note"] = gap_note({"eager": layer["gap_us"], "graph": layer.get("graph_gap_us")})
    return [layer] + step_rows
