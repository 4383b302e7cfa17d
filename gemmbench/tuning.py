"""Configs of the Triton variants: stored per GPU as JSON data, searched by `gemmbench tune`.

A tunable variant (Tunable) has a search space and a build(problem, inputs, config) -> Launch.  Its
make() takes, in order: the config already chosen for this problem in this process; the stored one
for the nearest M bucket (kernels/configs/<gpu>/<variant>/N=..,K=..,dtype=...json); otherwise it
times a few candidates right there (quick, not stored).  `gemmbench run --retune` skips the stored
files.  The row's `config` says which: "source" is "stored" (with "file" and "bucket"), "tuned" or
"only" (nothing to choose: one candidate, or Triton's CPU interpreter).

M buckets: decode M = 1..16 share one (BLOCK_M = 16 covers them all: the rows past M are masked, so the
kernel streams the same weight bytes), then powers of two: 32, 64, 128, ... 4096.  MoE problems use powers
of two from 1: there the token count decides how many experts' weights a call streams.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from gemmbench.shapes import Problem

CONFIG_DIR_ENV = "GEMMBENCH_CONFIG_DIR"  # stored configs are read from (and tune writes to) here instead
RETUNE_ENV = "GEMMBENCH_RETUNE"  # set by `gemmbench run --retune` for its workers
# Triton's interpreter runs a 33x80x48 GEMM in well under a second; a Llama decode GEMM would take minutes.
INTERPRETER_MAX_MACS = 1 << 24

_chosen: dict[tuple, tuple[dict, dict]] = {}


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
    from gemmbench.metrics import flops

    macs = flops(problem) // 2
    if macs > INTERPRETER_MAX_MACS:
        return f"too large for Triton's CPU interpreter ({macs:.2g} multiply-adds, limit {INTERPRETER_MAX_MACS:.2g}): run it on a GPU"
    return None


def sm_count() -> int:
    from gemmbench.device import detect

    return detect().sm_count or 132


def has_tma() -> bool:
    """Hopper's bulk tensor copy engine (tensor descriptors, kernels/tile_loop.py): compute capability 9+."""
    from gemmbench.device import detect

    return detect().capability >= (9, 0)


# ---------------------------------------------------------------- stored configs


def m_bucket(M: int, moe: bool = False) -> int:
    """The bucket of M (tokens).  Dense: 1..16 share 16.  MoE: powers of two from 1, since the tokens decide
    how many experts (so blocks of rows) a call touches: 1 token hits topk experts, 16 tokens all of them."""
    return 1 << (M - 1).bit_length() if moe or M > 16 else 16


def configs_root() -> Path:
    if os.environ.get(CONFIG_DIR_ENV):
        return Path(os.environ[CONFIG_DIR_ENV])
    import gemmbench.kernels

    return Path(gemmbench.kernels.__file__).resolve().parent / "configs"


