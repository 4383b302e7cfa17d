"""The variant registry: what can run a problem, and how to build its launch closure.

A variant is a name, a family, the dtypes it runs, and two functions:
  supports(problem, device) -> None if it can run the problem, else the reason it cannot;
  make(problem, inputs)    -> Launch: all setup (allocation, layout, tuning) happens here,
                              the returned closure only launches (it is what gets timed).
Built-in variants live in the package gemmbench.kernels (the repository's gemmbench/kernels/ folder);
user plugins are Python files (``--plugin``) or packages exposing the entry-point group
``gemmbench.variants`` that call :func:`register`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import importlib.metadata
import importlib.util
import signal
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from gemmbench import dtypes
from gemmbench.builtin_baselines import BASELINES
from gemmbench.shapes import Problem

ENTRY_POINT_GROUP = "gemmbench.variants"
# Seconds a plugin file's import may take: time to build or compile at import, while a hang (a lock, a GPU that
# never answers) becomes that plugin's error instead of a command that never returns.
PLUGIN_IMPORT_S = 120


class Launch:
    """What make() returns: a closure that launches the kernel(s) and returns the output tensor.

    fn: what is timed.  graph_safe: False if fn syncs with the host (cannot be captured in a CUDA graph).
    out: the preallocated output fn writes, if any: filled with NaN before the check.
    params: the typed config it was built with (a tuning.KernelConfig: the Triton variants), else None;
    provenance: where params came from (a provenance.Provenance), kept beside it.  A variant without a typed
    config (cuBLAS has none; a plugin's) may give `config`, a plain dict, instead.
    resources: a function giving what the compiler reported for the kernel once it ran ({"registers": n,
    "spills": bytes}) or None; kept in the row's config under "ptxas", which no comparison of configs reads.
    """

    def __init__(
        self,
        fn: Callable[[], Any],
        config: Optional[dict] = None,
        graph_safe: bool = True,
        out: Any = None,
        *,
        params: Any = None,
        provenance: Any = None,
        resources: Optional[Callable[[], Optional[dict]]] = None,
    ):
        if config and params is not None:
            raise TypeError("Launch takes a typed config (params) or a plain dict (config), not both")
        self.fn, self.graph_safe, self.out = fn, graph_safe, out
        self.params, self.provenance, self.resources = params, provenance, resources
        self._plain = dict(config or {})

    @property
    def config(self) -> dict:
        """The chosen config as the row stores it (JSON): its keys, then where it came from (source, file,
        bucket).  A fresh dict: to change a launch's config, change params or provenance."""
        config = self.params.to_dict() if self.params is not None else dict(self._plain)
        if self.provenance is not None:
            config.update(self.provenance.to_dict())
        reported = self.resources() if self.resources is not None else None
        if reported:
            config["ptxas"] = reported
        return config

    def __repr__(self) -> str:
        return f"Launch(fn={self.fn!r}, config={self.config!r}, graph_safe={self.graph_safe!r})"


_PRECISE = dtypes.REFERENCE_FP8_ACCUM  # Variant's default: its field `dtypes` hides the module in the class body


@dataclass(frozen=True)
class Variant:
    name: str
    family: str  # "cublas" | "triton_dp" | "moe_ref" | a plugin's own family
    dtypes: tuple[str, ...]
    description: str
    make: Callable[[Problem, Any], Launch]
    supports: Optional[Callable[[Problem, Any], Optional[str]]] = None
    moe: bool = False  # True: runs MoE problems (E > 1); False: dense problems only
    # A variant once ran one fp8 scaling, named here; kept so that plugins written for that still load: it means
    # scalings=(fp8_scaling,).  New code gives `scalings`.
    fp8_scaling: Optional[str] = None
    source: str = "builtin"  # "builtin" or the plugin it came from
    tunable: Any = None  # a tuning.Tunable: its configs are searched by `gemmbench tune` and stored
    # check(problem, inputs, output) -> check.CheckResult, for a variant whose output is not the GEMM's
    # (moe_align): replaces the comparison with the fp32 reference
    check: Optional[Callable[[Problem, Any, Any], Any]] = None
    gemm: bool = True  # False: not a GEMM (moe_align); its rows carry no FLOPs, bytes or roofline
    # The dtypes whose rows of its kind (dense or MoE) and, for fp8, of each of its scalings measure their speedup
    # against it (baseline_for; one variant per dtype, kind and scaling).  It may name a dtype it does not run:
    # torch_moe_loop is the MoE reference of fp8 too, whose rows then show no speedup.
    baseline: tuple[str, ...] = ()
    # the fp8 scalings it runs (names in dtypes.SCALINGS; Problem.scaling): () means ("tensor",), or (fp8_scaling,)
    scalings: tuple[str, ...] = ()
    # False: runs only when --variants names it (a glob that matches it).  A default run has each family's one
    # variant worth comparing (README, "Which variants run"), the baselines, and every plugin's
    by_default: bool = True
    # the fp8 accumulation contracts it runs (names in dtypes.FP8_ACCUMS; Problem.fp8_accum)
    fp8_accums: tuple[str, ...] = (_PRECISE,)

    def __post_init__(self) -> None:
        scalings = tuple(self.scalings) or ((self.fp8_scaling,) if self.fp8_scaling else (dtypes.REFERENCE_SCALING,))
        if self.fp8_scaling and self.fp8_scaling not in scalings:
            raise ValueError(f"variant {self.name!r}: fp8_scaling {self.fp8_scaling!r} is not one of its scalings "
                             f"{scalings} (give scalings only)")  # fmt: skip
        for name in scalings:
            dtypes.scaling(name)  # ValueError naming the known ones
        object.__setattr__(self, "scalings", scalings)
        accums = tuple(self.fp8_accums) or (dtypes.REFERENCE_FP8_ACCUM,)
        unknown = [a for a in accums if a not in dtypes.FP8_ACCUMS]
        if unknown:
            raise ValueError(f"variant {self.name!r}: unknown fp8 accumulation {unknown[0]!r} (expected one of "
                             f"{', '.join(dtypes.FP8_ACCUMS)})")  # fmt: skip
        object.__setattr__(self, "fp8_accums", accums)
        if len(scalings) == 1:  # readers of the old field (plugins) still find a one-scaling variant's scaling
            object.__setattr__(self, "fp8_scaling", scalings[0])

    def unsupported_reason(self, problem: Problem, device: Any) -> Optional[str]:
        """None if this variant can run the problem here, else a one-line reason."""
        reason = self.declared_reason(problem)
        if reason:
            return reason
        return self.supports(problem, device) if self.supports else None

    def declared_reason(self, problem: Problem) -> Optional[str]:
        """Why the variant's declarations (dtypes, scalings, dense or MoE) exclude the problem, else None: what can
        be said without the device (`supports` may say more there)."""
        dt = dtypes.get(problem.dtype)
        if not dt.scaled and problem.scaling != dtypes.UNSCALED:
            return f"--scaling {problem.scaling} applies to fp8 only: {problem.dtype} carries no scales"
        if not dt.scaled and problem.fp8_accum != dtypes.UNSCALED:
            return f"--fp8-accum {problem.fp8_accum} applies to fp8 only: {problem.dtype} accumulates in fp32"
        if dt.scaled and dtypes.fp8_accum_excluded(problem.scaling, problem.fp8_accum):
            return f"{dtypes.fp8_accum_excluded(problem.scaling, problem.fp8_accum)} (--scaling {problem.scaling})"
        if dt.scaled and problem.scaling not in self.scalings:
            return f"{self.name}{_NO_SCALING}{problem.scaling} support: runs {', '.join(self.scalings)}"
        if dt.scaled and problem.fp8_accum not in self.fp8_accums:
            return (f"{self.name}{_NO_SCALING}{problem.fp8_accum}{_ACCUM} support: runs "
                    f"{', '.join(self.fp8_accums)}")  # fmt: skip
        if problem.dtype not in self.dtypes:
            return f"{self.name} has no {problem.dtype} path (dtypes: {', '.join(self.dtypes)})"
        if problem.is_moe != self.moe:
            kind = "MoE" if problem.is_moe else "dense"
            return f"{self.name} does not run {kind} GEMMs"
        return None


_NO_SCALING = " declares no "  # the words of a row skipped for its fp8 scaling or accumulation (scaling_excluded)
_ACCUM = " accumulation"  # after the contract's name: "... declares no fast accumulation support: runs precise"


def scaling_excluded(reason: object) -> bool:
    """Whether a skipped row's reason is that its variant does not run the problem's fp8 scaling or accumulation
    contract (declared_reason): a row the tables leave out, counted, since another --scaling or --fp8-accum is what
    would run it."""
    if not isinstance(reason, str) or _NO_SCALING not in reason:
        return False
    words = reason.split(_NO_SCALING)[1].split()
    return words[1:2] == ["support:"] or words[1:3] == [_ACCUM.strip(), "support:"]


class RegistryError(ValueError):
    pass


_VARIANTS: dict[str, Variant] = {}
_builtins_loaded = False
_loading: list[Path] = []  # the plugin file being imported: what its variants' `source` says unless they name one


def register(variant: Variant) -> Variant:
    """Add a variant; a second registration under the same name, or a second baseline of one dtype, kind and
    fp8 scaling, is an error."""
    if _loading and variant.source == "builtin":  # a plugin that did not name itself: its file does
        variant = replace(variant, source=str(_loading[-1]))
    if variant.name in _VARIANTS:
        old = _VARIANTS[variant.name]
        raise RegistryError(f"variant {variant.name!r} from {variant.source} is already registered by {old.source}"
                            " (give it another name)")  # fmt: skip
    try:
        keys = _baseline_keys(variant)
    except ValueError as exc:
        raise RegistryError(f"variant {variant.name!r} from {variant.source}: baseline: {exc}") from None
    for old in _VARIANTS.values():
        for dtype, moe, scaling in keys & _baseline_keys(old):
            what = f"{dtype}{f' {scaling}-scaled' if scaling else ''} {'MoE' if moe else 'dense'} rows"
            raise RegistryError(
                f"variant {variant.name!r} from {variant.source}: {old.name} ({old.source}) is already the baseline "
                f"of {what}"
            )
    _VARIANTS[variant.name] = variant
    return variant


def unregister(name: str) -> None:
    """Remove a variant registered at run time (engine_import's imported variants, replaced when a command imports
    other files); a name that is not registered is left alone."""
    _VARIANTS.pop(name, None)


def _baseline_key(dtype: str, moe: bool, scaling: str) -> tuple[str, bool, Optional[str]]:
    """Rows of one dtype and kind share a baseline; those of a scaled dtype (fp8), one per scaling."""
    return dtype, moe, (scaling if dtypes.get(dtype).scaled else None)


def _baseline_keys(variant: Variant) -> set[tuple[str, bool, Optional[str]]]:
    return {_baseline_key(d, variant.moe, s) for d in variant.baseline for s in variant.scalings}


def baseline_for(dtype: str, moe: bool, scaling: str = dtypes.REFERENCE_SCALING) -> Optional[str]:
    """The name of the variant that rows of this dtype, kind and scaling measure their speedup against (its
    Variant.baseline and scalings); a scaling that no variant declares falls back to dtypes.REFERENCE_SCALING's
    (torch_moe_loop for MoE fp8 of any scaling: it runs no fp8, so those rows show no speedup).  None where no
    variant declares either.  Only the baseline's row of the same cell counts, and the scaling is part of a cell:
    a speedup never compares two scalings.  Where the kernels cannot be imported (no torch or triton: an install that
    only reads results), the built-in baselines' table answers."""
    try:
        declared = [(v.name, _baseline_keys(v)) for v in all_variants()]
    except ImportError:
        declared = [(name, {_baseline_key(d, b.moe, s) for d in b.dtypes for s in b.scalings})
                    for name, b in BASELINES.items()]  # fmt: skip
    for s in dict.fromkeys((scaling, dtypes.REFERENCE_SCALING)):
        key = _baseline_key(dtype, moe, s)
        for name, keys in declared:
            if key in keys:
                return name
    return None


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    importlib.import_module("gemmbench.kernels")  # ImportError without torch or triton: asked again next time
    _builtins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a broken third-party plugin must not hide the built-ins
            raise RegistryError(f"plugin entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc


def load_plugin(path: str | Path) -> None:
    """Import a user's Python file, or every .py file of a folder (in name order); each registers its variants by
    calling register()."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.py"))
        if not files:
            raise RegistryError(f"plugin folder {path} holds no .py file")
        for f in files:
            load_plugin(f)
        return
    if not path.is_file():
        raise RegistryError(f"plugin file not found: {path}")
    _load_builtins()
    module_name = f"gemmbench_plugin_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
    if module_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # not a file Python can import (no .py suffix, say)
        raise RegistryError(f"plugin {path} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    before = set(_VARIANTS)
    _loading.append(path)
    try:
        with _time_limit(PLUGIN_IMPORT_S):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        # a failed plugin leaves nothing behind: a retry reports the same error, not "already registered"
        del sys.modules[module_name]
        for name in set(_VARIANTS) - before:
            del _VARIANTS[name]
        if isinstance(exc, RegistryError):
            raise
        if isinstance(exc, SystemExit):  # a plugin registers variants; ending gemmbench is not its call
            raise RegistryError(f"plugin {path} called sys.exit({exc.code!r}) while importing") from None
        raise RegistryError(f"plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    finally:
        _loading.pop()


class _ImportTimeout(Exception):
    def __str__(self) -> str:
        return f"still importing after {PLUGIN_IMPORT_S} s (a plugin's import may take {PLUGIN_IMPORT_S} s)"


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise _ImportTimeout in this thread after `seconds` (SIGALRM: the main thread of a POSIX process only;
    elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum, frame):
        raise _ImportTimeout()

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def all_variants() -> list[Variant]:
    _load_builtins()
    return list(_VARIANTS.values())


def names() -> list[str]:
    """The registered variants' names in registration order; the built-in baselines' alone where the kernels cannot
    be imported (no torch or triton: an install that only reads results)."""
    try:
        return [v.name for v in all_variants()]
    except ImportError:
        return list(BASELINES)


def get(name: str) -> Variant:
    _load_builtins()
    try:
        return _VARIANTS[name]
    except KeyError:
        raise RegistryError(f"unknown variant {name!r} (see `gemmbench list variants`)") from None


def select(patterns: str | None) -> list[Variant]:
    """Variants matching comma-separated globs, in registration order; a glob that matches nothing is an error.
    None: the default variants (Variant.by_default)."""
    variants = all_variants()
    if not patterns:  # the default: every variant but those that run only when named
        return [v for v in variants if v.by_default]
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = []
    for g in globs:
        hits = [v for v in variants if fnmatch.fnmatchcase(v.name, g)]
        if not hits:
            raise RegistryError(f"--variants {g!r} matches no variant (see `gemmbench list variants`)")
        chosen += [v for v in hits if v not in chosen]
    return [v for v in variants if v in chosen]
