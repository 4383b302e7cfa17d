"""Configs of the Triton variants: stored per GPU as JSON data, searched by `gemmbench tune`.

A tunable variant (Tunable) has a search space and a build(problem, inputs, config) -> Launch. Its make() takes, in
order: the config already chosen for this problem in this process; a stored one in the lookup's order
(config_sources.py: the GPU's own, else a nearer GPU's of the same capability, borrowed, else one an earlier run
searched and stored), from a bucket in reach of M's (where M lies between two of the GPU's own buckets, the faster of
the two at this M, timed here when they differ: neighbour_buckets; and where M is no stored bucket, the kernel's configs
fitted to this M, where it offers any, timed beside them: Tunable.fitted); otherwise it times a few candidates right
there (search) and stores the winner in the user's folder as "searched", so that the next run runs the same config.
`gemmbench run --retune` skips the stored files and stores nothing; `--no-borrow` and `--no-store` turn those steps off.
Where the config came from is a Provenance, kept beside the config (Launch.provenance); the row's `config` says it:
"source" is "stored" (with "file" and "bucket"), "stored-neighbour" (the same, and "neighbours_us"; and "fitted_us"
where fitted configs were timed: the fastest one's), "fitted" (a fitted config, faster than the stored ones timed beside
it: "neighbours_us" and "fitted_us", no file), "borrowed" (the same, and "borrowed": the lender's folder), "searched"
(with "file" and "bucket" once stored), "only" (nothing to choose: one candidate, or Triton's CPU interpreter), or an
inference engine's name ("vllm", "sglang": a config file of the engine's, imported by `gemmbench run --import-config`;
with "file" and the engine's "key": engine_import.py).

`gemmbench tune` searches coarse, then fine (tune_search): the quick candidates and an even sample of the full space,
then the configs one field away from the best, round after round, each round timed whole, while a time budget counted
from the coarse pass's end lasts; the finalists are re-timed side by side, and among those within each other's noise
the first in the space's order wins, so that the same seed gives the same winner.

The stored files (where they live, their names, M buckets, the overlay of the user's over the shipped) are
config_files.py's; Provenance is provenance.py's.

A config is a frozen dataclass of its kernel family (gemmbench/kernels/*.py), a KernelConfig: one field per key of
its JSON (stored files, the row's `config`), so that the JSON stays what it was when configs were dicts.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from gemmbench import locations, registry
from gemmbench.configs import config_files, config_sources
from gemmbench.configs.config_files import SEARCHED, TuningError, neighbour_buckets, save
from gemmbench.configs.kernel_config import (
    KernelConfig,  # re-exported: gemmbench/kernels/*.py subclass tuning.KernelConfig
)
from gemmbench.configs.provenance import FITTED, Provenance
from gemmbench.measure import device
from gemmbench.measure.check import check_cell
from gemmbench.measure.timing import Timer, quick_median_us
from gemmbench.results.metrics import flops_bound
from gemmbench.shapes import Problem

CONFIG_DIR_ENV = locations.CONFIG_DIR_ENV  # the user's configs folder: tune writes here; read over the shipped
RETUNE_ENV = config_sources.RETUNE_ENV  # set by `gemmbench run --retune` for its workers
# Triton's interpreter runs a 33x80x48 GEMM in well under a second; a Llama decode GEMM would take minutes.
INTERPRETER_MAX_MACS = 1 << 24

_chosen: dict[tuple, tuple[KernelConfig, Provenance]] = {}


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def needs_triton_device(problem: Problem, device) -> Optional[str]:
    """supports() for Triton variants: a CUDA GPU, or the CPU interpreter for the dtypes it runs right."""
    if device.kind == "cuda":
        if problem.dtype == "fp8" and device.capability < (8, 9):
            return f"fp8 tl.dot needs compute capability 8.9+, {device.name} has {device.capability}"
        return None
    if not interpreter_on():
        return "Triton needs a CUDA GPU here (or TRITON_INTERPRET=1 for its CPU interpreter)"
    if problem.dtype == "bf16":
        # Measured: the interpreter returns garbage for bf16 tl.dot and raises nothing.
        return "Triton's CPU interpreter computes bf16 tl.dot wrongly (no error raised); bf16 runs on the GPU only"
    macs = flops_bound(problem) // 2
    if macs > INTERPRETER_MAX_MACS:
        return f"too large for Triton's CPU interpreter ({macs:.2g} multiply-adds, limit {INTERPRETER_MAX_MACS:.2g}): run it on a GPU"
    return None


def sm_count() -> int:
    return device.detect().sm_count or 132


def persistent_programs(tiles: int, on_gpu: bool) -> int:
    """A persistent kernel's grid: one program per SM, at most one per tile; 4 in Triton's CPU interpreter, which
    runs programs one after another (a few still walk several tiles each)."""
    return max(1, min(tiles, sm_count() if on_gpu else 4))


def has_tma() -> bool:
    """Hopper's bulk tensor copy engine (tensor descriptors, gemmbench/kernels/tile_loop.py): compute capability 9+."""
    return device.detect().capability >= (9, 0)


