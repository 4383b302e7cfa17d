"""Which launches make one decoder layer for `gemmbench layer` (gemmbench.engine.layer builds, checks and times them): the
--model resolved to a shape set, the layer's GEMMs at one M (in_layer: no LM head, no router GEMM, this kind's
MLP), the routing step before the expert GEMMs, one variant per GEMM (--variants globs and pins, or --best-from a
run's fastest), and the steps as JSON for the engine's `layer` task.  Pure planning: nothing here launches."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, cast

from gemmbench import dtypes, registry, shapes
from gemmbench.measure import timing_modes
from gemmbench.models import hf_config, shape_sets, sharding
from gemmbench.shapes import Problem, ShapeSet

if TYPE_CHECKING:
    import pandas as pd

# --model names -> built-in shape sets; the layer is every GEMM of the set but these
# (the model sets of gemmbench/shapesets/, deepseek-v3, qwen3-30b-a3b, llama4-maverick, gpt-oss-120b, ..., are --model names as is)
MODELS = {"llama3-70b": "llama70b", "mixtral-8x7b": "mixtral-moe", "mixtral-8x22b": "mixtral-8x22b-moe"}
NOT_IN_LAYER = ("lm_head",)  # runs once per token, after the last layer
ROUTING = "routing"
# cuBLAS for dense GEMMs, the seed's column-major fused MoE (docs/SEEDS.md, MoE §4)
# triton_dp_grouped: dense GEMMs where no cuBLAS variant runs (block-scaled fp8 without cuBLAS's block GEMM: the CPU,
# a torch before 2.10)
DEFAULT_VARIANTS = "cublas_*,triton_dp_grouped,triton_moe_col"


class LayerError(ValueError):
    """One line for the user."""


# ---------------------------------------------------------------- which GEMMs, which variants


def resolve_model(spec: str) -> ShapeSet:
    """A --model: a name of MODELS, a built-in shape set, a shape-set YAML or a Hugging Face config.json."""
    if spec in MODELS:
        return shape_sets.load(MODELS[spec])
    path = Path(spec)
    if path.suffix == ".json":
        name, text = hf_config.from_hf_config(path)
        return shape_sets.load_text(str(path), text)
    try:
        return shape_sets.load(spec)
    except shapes.ShapeError as exc:
        if path.exists() or len(path.parts) > 1 or path.suffix:
            raise
        raise LayerError(
            f"--model {spec!r}: not one of {', '.join(MODELS)}, a built-in shape set, a YAML file or a config.json"
        ) from exc


@dataclass(frozen=True)
class Step:
    """One launch of the layer: a GEMM (problem, variant) or the MoE routing (problem None)."""

    name: str
    problem: Optional[Problem] = None
    variant: Optional[str] = None
    routes: Optional[tuple[int, int]] = None  # a routing step: the (E, topk) of the expert GEMMs it feeds
    # the variants of --variants after `variant` that also run the GEMM here, in order: taken one by one where the
    # ones before fail when the layer is built or checked
    fallbacks: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()  # "variant: why" of each that failed before `variant` ran

    @property
    def is_gemm(self) -> bool:
        return self.problem is not None


def steps_to_wire(steps: Sequence[Step]) -> list[dict]:
    """Steps as JSON, for the engine's `layer` task (steps_from_wire reads them back)."""
    return [{"name": s.name, "problem": asdict(s.problem) if s.problem else None, "variant": s.variant,
             "routes": s.routes, "fallbacks": list(s.fallbacks)} for s in steps]  # fmt: skip


def steps_from_wire(wire: Sequence[dict]) -> list[Step]:
    return [Step(s["name"], Problem(**s["problem"]) if s["problem"] else None, s["variant"],
                 tuple(s["routes"]) if s.get("routes") else None, tuple(s.get("fallbacks", ()))) for s in wire]  # fmt: skip


def in_layer(g: shapes.Gemm, kind: str = "") -> bool:
    """Whether GEMM g is launched in a decoder layer of `kind` ("" = any kind): not the LM head (once per token, after
    the last layer), not the router (`role: router`: the routing step launches it), and either in every layer (no
    `layer` key: attention) or in this kind's (DeepSeek-V3's dense-prefix MLP is `dense`, its experts `moe`)."""
    in_every = g.name not in NOT_IN_LAYER and g.parallel != "vocab" and g.role != "router"
    return in_every and (not kind or not g.layer or g.layer == kind)


def layer_kinds(sset: ShapeSet) -> list[str]:
    """The kinds of decoder layer a set describes, in the order they first appear (its GEMMs' `layer` keys):
    ["dense", "moe"] for DeepSeek-V3 or Llama-4 Maverick; [""] when every layer is alike."""
    return list(dict.fromkeys(g.layer for g in sset.gemms if g.layer)) or [""]


