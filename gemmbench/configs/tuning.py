"""Configs of the Triton variants: stored per GPU as JSON data, searched by `gemmbench tune`.

A tunable variant (Tunable) has a search space and a build(problem, inputs, config) -> Launch.  Its
make() takes, in order: the config already chosen for this problem in this process; a stored one
(<gpu>/<variant>/N=..,K=..,dtype=...json: the user's file over the shipped one, overlay_buckets): that of M's own bucket, or
where M lies between two stored buckets the faster of those two buckets' configs at this M (neighbour_buckets, timed
here when they differ), or where all stored buckets lie on one side of M the nearest; otherwise it times a few
candidates right there (quick, not stored).  `gemmbench run --retune` skips the stored files.  Where the
config came from is a Provenance, kept beside the config (Launch.provenance); the row's `config` says it:
"source" is "stored" (with "file" and "bucket"), "stored-neighbour" (the same, and "neighbours_us"), "tuned"
or "only" (nothing to choose: one candidate, or Triton's CPU interpreter), or an inference engine's name ("vllm",
"sglang": a config file of the engine's, imported by `gemmbench run --import-config`; with "file" and the engine's
"key": engine_import.py).

The stored files (where they live, their names, M buckets, the overlay of the user's over the shipped) are
config_files.py's; Provenance is provenance.py's.

A config is a frozen dataclass of its kernel family (gemmbench/kernels/*.py), a KernelConfig: one field per key of
its JSON (stored files, the row's `config`), so that the JSON stays what it was when configs were dicts.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from gemmbench import locations, registry
from gemmbench.configs.config_files import TuningError, neighbour_buckets, save, stored, stored_buckets
from gemmbench.configs.kernel_config import (
    KernelConfig,  # re-exported: gemmbench/kernels/*.py subclass tuning.KernelConfig
)
from gemmbench.configs.provenance import Provenance
from gemmbench.measure import device
from gemmbench.measure.check import check_cell
from gemmbench.measure.timing import Timer, quick_median_us
from gemmbench.results.metrics import flops_bound
from gemmbench.shapes import Problem

CONFIG_DIR_ENV = locations.CONFIG_DIR_ENV  # the user's configs folder: tune writes here; read over the shipped
RETUNE_ENV = "GEMMBENCH_RETUNE"  # set by `gemmbench run --retune` for its workers
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
    found = None
    if gpu and os.environ.get(RETUNE_ENV) != "1":
        pair = neighbour_buckets(stored_buckets(t.name, problem, gpu), problem.M, problem.is_moe)
        if pair is None:
            found = stored(t.name, problem, gpu, t.config_type)
        else:
            found = _faster_neighbour(
                t, problem, inputs, [stored(t.name, problem, gpu, t.config_type, b) for b in pair]
            )
    if found is None:
        candidates = t.space(problem, gpu is not None, False)
        if len(candidates) == 1 or gpu is None:
            found = candidates[0], Provenance("only")
        else:
            found = search(t, problem, inputs, candidates)[0].params, Provenance("tuned")
    _chosen[key] = found
    return found


def _faster_neighbour(t: Tunable, problem: Problem, inputs, neighbours: list) -> tuple[KernelConfig, Provenance]:
    """The faster at this M of two neighbour buckets' stored (config, provenance), lower bucket first.  Timed by
    search()'s quick pass without a reference, as a run's choice among candidates is (the run's check of the cell
    then checks the winner), and only where the configs differ: equal ones are the upper bucket's, untimed."""
    (low, low_at), (high, high_at) = neighbours
    if low == high:
        return high, high_at
    # the upper bucket first: search() sorts stably, so an equal time goes to it, as stored()'s tie does
    trials = search(t, problem, inputs, [high, low])
    us = {id(x.params): (round(x.time_us, 3) if not x.error else None) for x in trials}
    best, at = (high, high_at) if trials[0].params is high else (low, low_at)
    timed = ((low_at.bucket, us[id(low)]), (high_at.bucket, us[id(high)]))
    return best, Provenance("stored-neighbour", at.file, at.bucket, timed)