# ---------------------------------------------------------------- tunable variants


@dataclass(frozen=True)
class Tunable:
    """A Triton variant with a config space.  space(problem, on_gpu, full): every candidate that
    `gemmbench tune` tries (full) or the few a run tries when nothing is stored (not full)."""

    name: str
    space: Callable[[Problem, bool, bool], list[KernelConfig]]
    build: Callable[[Problem, Any, KernelConfig], registry.Launch]
    config_type: type[KernelConfig]  # what the variant's stored configs load into
    # whether a config fixes how fp8 sums are promoted (a schedule of its own): then a fast-accumulation problem runs
    # only configs tuned under fast, never the precise contract's shared ones (config_files.overlay_buckets)
    promotion_in_config: bool = False
    # the configs shaped for the problem's own M (none, one or several): where M is none of the stored buckets (each
    # tuned at its own M), a run times them beside the configs of the bucket or two that would serve (_from_stored)
    fitted: Optional[Callable[[Problem], list[KernelConfig]]] = None
    # the config a launch of a given one runs at a problem (or None: as given), where build() adapts a stored config to
    # M: two configs that launch alike are timed once
    launched: Optional[Callable[[Problem, KernelConfig], KernelConfig]] = None

    def make(self, problem: Problem, inputs) -> registry.Launch:
        config, provenance = choose(self, problem, inputs)
        launch = self.build(problem, inputs, config)
        launch.provenance = provenance
        return launch


def _gpu_name(inputs) -> Optional[str]:
    if not inputs.a.is_cuda or interpreter_on():
        return None
    return device.detect().name


def _choice_key(t: Tunable, problem: Problem) -> tuple:
    """What one choice of config in this process serves: a variant at one problem shape, dtype, scaling and fp8
    accumulation contract (a search space may differ by contract: a tile that fits fast can spill with promotion)."""
    p = problem
    return (t.name, p.M, p.N, p.K, p.E, p.topk, p.ep, p.dtype, p.scaling, p.fp8_accum)


def choose(t: Tunable, problem: Problem, inputs) -> tuple[KernelConfig, Provenance]:
    key = _choice_key(t, problem)
    if key in _chosen:
        return _chosen[key]
    gpu = _gpu_name(inputs)
    policy = config_sources.Policy.from_env()
    found = None
    if gpu:
        part = config_sources.part_of(gpu, device.detect())
        match = config_sources.lookup(t.name, problem, gpu, policy, part)
        if match is not None and match.kind == "searched" and not _same_candidates(t, problem, match):
            match = None  # an earlier run chose among other candidates (another build's): choose again
        found = _from_stored(t, problem, inputs, match) if match else None
    if found is None:
        candidates = t.space(problem, gpu is not None, False)
        if len(candidates) == 1 or gpu is None:
            found = candidates[0], Provenance("only")
        else:
            found = _search_and_store(t, problem, inputs, candidates, gpu, policy.store)
    _chosen[key] = found
    return found