def layer_gemms(sset: ShapeSet, layout: str = sharding.DEFAULT_LAYOUT) -> list[str]:
    """The ids a layer's GEMMs have under `layout` (hf: the checkpoint's tensors), for --variants GEMM=VARIANT."""
    return [g.name for g in sharding.for_layout(sset.gemms, sharding.Parallel(layout=layout)) if in_layer(g)]


def layer_problems(
    sset: ShapeSet,
    M: int,
    dtype: str,
    tp: int,
    ep: int = 1,
    kind: str = "",
    scaling: str = dtypes.REFERENCE_SCALING,
    dp: int = 1,
    layout: str = sharding.DEFAULT_LAYOUT,
    fp8_accum: str = dtypes.REFERENCE_FP8_ACCUM,
) -> list[Problem]:
    """One layer's GEMMs at one M (one DP rank's tokens), in the set's order (see in_layer), divided as `run` divides
    them (gemmbench.models.sharding); expert GEMMs on rank 0 of `ep`.  A kind of layer without experts (a dense prefix
    layer) runs the same at any EP degree: its problems carry ep 1.  Every GEMM of the layer has the one fp8
    `scaling` (a block-fp8 layer: every variant chosen runs block) and the one `fp8_accum` contract."""
    # the whole model's experts decide whether the deployment is valid: a dense-prefix layer alone has none
    sharding.check(sharding.Parallel(tp, dp, ep, layout), sset.name, sharding.experts(sset))
    gemms = [g for g in sset.gemms if in_layer(g, kind)]
    if not gemms:
        what = f"{kind} " if kind else ""
        raise LayerError(f"{sset.source}: no GEMM of a {what}decoder layer (only {', '.join(NOT_IN_LAYER)})")
    layer = ShapeSet(sset.name, sset.description, tuple(gemms), sset.m_values, sset.source)
    ep = ep if any(g.is_moe for g in gemms) else 1
    return sharding.problems(layer, [dtype], [M], tp, ep=ep, scalings=[scaling], dp=dp, layout=layout,
                             fp8_accums=[fp8_accum])  # fmt: skip


def steps_for(problems: Sequence[Problem], choose: Callable[[Problem], str]) -> list[Step]:
    """Steps in launch order, a routing step right before the first MoE GEMM of each (E, topk): it feeds every expert
    GEMM routed over those experts (w13 and w2 of one MoE block; a set whose MoE GEMMs differ in E or top-k gets
    one routing each, named by them)."""
    steps: list[Step] = []
    for p in problems:
        routed = [s.routes for s in steps if s.routes]
        if p.is_moe and (p.E, p.topk) not in routed:
            name = ROUTING if not routed else f"{ROUTING}_E{p.E}_top{p.topk}"
            steps.append(Step(name, routes=(p.E, p.topk)))
        name = choose(p)
        later = getattr(choose, "after", None)  # a chooser of --variants globs knows the next candidates
        steps.append(Step(p.gemm, p, name, fallbacks=tuple(later(p, name)) if later else ()))
    return steps


def fall_back(steps: Sequence[Step], name: str, why: str) -> Optional[list[Step]]:
    """The steps with GEMM step `name` on its next fallback variant (the failed one and `why` recorded), or None
    where it has none left."""
    out = list(steps)
    i = next(i for i, s in enumerate(out) if s.name == name)
    s = out[i]
    if not s.fallbacks:
        return None
    out[i] = replace(s, variant=s.fallbacks[0], fallbacks=s.fallbacks[1:], failed=(*s.failed, f"{s.variant}: {why}"))
    return out


def chooser(spec: str, device, gemms: Sequence[str] = ()) -> Callable[[Problem], str]:
    """--variants: 'GEMM=VARIANT' entries pin a GEMM; globs are tried in order, the first variant (in registry
    order) that runs the GEMM here wins.  gemms: the layer's GEMM ids, against which the pins are checked."""
    entries = [x.strip() for x in spec.split(",") if x.strip()]
    if not entries:
        raise LayerError("--variants is empty")
    pinned = {k.strip(): v.strip() for k, v in (x.split("=", 1) for x in entries if "=" in x)}
    globs = [x for x in entries if "=" not in x]
    for gemm, name in pinned.items():
        if gemms and gemm not in gemms:
            raise LayerError(f"--variants {gemm}={name}: the layer has no GEMM {gemm!r} ({', '.join(gemms)})")
        if not registry.get(name).gemm:  # an unknown name fails here too, before anything runs
            raise LayerError(f"--variants {gemm}={name}: {name} is not a GEMM variant")
    candidates = [v for g in globs for v in registry.select(g) if v.gemm]

    def runs(p: Problem) -> list[str]:
        """Every glob candidate of the GEMM's kind that runs it here, in --variants order."""
        return [v.name for v in candidates if v.moe == p.is_moe and not v.unsupported_reason(p, device)]

    def after(p: Problem, chosen: str) -> list[str]:
        """The candidates a pinned GEMM has none of; else those after `chosen`."""
        if p.gemm in pinned:
            return []
        names = runs(p)
        return names[names.index(chosen) + 1 :] if chosen in names else []

    def choose(p: Problem) -> str:
        if p.gemm in pinned:
            v = registry.get(pinned[p.gemm])
            why = v.unsupported_reason(p, device)
            if why:
                raise LayerError(f"{p.gemm}={v.name}: {why}")
            return v.name
        kind = [v for v in candidates if v.moe == p.is_moe]
        for v in kind:
            if not v.unsupported_reason(p, device):
                return v.name
        why = (
            f" ({kind[0].unsupported_reason(p, device)})"
            if kind
            else f" (it has no {'MoE' if p.is_moe else 'dense'} GEMM variant)"
        )
        raise LayerError(
            f"{p.label}: no variant of --variants {spec!r} runs it here{why}; pin one with {p.gemm}=VARIANT"
        )

    choose.after = after  # type: ignore[attr-defined]  # steps_for reads the fallbacks from it
    return choose