def gpu_dirname(gpu: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_")


def config_path(variant: str, problem: Problem, gpu: str) -> Path:
    moe = f"E={problem.E},topk={problem.topk}," if problem.is_moe else ""
    name = f"{moe}N={problem.N},K={problem.K},dtype={problem.dtype}.json"
    return configs_root() / gpu_dirname(gpu) / variant / name


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TuningError(f"stored config file {path} is unreadable: {exc}") from None
    if not isinstance(data.get("buckets"), dict):
        raise TuningError(f"stored config file {path} has no 'buckets' table")
    return data


def stored(variant: str, problem: Problem, gpu: str) -> Optional[tuple[dict, dict]]:
    """(config, where) for the nearest stored M bucket, or None."""
    path = config_path(variant, problem, gpu)
    buckets = _read(path).get("buckets", {})
    if not buckets:
        return None
    want = math.log2(m_bucket(problem.M, problem.is_moe))
    # nearest in log2(M); on a tie the larger bucket (its BLOCK_M covers the smaller M too)
    key = min(buckets, key=lambda b: (abs(math.log2(int(b)) - want), -int(b)))
    try:
        rel = str(path.relative_to(configs_root()))
    except ValueError:
        rel = str(path)
    return dict(buckets[key]["config"]), {"source": "stored", "file": rel, "bucket": int(key)}


def save(variant: str, problem: Problem, gpu: str, config: dict, us: float, about: dict) -> Path:
    """Store the winner of one M bucket (other buckets of the file are kept); atomic rewrite."""
    path = config_path(variant, problem, gpu)
    data = _read(path) or {
        "variant": variant,
        "gpu": gpu,
        "N": problem.N,
        "K": problem.K,
        "dtype": problem.dtype,
        "buckets": {},
    }
    if problem.is_moe:
        data.update(E=problem.E, topk=problem.topk)
    data["buckets"][str(m_bucket(problem.M, problem.is_moe))] = {"config": config, "time_us": round(us, 3), **about}
    data["buckets"] = dict(sorted(data["buckets"].items(), key=lambda kv: int(kv[0])))
    from gemmbench.store import write_atomic

    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    return path


class TuningError(RuntimeError):
    pass


# ---------------------------------------------------------------- tunable variants


@dataclass(frozen=True)
class Tunable:
    """A Triton variant with a config space.  space(problem, on_gpu, full): every candidate that
    `gemmbench tune` tries (full) or the few a run tries when nothing is stored (not full)."""

    name: str
    space: Callable[[Problem, bool, bool], list[dict]]
    build: Callable[[Problem, Any, dict], Any]  # -> registry.Launch

    def make(self, problem: Problem, inputs) -> Any:
        config, where = choose(self, problem, inputs)
        launch = self.build(problem, inputs, config)
        launch.config = dict(launch.config, **where)
        return launch


def _gpu_name(inputs) -> Optional[str]:
    if not inputs.a.is_cuda or interpreter_on():
        return None
    from gemmbench.device import detect

    return detect().name


def choose(t: Tunable, problem: Problem, inputs) -> tuple[dict, dict]:
    key = (t.name, problem.M, problem.N, problem.K, problem.E, problem.topk, problem.dtype)
    if key in _chosen:
        return _chosen[key]
    gpu = _gpu_name(inputs)
    found = stored(t.name, problem, gpu) if gpu and os.environ.get(RETUNE_ENV) != "1" else None
    if found is None:
        candidates = t.space(problem, gpu is not None, False)
        if len(candidates) == 1 or gpu is None:
            found = candidates[0], {"source": "only"}
        else:
            best = search(t, problem, inputs, candidates)[0]
            found = best.config, {"source": "tuned"}
    _chosen[key] = found
    return found


@dataclass
class Trial:
    config: dict
    time_us: float = math.inf
    error: str = ""
    launch: Any = None  # kept between the two timing rounds, dropped before returning


def search(
    t: Tunable, problem: Problem, inputs, candidates: list[dict], reference=None, refine: int = 0
) -> list[Trial]:
    """Time every candidate (cold L2, short); with `reference`, first check each one's output against it
    (a wrong config is never chosen); then re-time the `refine` fastest side by side, longer.
    Returns the trials fastest first; failed ones last, with their error."""
    from gemmbench.check import compare, poison
    from gemmbench.timing import Timer, quick_median_us

    trials = []
    for config in candidates:
        trial = Trial(config)
        try:
            launch = t.build(problem, inputs, config)
            poison(launch.out)
            out = launch.fn()  # compiles; a config needing more shared memory than the GPU has fails here
            if reference is not None:
                result = compare(problem, out, reference)
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
    import torch
    import triton

    from gemmbench.device import git_sha

    return {"triton": triton.__version__, "torch": torch.__version__, "git_sha": git_sha()}


def tune_and_store(t: Tunable, problem: Problem, inputs, reference) -> tuple[Trial, Path, int]:
    """`gemmbench tune` for one (variant, problem): full search with the check, store the winner."""
    candidates = t.space(problem, True, True)
    trials = search(t, problem, inputs, candidates, reference, refine=4)
    best = trials[0]
    about = {
        "timing": "cold",
        "candidates": len(candidates),
        "failed": sum(1 for x in trials if x.error),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        **_tool_versions(),
    }
    path = save(t.name, problem, _gpu_name(inputs), best.config, best.time_us, about)
    _chosen.pop((t.name, problem.M, problem.N, problem.K, problem.E, problem.topk, problem.dtype), None)
    return best, path, len(candidates)