def candidates_key(candidates: list[KernelConfig]) -> str:
    """Which candidates a run's search chose among, in a few characters (stored with its winner)."""
    text = json.dumps([c.to_dict() for c in candidates], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _same_candidates(t: Tunable, problem: Problem, match: config_sources.Found) -> bool:
    """Whether an earlier run's stored search chose among the candidates this build's run would: a kernel's new
    quick candidates (or a change of their fields) are searched, not hidden behind an older build's winner."""
    entry = match.buckets[match.nearest(problem.M, problem.is_moe)]
    return entry.get("among") == candidates_key(t.space(problem, True, False))


def _from_stored(t: Tunable, problem: Problem, inputs, match: config_sources.Found) -> tuple[KernelConfig, Provenance]:
    """The config of a stored source for this M: its own bucket, or the nearest in reach; between two of the GPU's
    own buckets, the faster of the two at this M.  Where M is none of the GPU's own buckets (each tuned at its own
    M), the kernel's configs fitted to M, if it offers any, are timed beside the bucket or two that would serve."""
    M, moe = problem.M, problem.is_moe
    load = lambda b: config_files.load(t.name, problem, match.buckets, match.files, str(b), t.config_type)  # noqa: E731
    b = match.nearest(M, moe)
    if match.kind == "own":
        buckets = sorted(int(stored) for stored in match.buckets)
        pair = neighbour_buckets(buckets, M, moe)
        off_bucket = max(M, config_files.m_bucket(1, moe)) not in buckets
        fitted = list(t.fitted(problem)) if t.fitted and off_bucket else []
        if pair is not None or fitted:
            at = [(load(n), Provenance("stored", match.files[str(n)], n)) for n in (pair or (int(b),))]
            return _fastest_at_m(t, problem, inputs, at, fitted)
    if match.kind == "borrowed":
        where = Provenance("borrowed", match.files[b], int(b), borrowed=config_files.gpu_dirname(match.gpu))
    else:
        where = Provenance("stored" if match.kind == "own" else SEARCHED, match.files[b], int(b))
    return load(b), where


def _fastest_at_m(
    t: Tunable, problem: Problem, inputs, neighbours: list, fitted: Sequence[KernelConfig] = ()
) -> tuple[KernelConfig, Provenance]:
    """The fastest at this M of the stored (config, provenance) of the buckets that would serve it (two neighbours,
    lower first, or the nearest) and of the configs fitted to M (tiles for this M's waves, which no bucket's tune saw).
    Timed by search()'s quick pass without a reference, as a run's choice among candidates is (the run's check of
    the cell then checks the winner), and only configs that launch differently (Tunable.launched): one that launches
    as the upper bucket's is that bucket's, untimed, and a fitted one that launches as a stored one is not offered.
    The provenance's FITTED time is the fastest offered fitted config's (None where none ran)."""
    ran = (lambda c: t.launched(problem, c)) if t.launched else (lambda c: c)  # noqa: E731
    stored = [config for config, _ in neighbours]
    # the upper bucket first: search() sorts stably, so an equal time goes to it, as stored()'s tie does; the fitted
    # configs last, in the kernel's order (a tie between two goes to the first), so that one wins only by being faster
    firsts: dict[KernelConfig, KernelConfig] = {}
    for config in stored[::-1] + list(fitted):
        firsts.setdefault(ran(config), config)
    if len(firsts) == 1:
        return neighbours[-1]
    trials = search(t, problem, inputs, list(firsts.values()))
    us = {ran(x.params): (round(x.time_us, 3) if not x.error else None) for x in trials}
    timed: tuple[tuple[int | str, Optional[float]], ...] = tuple((at.bucket, us[ran(c)]) for c, at in neighbours)
    offered = [c for c in fitted if firsts.get(ran(c)) is c]
    if offered:
        ran_us = [us[ran(c)] for c in offered if us[ran(c)] is not None]
        timed += ((FITTED, min(ran_us) if ran_us else None),)
        if any(trials[0].params is c for c in offered):
            return trials[0].params, Provenance(FITTED, neighbours=timed)
    best, at = next((c, at) for c, at in neighbours[::-1] if ran(c) == ran(trials[0].params))
    return best, Provenance("stored-neighbour", at.file, at.bucket, timed)


def _search_and_store(
    t: Tunable, problem: Problem, inputs, candidates: list[KernelConfig], gpu: str, store: bool
) -> tuple[KernelConfig, Provenance]:
    """A run's quick search; its winner stored in the user's folder (unless storing is off), which the next run
    reads as "searched"."""
    best = search(t, problem, inputs, candidates, refine=len(candidates))[0]
    if not store:
        return best.params, Provenance(SEARCHED)
    about = {"source": SEARCHED, "timing": "cold", "candidates": len(candidates),
             "among": candidates_key(candidates), **_about()}  # fmt: skip
    path = save(t.name, problem, gpu, best.params, best.time_us, about)
    bucket = config_files.m_bucket(problem.M, problem.is_moe)
    return best.params, Provenance(SEARCHED, str(path), bucket)


@dataclass
class Trial:
    params: KernelConfig
    time_us: float = math.inf
    error: str = ""
    launch: Any = None  # kept between the two timing rounds, dropped before returning
    spread: float = 0.0  # the re-timed samples' p20-p80 spread over their median: the trial's noise
    wrong: bool = False  # it ran and its result failed the check: a kernel bug, not a slow config
    retimed: bool = False  # a finalist: re-timed side by side with the others (_retime), its time_us from there

    @property
    def config(self) -> dict[str, Any]:
        """The config's JSON dict, as `gemmbench tune` reports and stores it."""
        return self.params.to_dict()


# Two re-timed candidates whose medians differ by less than this fraction, or by less than either one's own
# spread, are a tie: the first in the space's order wins, so that one seed picks one winner in every process.
TIE = 0.01
# The coarse pass of a tune: the quick candidates and about this many more, evenly spread over the full space.
COARSE = 12
# Threads that make the candidates' first calls at once: Triton's compile (its passes and ptxas) lets go of the
# interpreter lock, and a tune from nothing spends most of its time compiling (BENCHMARKS "Tuning").
COMPILE_THREADS_ENV = "GEMMBENCH_COMPILE_THREADS"


def compile_threads() -> int:
    """How many candidates compile at once: GEMMBENCH_COMPILE_THREADS, else the CPUs this process may use, at most 8
    (one on Triton's CPU interpreter, which compiles nothing)."""
    if interpreter_on():
        return 1
    if os.environ.get(COMPILE_THREADS_ENV):
        return max(1, int(os.environ[COMPILE_THREADS_ENV]))
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _first_calls(launches: list, beat: Callable[[], None]) -> None:
    """Each launch called once, several at a time, so that their kernels compile side by side; what a call raises is
    left for the candidate's own call after (a config that cannot run fails there again, with its error)."""
    threads = compile_threads()
    if threads < 2 or len(launches) < 2:
        return
    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="compile") as pool:
        pending = {pool.submit(launch.fn) for launch in launches}
        while pending:
            beat()
            _, pending = concurrent.futures.wait(pending, timeout=1.0)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_each(
    t: Tunable, problem: Problem, inputs, candidates: list[KernelConfig], reference, quick_s: float,
    beat: Callable[[], None],
) -> list[Trial]:  # fmt: skip
    """Each candidate compiled, checked against `reference` where given (a wrong config is never chosen), and timed
    briefly (cold L2); a config that cannot run is a trial with its error."""
    built: dict[int, Any] = {}
    for i, config in enumerate(candidates):
        try:
            built[i] = t.build(problem, inputs, config)
        except Exception as exc:  # noqa: BLE001 - built again below, where its error is recorded
            built[i] = exc
    _first_calls([x for x in built.values() if not isinstance(x, Exception)], beat)
    trials = []
    for i, config in enumerate(candidates):
        beat()
        trial = Trial(config)
        try:
            launch = built[i] if not isinstance(built[i], Exception) else t.build(problem, inputs, config)
            # the first call compiles (or finds the kernel _first_calls compiled): a config needing more shared
            # memory than the GPU has fails here
            if reference is None:
                launch.fn()
            else:
                result = check_cell(problem, None, inputs, launch=launch, ref=reference).result
                if not result.ok:
                    trial.wrong = True
                    raise TuningError(f"wrong result: {result.detail}")
            trial.time_us = quick_median_us(launch.fn, quick_s)
            trial.launch = launch
        except Exception as exc:  # noqa: BLE001 - a config that cannot run is simply not a candidate
            if "CUDA error" in str(exc) or "illegal" in str(exc):
                raise  # a faulting kernel is a bug, not a slow config
            trial.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        trials.append(trial)
    return trials


