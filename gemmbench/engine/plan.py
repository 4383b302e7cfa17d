"""What a sweep will run, decided before anything runs: the selection options checked, the shape set expanded over
the deployment (TP, DP, EP, layout) into problems, the plugins loaded, the variants chosen, and the cells (a
problem and the names of the variants that run it) that `run`, `profile`, `tune`, `list` and the dry run share.

Bad input is a PlanError, one line that the command prints (exit 2).  What a user should know but that does not stop
the sweep (a set's warnings, a combination left out, problems no variant runs) goes to the caller's `warn`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

Warn = Callable[[str], None]


class PlanError(ValueError):
    """A selection that cannot run: one line for the user."""


# ---------------------------------------------------------------- the options' values


def choices(option: str, text: str, allowed: Iterable[str]) -> list[str]:
    """A comma-separated option whose every value must be one of `allowed`; duplicates dropped, order kept."""
    allowed = list(allowed)
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names or any(x not in allowed for x in names):
        raise PlanError(f"{option} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return list(dict.fromkeys(names))


def dtype_names(text: str) -> list[str]:
    from gemmbench import dtypes  # not at --help

    return choices("--dtype", text, dtypes.NAMES)


def scaling_names(text: Optional[str], dtypes_asked: list[str]) -> list[str]:
    """--scaling as names in dtypes.SCALINGS (None: the default, per tensor)."""
    from gemmbench import dtypes  # not at --help

    return _fp8_only("--scaling", text, dtypes_asked, dtypes.NAMES_SCALING, dtypes.REFERENCE_SCALING)


def fp8_accum_names(text: Optional[str], dtypes_asked: list[str]) -> list[str]:
    """--fp8-accum as names in dtypes.FP8_ACCUMS (None: the default, precise)."""
    from gemmbench import dtypes  # not at --help

    return _fp8_only("--fp8-accum", text, dtypes_asked, dtypes.FP8_ACCUMS, dtypes.REFERENCE_FP8_ACCUM)


def _fp8_only(option: str, text: Optional[str], dtypes_asked: list[str], names, default: str) -> list[str]:
    """An fp8-only option's names (None: its default).  Given where no fp8 dtype is asked, it is refused: nothing it
    names could run."""
    from gemmbench import dtypes  # not at --help

    if text is None:
        return [default]
    chosen = choices(option, text, names)
    if not any(dtypes.get(d).scaled for d in dtypes_asked):
        raise PlanError(f"{option} {text!r} applies to fp8 only, and --dtype {','.join(dtypes_asked)} asks for none "
                        "(add fp8 to --dtype)")  # fmt: skip
    return chosen


def degrees(option: str, text: str, example: str) -> list[int]:
    """--tp, --dp or --ep: positive integers, comma-separated; duplicates dropped, order kept."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise PlanError(f"{option} {text!r}: give positive integers, comma-separated (e.g. {example})")
    return list(dict.fromkeys(values))


def tp_list(text: str) -> list[int]:
    return degrees("--tp", text, "8 or 1,2,4,8")


@dataclass(frozen=True)
class Deployment:
    """The parallelism options of a sweep as lists (--tp, --dp, --ep) and the one --layout."""

    tps: tuple[int, ...] = (1,)
    dps: tuple[int, ...] = (1,)
    eps: tuple[int, ...] = (1,)
    layout: str = "vllm"


def deployment(tp: str, dp: str, ep: str, layout: str) -> Deployment:
    return Deployment(tuple(tp_list(tp)), tuple(degrees("--dp", dp, "8 or 1,8")), tuple(degrees("--ep", ep, "8 or 1,8")),
                      str(layout))  # fmt: skip


# ---------------------------------------------------------------- problems


def combinations(sset, dep: Deployment, warn: Warn) -> list[tuple[int, int, int]]:
    """The (TP, DP, EP) of the lists that the layout's engine can run on the set; the others named in one warning.
    ShapeError with the first refusal when none is left."""
    combos, refused = _combinations(sset, dep)
    _left_out(refused, warn)
    return combos


def _left_out(refused: list[str], warn: Warn) -> None:
    if refused:
        warn(f"left out {len(refused)} of the --tp/--dp/--ep combinations: {'; '.join(refused)}")