@dataclass
class Trial:
    params: KernelConfig
    time_us: float = math.inf
    error: str = ""
    launch: Any = None  # kept between the two timing rounds, dropped before returning

    @property
    def config(self) -> dict[str, Any]:
        """The config's JSON dict, as `gemmbench tune` reports and stores it."""
        return self.params.to_dict()


def search(
    t: Tunable,
    problem: Problem,
    inputs,
    candidates: list[KernelConfig],
    reference=None,
    refine: int = 0,
    beat: Callable[[], None] = lambda: None,
) -> list[Trial]:
    """Time every candidate (cold L2, short); with `reference`, first check each one through the one check
    (check.check_cell, against that shared reference: a wrong config is never chosen); then re-time the `refine`
    fastest side by side, longer.  Returns the trials fastest first; failed ones last, with their error.  Without a
    reference (a run's quick choice) the chosen config is checked by the run's own check of the cell.  `beat` is called before each candidate: the worker's sign of life to the pool's
    watchdog (a whole search may outlast one phase's limit)."""

    trials = []
    for config in candidates:
        beat()
        trial = Trial(config)
        try:
            launch = t.build(problem, inputs, config)
            # the first call compiles: a config needing more shared memory than the GPU has fails here
            if reference is None:
                launch.fn()
            else:
                result = check_cell(problem, None, inputs, launch=launch, ref=reference).result
                if not result.ok:
                    raise TuningError(f"wrong result: {result.detail}")
            # a first pass over many candidates only has to rank them; the finalists are re-timed
            trial.time_us = quick_median_us(launch.fn, 0.02 if refine > 1 else 0.05)
            trial.launch = launch
        except Exception as exc:  # noqa: BLE001 - a config that cannot run is simply not a candidate
            if "CUDA error" in str(exc) or "illegal" in str(exc):
                raise  # a faulting kernel is a bug, not a slow config
            trial.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        trials.append(trial)
    ok = sorted((x for x in trials if not x.error), key=lambda x: x.time_us)
    if not ok:
        raise TuningError(f"no config of {t.name} runs {problem.label}: " + "; ".join(x.error for x in trials[:3]))
    if refine > 1 and len(ok) > 1:
        timer = Timer("cold", budget_s=0.25, target_noise=0.002)
        finalists = ok[:refine]
        samples = timer.run({i: timer.prepare([x.launch.fn]) for i, x in enumerate(finalists)})
        for i, x in enumerate(finalists):
            x.time_us = float(sorted(samples[i])[len(samples[i]) // 2])
        ok = sorted(finalists, key=lambda x: x.time_us) + ok[refine:]
    for x in trials:
        x.launch = None  # free the buffers
    return ok + [x for x in trials if x.error]


@functools.lru_cache(maxsize=1)
def _tool_versions() -> dict:
    import torch  # heavy; only when a winner is stored
    import triton

    return {"triton": triton.__version__, "torch": torch.__version__, "git_sha": device.git_sha()}


def tune_and_store(
    t: Tunable, problem: Problem, inputs, reference, beat: Callable[[], None] = lambda: None
) -> tuple[Trial, Path, int]:
    """`gemmbench tune` for one (variant, problem): full search with the check, store the winner."""
    candidates = t.space(problem, True, True)
    trials = search(t, problem, inputs, candidates, reference, refine=4, beat=beat)
    best = trials[0]
    about = {
        "timing": "cold",
        "candidates": len(candidates),
        "failed": sum(1 for x in trials if x.error),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        **_tool_versions(),
    }
    path = save(t.name, problem, _gpu_name(inputs), best.params, best.time_us, about)
    _chosen.pop(_choice_key(t, problem), None)
    return best, path, len(candidates)