def _retime(finalists: list[Trial]) -> None:
    """The finalists timed again side by side, longer (their calls interleaved): each one's median and spread."""
    timer = Timer("cold", budget_s=0.25, target_noise=0.002)
    samples = timer.run({i: timer.prepare([x.launch.fn]) for i, x in enumerate(finalists)})
    for i, x in enumerate(finalists):
        xs = sorted(samples[i])
        median = float(xs[len(xs) // 2])
        x.time_us, x.retimed = median, True
        x.spread = float(xs[(len(xs) * 4) // 5] - xs[len(xs) // 5]) / median if median > 0 else 0.0


def tied(a: Trial, b: Trial) -> bool:
    """Whether two re-timed trials cannot be told apart: medians within TIE, or within either one's spread."""
    gap = abs(a.time_us - b.time_us) / min(a.time_us, b.time_us)
    return gap <= max(TIE, a.spread, b.spread)


def pick(ranked: list[Trial], order: list[KernelConfig]) -> list[Trial]:
    """The trials (fastest first) with the winner moved to the front: of the trials tied with the fastest (tied),
    the first in `order` (the space's)."""
    if not ranked:
        return ranked
    place = {c: i for i, c in enumerate(order)}
    winner = min((x for x in ranked if tied(x, ranked[0])), key=lambda x: place.get(x.params, len(place)))
    return [winner] + [x for x in ranked if x is not winner]


def _ranked(
    t: Tunable, problem: Problem, trials: list[Trial], order: list[KernelConfig], refine: int,
    keep: Optional[KernelConfig] = None,
) -> list[Trial]:  # fmt: skip
    """The trials fastest first, the `refine` fastest (and `keep`, where it ran: a re-tune's stored config, which a
    noisy first timing must not drop unseen) re-timed side by side and the winner picked among them (pick); failed
    ones last, with their error.  Frees the trials' buffers."""
    ok = sorted((x for x in trials if not x.error), key=lambda x: x.time_us)
    if not ok:
        raise TuningError(f"no config of {t.name} runs {problem.label}: " + "; ".join(x.error for x in trials[:3]))
    if refine > 1 and len(ok) > 1:
        finalists = ok[:refine] + [x for x in ok[refine:] if keep is not None and x.params == keep]
        _retime(finalists)
        ok = pick(sorted(finalists, key=lambda x: x.time_us), order) + [x for x in ok if x not in finalists]
    for x in trials:
        x.launch = None  # free the buffers
    return ok + [x for x in trials if x.error]


def search(
    t: Tunable,
    problem: Problem,
    inputs,
    candidates: list[KernelConfig],
    reference=None,
    refine: int = 0,
    beat: Callable[[], None] = lambda: None,
    keep: Optional[KernelConfig] = None,
) -> list[Trial]:
    """Time every candidate (cold L2, short); with `reference`, first check each one through the one check
    (check.check_cell, against that shared reference); then re-time the `refine` fastest side by side, longer, and
    pick the winner among them (pick).  Returns the trials fastest first, the winner first; failed ones last, with
    their error.  Without a reference (a run's quick choice) the chosen config is checked by the run's own check of
    the cell.  `beat` is called before each candidate: the worker's sign of life to the pool's watchdog (a whole
    search may outlast one phase's limit).  keep: as _ranked's."""
    trials = _time_each(t, problem, inputs, candidates, reference, 0.02 if refine > 1 else 0.05, beat)
    return _ranked(t, problem, trials, candidates, refine, keep)


def one_apart(a: KernelConfig, b: KernelConfig) -> bool:
    """Whether two configs of one family differ in exactly one field, the fields of each of its ONE_CHOICE groups
    counted as one."""
    x, y = a.to_dict(), b.to_dict()
    differ = {k for k in x.keys() | y.keys() if x.get(k) != y.get(k)}
    grouped = set().union(*type(a).ONE_CHOICE)
    return len(differ - grouped) + sum(bool(differ & set(group)) for group in type(a).ONE_CHOICE) == 1


def coarse_candidates(full: list[KernelConfig], quick: list[KernelConfig]) -> list[KernelConfig]:
    """A tune's first pass: the quick candidates (those in the full space), then about COARSE more taken evenly
    through the full space, in its order."""
    step = max(1, len(full) // COARSE)
    return list(dict.fromkeys([c for c in quick if c in full] + full[::step]))


def tune_search(
    t: Tunable, problem: Problem, inputs, reference, budget_s: float, refine: int = 4,
    beat: Callable[[], None] = lambda: None, incumbent: Optional[KernelConfig] = None,
) -> tuple[list[Trial], int]:  # fmt: skip
    """`gemmbench tune`'s search of one problem: coarse (coarse_candidates), then fine (the untried configs one field
    apart from the two best so far, until a round finds nothing faster), each pass and round timed whole, a round
    begun only within budget_s seconds of the coarse pass's end.  The first job of a tune compiles what later ones find
    compiled: a budget that cut a pass or round short would leave a first job (or any job on a cold kernel cache) fewer
    configs, making its winner depend on its place in the tune and on the cache.  Then the `refine` best re-timed and
    the winner picked (pick).  incumbent: the config stored for this bucket, if it is in the full space: timed first,
    re-timed with the finalists and first in the ties' order, so that a re-tune replaces it only with a config faster
    beyond the noise.  Returns (trials fastest first, the winner first; how many configs the full space has)."""
    full = t.space(problem, True, True)
    coarse = first_of(incumbent, coarse_candidates(full, t.space(problem, True, False)), full)
    tried = _time_each(t, problem, inputs, coarse, reference, 0.02, beat)
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        best = sorted((x for x in tried if not x.error), key=lambda x: x.time_us)[:2]
        seen = {x.params for x in tried}
        near = [c for c in full if c not in seen and any(one_apart(c, b.params) for b in best)]
        if not near:
            break
        more = _time_each(t, problem, inputs, near, reference, 0.02, beat)
        tried += more
        if not any(not x.error and best and x.time_us < best[0].time_us for x in more):
            break
    return _ranked(t, problem, tried, first_of(incumbent, full, full), refine, incumbent), len(full)


def first_of(incumbent: Optional[KernelConfig], configs: list[KernelConfig], full: list[KernelConfig]) -> list:
    """The configs with a re-tune's stored config first, where it is still in the full space (else as they are)."""
    return list(dict.fromkeys(([incumbent] if incumbent is not None and incumbent in full else []) + configs))


def _about() -> dict:
    """What a stored entry records of how and where it was made."""
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), **_tool_versions()}


@functools.lru_cache(maxsize=1)
def _tool_versions() -> dict:
    import torch  # heavy; only when a winner is stored
    import triton

    return {"triton": triton.__version__, "torch": torch.__version__, "git_sha": device.git_sha()}


def _incumbent(t: Tunable, problem: Problem, gpu: Optional[str]) -> Optional[KernelConfig]:
    """The config this GPU has stored for the job's own M bucket, from its own contract's file alone (a fast job
    does not take the shared file's, which another job of the same tune may be replacing), or None: also where a
    file does not load (the tune's store then names it)."""
    if gpu is None:
        return None
    try:
        return config_files.own_bucket(t.name, problem, gpu, t.config_type, contract_only=True)
    except TuningError:
        return None


DEFAULT_BUDGET_S = 10.0  # a tune's seconds per (variant, problem, M bucket): docs/BENCHMARKS.md, "Tuning"


def tune_and_store(
    t: Tunable, problem: Problem, inputs, reference, beat: Callable[[], None] = lambda: None,
    budget_s: float = DEFAULT_BUDGET_S, exhaustive: bool = False,
) -> tuple[list[Trial], Path, Optional[KernelConfig]]:  # fmt: skip
    """`gemmbench tune` for one (variant, problem): the coarse-then-fine search with the check (exhaustive: every
    config of the full space), the winner stored.  A config already stored for the bucket on this GPU competes in the
    search, exhaustive or not (_incumbent; tune_search's incumbent).  Returns (every config timed, the winner first
    and failed ones last, as _ranked orders them; the winner's file; the stored config it raced or None)."""
    gpu = _gpu_name(inputs)
    incumbent = _incumbent(t, problem, gpu)
    if exhaustive:
        full = t.space(problem, True, True)
        every = first_of(incumbent, full, full)
        trials, space = search(t, problem, inputs, every, reference, refine=4, beat=beat, keep=incumbent), len(full)
    else:
        trials, space = tune_search(t, problem, inputs, reference, budget_s, beat=beat, incumbent=incumbent)
    best = trials[0]
    about = {"timing": "cold", "candidates": len(trials), "space": space,
             "failed": sum(1 for x in trials if x.error), **_about()}  # fmt: skip
    path = save(t.name, problem, gpu, best.params, best.time_us, about)
    _chosen.pop(_choice_key(t, problem), None)
    return trials, path, incumbent