def _combinations(sset, dep: Deployment) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(the combinations the layout's engine accepts, a line for each it refuses); ShapeError where it accepts none."""
    from gemmbench.models.sharding import Parallel, check, experts  # not at --help (yaml)
    from gemmbench.shapes import ShapeError

    combos, refused = [], []
    for t in dep.tps:
        for d in dep.dps:
            for e in dep.eps:
                try:
                    check(Parallel(t, d, e, dep.layout), sset.name, experts(sset))
                    combos.append((t, d, e))
                except ShapeError as exc:
                    refused.append(str(exc))
    if not combos:
        raise ShapeError(refused[0])
    return combos, refused


def problems(sset, dtypes_asked: Sequence[str], m_values, dep: Deployment, routings: Sequence[str], warn: Warn,
             scalings: Sequence[str] = ("tensor",), fp8_accums: Sequence[str] = ("precise",)) -> list:  # fmt: skip
    """Every (TP, DP, EP, routing) expansion of the set, each GEMM in every dtype and (fp8) scaling and accumulation
    contract; a GEMM that neither EP nor the routing changes once per (TP, DP).  ShapeError (one line) where no
    combination is left, and where a GEMM does not divide."""
    from gemmbench.models.sharding import problems as shard  # not at --help (yaml)
    from gemmbench.shapes import ShapeError

    out, seen = [], set()
    combos, refused = _combinations(sset, dep)
    for t, d, e in combos:
        try:  # a GEMM that does not divide at this TP refuses this combination only
            found = [p for r in routings
                     for p in shard(sset, dtypes_asked, m_values, t, r, e, scalings, d, dep.layout, fp8_accums)]  # fmt: skip
        except ShapeError as exc:
            refused.append(f"TP {t} DP {d} EP {e}: {exc}")
            continue
        for p in found:
            if p not in seen:  # a dense GEMM is the same problem at every EP and routing
                seen.add(p)
                out.append(p)
    if not out and refused:  # every combination the layout accepts has a GEMM that does not divide
        raise ShapeError(refused[-1].split(": ", 1)[1])
    _left_out(refused, warn)
    return out


def set_warnings(sset, warn: Warn) -> None:
    """A shape set's warnings (gemmbench.shapes.ShapeSet.warnings), one each."""
    for line in sset.warnings:
        warn(f"warning: {line}")


def load_plugins(plugins: Optional[Iterable[Path]]) -> None:
    from gemmbench import registry  # not at --help (yaml, importlib.metadata)

    try:
        for p in plugins or []:
            registry.load_plugin(p)
    except registry.RegistryError as exc:
        raise PlanError(str(exc)) from None


# ---------------------------------------------------------------- the selection


@dataclass(frozen=True)
class Selection:
    """A sweep's problems and chosen variants, with the option values they came from."""

    sset: object
    problems: list
    variants: list  # registry.Variant, in the registry's order
    dtypes: list[str]
    scalings: list[str]
    fp8_accums: list[str]


def select(shapes: str, variants: Optional[str], dtype: str, m: Optional[str], dep: Deployment,
           plugins: Optional[Iterable[Path]], warn: Warn, scaling: Optional[str] = None,
           fp8_accum: Optional[str] = None, routings: Sequence[str] = ("uniform",)) -> Selection:  # fmt: skip
    """The problems of the set over the deployment, and the variants the globs choose (plugins loaded first)."""
    from gemmbench import registry
    from gemmbench import shapes as shapes_mod
    from gemmbench.models import shape_sets  # not at --help; shape_sets imports yaml

    names = dtype_names(dtype)
    scalings = scaling_names(scaling, names)
    accums = fp8_accum_names(fp8_accum, names)
    if variants is not None and not variants.strip(" ,"):
        raise PlanError("--variants is empty (give globs such as 'triton_*,cublas_fp8')")
    try:
        sset = shape_sets.load(shapes)
        set_warnings(sset, warn)
        m_values = shapes_mod.parse_m_list(m) if m is not None else None
        found = problems(sset, names, m_values, dep, routings, warn, scalings, accums)
        load_plugins(plugins)
        chosen = registry.select(variants)
    except (shapes_mod.ShapeError, registry.RegistryError) as exc:
        raise PlanError(str(exc)) from None
    return Selection(sset, found, chosen, names, scalings, accums)


def runnable(sel: Selection) -> None:
    """Refuses a selection whose fp8 problems no chosen variant could run in any asked scaling or contract (every
    fp8 cell would be skipped); where some have a variant, the others are skipped rows that say why."""
    runs_a_scaling(sel.variants, sel.scalings, sel.dtypes)
    runs_an_fp8_accum(sel.variants, sel.fp8_accums, sel.dtypes, sel.scalings)


def cells(shapes: str, variants: Optional[str], dtype: str, m: Optional[str], routing: str, seed: int,
          plugins: Optional[Iterable[Path]], dep: Deployment, warn: Warn, scaling: Optional[str] = None,
          fp8_accum: Optional[str] = None) -> tuple:  # fmt: skip
    """The selection `run`, `profile`, `list` and the dry run share -> (shape set, [(problem, [variant names])]).
    A cell is a problem and a variant made for its kind (dense/MoE) and dtype; a variant that lacks the problem's
    scaling or fp8 accumulation is a cell too (its skipped row names those it has), unless no variant has it."""
    from gemmbench.measure.inputs import ROUTINGS  # not at --help (torch)

    routings = choices("--routing", routing, ROUTINGS)
    if not 0 <= seed < 2**31:
        raise PlanError(f"--seed must be in 0 .. 2**31 - 1, got {seed}")
    sel = select(shapes, variants, dtype, m, dep, plugins, warn, scaling, fp8_accum, routings)
    runnable(sel)
    found = [(p, [v.name for v in sel.variants if p.dtype in v.dtypes and v.moe == p.is_moe]) for p in sel.problems]
    uncovered = sorted({f"{p.gemm} {p.dtype}" for p, names in found if not names})
    found = [(p, names) for p, names in found if names]
    if not found:
        raise PlanError(f"no selected variant runs {sel.sset.name} in {dtype} (see `gemmbench list variants`)")  # type: ignore[attr-defined]
    if uncovered:  # nothing may disappear silently: these problems have no cell at all
        warn(f"warning: no selected variant runs {', '.join(uncovered)}; those problems are left out")
    return sel.sset, found


def tunable(shapes: str, variants: Optional[str], dtype: str, m: Optional[str], dep: Deployment,
            plugins: Optional[Iterable[Path]], warn: Warn, scaling: Optional[str] = None,
            fp8_accum: Optional[str] = None) -> tuple[list, list]:  # fmt: skip
    """(problems, tunable variants) of `tune`'s options.  Configs are stored per shape, not per routing: tuned on
    uniform routing."""
    sel = select(shapes, variants, dtype, m, dep, plugins, warn, scaling, fp8_accum)
    chosen = [v for v in sel.variants if v.tunable is not None]
    if not chosen:
        raise PlanError(f"--variants {variants!r} selects no tunable variant (the Triton ones are)")
    runnable(Selection(sel.sset, sel.problems, chosen, sel.dtypes, sel.scalings, sel.fp8_accums))
    return sel.problems, chosen


def runs_a_scaling(chosen: list, scalings: list[str], dtypes_asked: list[str]) -> None:
    """Refused where no chosen fp8 variant runs any fp8 scaling asked: every fp8 cell would be skipped.  Where some
    scaling has a variant, the sweep runs, and the cells of a variant without theirs are skipped rows that name the
    scalings it has."""
    from gemmbench import dtypes  # not at --help

    fp8 = [v for v in chosen if any(dtypes.get(d).scaled for d in v.dtypes)]
    if not fp8 or not any(dtypes.get(d).scaled for d in dtypes_asked):
        return
    if not any(name in v.scalings for v in fp8 for name in scalings):
        have = sorted({s for v in fp8 for s in v.scalings})
        raise PlanError(f"--scaling {','.join(scalings)}: no selected fp8 variant runs it (they declare "
                        f"{', '.join(have)}; see `gemmbench list variants`)")  # fmt: skip


def runs_an_fp8_accum(chosen: list, accums: list[str], dtypes_asked: list[str], scalings=("tensor",)) -> None:
    """runs_a_scaling's rule for --fp8-accum; also refused where only fp8 is asked, every scaling a block one and
    every contract fast (dtypes.NO_FAST_FOR_BLOCKS)."""
    from gemmbench import dtypes  # not at --help

    fp8 = [v for v in chosen if any(dtypes.get(d).scaled for d in v.dtypes)]
    if not fp8 or not any(dtypes.get(d).scaled for d in dtypes_asked):
        return
    only_fp8 = all(dtypes.get(d).scaled for d in dtypes_asked)  # with a 16-bit dtype asked, those cells still run
    if only_fp8 and all(dtypes.fp8_accum_excluded(s, a) for s in scalings for a in accums):
        raise PlanError(f"--fp8-accum {','.join(accums)} --scaling {','.join(scalings)}: {dtypes.NO_FAST_FOR_BLOCKS} "
                        "(add precise to --fp8-accum)")  # fmt: skip
    if not any(name in v.fp8_accums for v in fp8 for name in accums):
        have = sorted({a for v in fp8 for a in v.fp8_accums})
        raise PlanError(f"--fp8-accum {','.join(accums)}: no selected fp8 variant runs it (they declare "
                        f"{', '.join(have)}; see `gemmbench list variants`)")  # fmt: skip


# ---------------------------------------------------------------- the CPU path

# Measured on a 2-core CPU machine: llama70b-attn took 8 min 51 s on the CPU path (torch's bf16/fp8 CPU matmul,
# 0.4-0.9 s per call at M=64, >= 10 samples a cell), so Llama-sized sets are refused there.  (Triton variants have
# their own limit, tuning.INTERPRETER_MAX_MACS, for sets in between.)
CPU_MAX_MACS = 1 << 26


def cpu_too_large(found: list, set_option: str = "--shapes") -> Optional[str]:
    """The reason a set is refused on the CPU path, or None.  Advises a smaller --m only where one would fit, and
    the smoke set under the option the command has (--shapes, or layer's --model)."""
    from gemmbench.results.metrics import flops_bound  # heavy (numpy)

    worst = max(found, key=flops_bound)
    macs = flops_bound(worst) // 2
    if macs <= CPU_MAX_MACS:
        return None
    smaller = flops_bound(worst.with_(M=1)) // 2 <= CPU_MAX_MACS
    return (f"{worst.shape_set} is too large for the CPU path ({worst.gemm} M={worst.M}: {macs:.2g} multiply-adds, "
            f"limit {CPU_MAX_MACS:.2g}): run it on a GPU{', choose smaller --m' if smaller else ''}, or try "
            f"{set_option} smoke")  # fmt: skip