def best_chooser(runs: pd.DataFrame, device) -> tuple[Callable[[Problem], str], dict]:
    """--best-from: per GEMM and M, the variant with the lowest median among the ok rows of RESULTS for the same
    (N, K, E, topk, dtype) that runs here, uniform routing; cold-L2 rows where the GEMM has any (a layer's weights
    are not in L2); the nearest M (in log2) where RESULTS lack this one.  Returns choose() and {gemm label: where the pick came from}."""
    ok = runs[(runs["status"] == "ok") & runs["time_us_median"].notna()]
    # the layer routes by softmax top-k: of the benchmark's routings, uniform is the one that resembles it
    ok = ok[ok["routing"].isna() | (ok["routing"] == "uniform")]
    if device.kind == "cuda" and (ok["gpu"] == device.name).any():
        ok = ok[ok["gpu"] == device.name]
    notes: dict = {}

    def choose(p: Problem) -> str:
        same = ok[
            (ok["N"] == p.N) & (ok["K"] == p.K) & (ok["E"] == p.E) & (ok["topk"] == p.topk) & (ok["dtype"] == p.dtype)
            & (ok.get("ep", 1) == p.ep)  # frames made without an ep column (store.load always has one): EP 1
            & (ok.get("dp", 1) == p.dp) & (ok.get("layout", "vllm") == p.layout)
            # a row of another fp8 scaling is another kernel's time (frames made without the column: as before scalings)
            & (ok.get("scaling", p.scaling) == p.scaling)
            & (ok.get("fp8_accum", p.fp8_accum) == p.fp8_accum)  # and of another accumulation contract
        ]  # fmt: skip
        if (same["timing_mode"] == timing_modes.DEFAULT).any():
            same = same[same["timing_mode"] == timing_modes.DEFAULT]
        runnable = [n for n in same["variant"].unique() if _runs_here(registry, n, p, device)]
        same = same[same["variant"].isin(runnable)]
        if same.empty:
            raise LayerError(
                f"--best-from: no ok row for {p.gemm} N={p.N} K={p.K} {dtypes.label(p.dtype, p.scaling, p.fp8_accum)} "
                "of a variant "
                "that runs here"
            )
        ms = sorted(set(int(m) for m in same["M"]))
        m = min(ms, key=lambda x: (abs(math.log2(x) - math.log2(p.M)), x))
        at = same[same["M"] == m].groupby("variant", observed=True)["time_us_median"].median()
        name = str(at.idxmin())
        notes[p.label] = f"{name} {at.min():.1f} µs at M={m}" + ("" if m == p.M else f" (nearest to M={p.M})")
        return name

    return choose, notes


def run_files(paths: Sequence) -> list[Path]:
    """--best-from's files: run files only (a layer or profile table says what it is instead of failing to load)."""
    from gemmbench.results.side_tables import table_kind  # the parent's side: the worker imports no pandas
    from gemmbench.results.store import StoreError, result_files

    files = [f for p in paths for f in result_files(Path(p))]
    for f in files:
        kind = table_kind(f)
        if kind != "run":
            raise StoreError(f"--best-from {f}: a {kind} table, not a run file (`gemmbench run` output)")
    return files


def _runs_here(registry, name: str, p: Problem, device) -> bool:
    try:
        v = registry.get(name)
    except registry.RegistryError:  # a plugin's variant in RESULTS, not loaded now
        return False
    return v.gemm and not v.unsupported_reason(p, device)


def plan_label(steps: Sequence[Step]) -> str:
    """What the layer ran, as one short label: the one variant, or the variants in step order joined by '+'."""
    # a GEMM step always names its variant (only routing steps have none)
    names = list(dict.fromkeys(cast(str, s.variant) for s in steps if s.is_gemm))
    return names[0] if len(names) == 1 else "+".join(names)
