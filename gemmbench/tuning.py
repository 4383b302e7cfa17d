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

Stored files live in two folders (gemmbench/locations.py): the shipped configs (the package's, kernels/configs
in the repository: read only) and the user's (platformdirs' config dir, or GEMMBENCH_CONFIG_DIR), where
`gemmbench tune` writes.  A file of the same name in both is read as one: buckets merged, the user's bucket
winning, so that a user's tune overrides the shipped config of that M bucket and keeps the others.

A config is a frozen dataclass of its kernel family (kernels/*.py), a KernelConfig: one field per key of
its JSON (stored files, the row's `config`), so that the JSON stays what it was when configs were dicts.

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

from gemmbench import device, dtypes, locations, registry
from gemmbench.check import check_cell
from gemmbench.inference_engines import InferenceEngine
from gemmbench.kernel_config import ConfigError, KernelConfig  # re-exported: kernels/*.py subclass tuning.KernelConfig
from gemmbench.metrics import flops_bound
from gemmbench.shapes import Problem
from gemmbench.store import write_atomic
from gemmbench.timing import Timer, quick_median_us

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


def has_tma() -> bool:
    """Hopper's bulk tensor copy engine (tensor descriptors, kernels/tile_loop.py): compute capability 9+."""
    return device.detect().capability >= (9, 0)


# ---------------------------------------------------------------- where a config came from


SOURCES = ("stored", "stored-neighbour", "tuned", "only", *(e.value for e in InferenceEngine))


@dataclass(frozen=True)
class Provenance:
    """Where a config came from, kept beside it (choose(), Launch.provenance), never inside it; in the row's
    `config` JSON its keys come after the config's.  "stored": from `file` (a shipped file relative to the
    package's configs folder, a user's file as its full path: overlay_buckets), the winner of M bucket `bucket`;
    "stored-neighbour": the same, where M lies between two stored buckets and
    `bucket`'s config was the faster of the two at this M (`neighbours`: each bucket, lower first, with its µs in
    this process's quick timing, None where it failed to run); "tuned": the fastest of a few candidates timed
    right here (not stored); "only": nothing to choose (one candidate, or Triton's CPU interpreter); an
    InferenceEngine's name: the engine's config `file` (its name), the entry `key` (tokens) that the engine's own
    rule picks for the row's M."""

    source: str  # one of SOURCES
    file: Optional[str] = None
    bucket: Optional[int] = None
    neighbours: Optional[tuple[tuple[int, Optional[float]], ...]] = None
    key: Optional[int] = None

    def __post_init__(self) -> None:
        stored = self.source in ("stored", "stored-neighbour")
        engine = self.source in InferenceEngine.__members__
        placed = (self.file is not None, self.bucket is not None, self.key is not None)
        if self.source not in SOURCES or placed != (stored or engine, stored, engine):
            raise ValueError(f"not a provenance (a stored config has a file and a bucket, an engine's a file and a "
                             f"key, others neither): {self!r}")  # fmt: skip
        if (self.neighbours is not None) != (self.source == "stored-neighbour"):
            raise ValueError(f"not a provenance (a stored-neighbour config, and only that, has neighbours): {self!r}")

    def to_dict(self) -> dict[str, Any]:
        """Its keys in the row's `config` JSON: source; where stored, file and bucket (imported: file and key); for a
        stored-neighbour, "neighbours_us": {"<bucket>": µs or null, ...}, lower bucket first."""
        fields = (("source", self.source), ("file", self.file), ("bucket", self.bucket), ("key", self.key))
        out: dict[str, Any] = {k: v for k, v in fields if v is not None}
        if self.neighbours is not None:
            out["neighbours_us"] = {str(b): us for b, us in self.neighbours}
        return out

    def __getitem__(self, key: str) -> Any:
        # Read by key where the dict it replaces was: `gemmbench tune --skip-stored` takes stored(...)[1]["bucket"].
        return self.to_dict()[key]


# ---------------------------------------------------------------- stored configs


def m_bucket(M: int, moe: bool = False) -> int:
    """The bucket of M (tokens).  Dense: 1..16 share 16.  MoE: powers of two from 1, since the tokens decide
    how many experts (so blocks of rows) a call touches: 1 token hits topk experts, 16 tokens all of them."""
    return 1 << (M - 1).bit_length() if moe or M > 16 else 16


def configs_root() -> Path:
    """The user's configs folder: where `gemmbench tune` writes (never into the package), read over the shipped."""
    return locations.user_configs_dir()


def shipped_configs_root() -> Path:
    """The configs the package ships (kernels/configs in the repository)."""
    return locations.shipped_configs_dir()


def gpu_dirname(gpu: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_")


def _config_scaling(problem: Problem) -> Optional[str]:
    """The scaling that names a problem's stored configs, or None for per tensor and 16-bit (their files keep the
    names they had before scalings).  Block scales make another kernel (another K loop, BLOCK_K at most 128);
    block-ue8m0 runs the block kernel with other scale values, so it reads and writes the block configs."""
    if problem.scaling in (dtypes.REFERENCE_SCALING, dtypes.UNSCALED):
        return None
    return "block" if dtypes.SCALINGS[problem.scaling].k_block is not None else problem.scaling


def config_path(variant: str, problem: Problem, gpu: str, root: Optional[Path] = None) -> Path:
    """The file of a variant's configs for a problem's shape on a GPU, under `root` (default: the user's folder,
    configs_root(), where tune writes).
    MoE files are named by the experts one rank holds (E=local) and, under expert parallelism, the degree
    (ep=N): 32 local experts of 256 at EP 8 get 1/8 of the routed pairs spread over 32 experts, another load than
    E=32 without EP.  Without EP the name is E=<all experts>,topk=..., as before EP existed.  An fp8 scaling other
    than per tensor ends the name (,scaling=block): per-tensor files keep the names they had before scalings."""
    ep = f"ep={problem.ep}," if problem.ep > 1 else ""
    moe = f"E={problem.local_experts},{ep}topk={problem.topk}," if problem.is_moe else ""
    scaling = f",scaling={_config_scaling(problem)}" if _config_scaling(problem) else ""
    name = f"{moe}N={problem.N},K={problem.K},dtype={problem.dtype}{scaling}.json"
    return (configs_root() if root is None else root) / gpu_dirname(gpu) / variant / name


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


def overlay_buckets(variant: str, problem: Problem, gpu: str) -> tuple[dict, dict[str, str]]:
    """The buckets of the shipped file and the user's file of the same name, merged (the user's bucket wins), and
    for each bucket the file it came from: relative to the shipped folder (as the repository's kernels/configs
    names it), or the user's file as a full path.  A user folder that is the shipped one (GEMMBENCH_CONFIG_DIR
    =kernels/configs in a checkout, how the project commits its tunes) is read once, as shipped."""
    shipped, user = shipped_configs_root(), configs_root()
    buckets: dict = {}
    where: dict[str, str] = {}
    layers = [(shipped, True)] + ([(user, False)] if user.resolve() != shipped else [])
    for root, is_shipped in layers:
        path = config_path(variant, problem, gpu, root)
        found = _read(path).get("buckets", {})
        buckets.update(found)
        name = str(path.relative_to(root)) if is_shipped else str(path)
        where.update(dict.fromkeys(found, name))
    return buckets, where


def stored(
    variant: str,
    problem: Problem,
    gpu: str,
    config_type: Optional[type[KernelConfig]] = None,
    bucket: Optional[int] = None,
) -> Optional[tuple[KernelConfig, Provenance]]:
    """(config, where it came from) for the nearest stored M bucket (or `bucket`, one that stored_buckets
    listed), or None.  config_type: what the file's configs load into (default: the registered variant's)."""
    buckets, files = overlay_buckets(variant, problem, gpu)
    if not buckets:
        return None
    want = math.log2(m_bucket(problem.M, problem.is_moe) if bucket is None else bucket)
    # nearest in log2(M); on a tie the larger bucket (its BLOCK_M covers the smaller M too)
    key = min(buckets, key=lambda b: (abs(math.log2(int(b)) - want), -int(b)))
    config_type = config_type or registry.get(variant).tunable.config_type
    try:
        config = config_type.from_dict(buckets[key]["config"])
    except (ConfigError, KeyError, TypeError) as exc:
        raise TuningError(f"stored config file {files[key]}, bucket {key}: {exc}") from None
    return config, Provenance("stored", files[key], int(key))


def stored_buckets(variant: str, problem: Problem, gpu: str) -> list[int]:
    """The M buckets stored for this variant and problem (any M), ascending."""
    return sorted(int(b) for b in overlay_buckets(variant, problem, gpu)[0])


def neighbour_buckets(buckets: list[int], M: int, moe: bool) -> Optional[tuple[int, int]]:
    """The stored buckets just below and just above M where M lies strictly between two of them (M 100 between 64
    and 128; M 17 between 16 and 32), else None: M is a stored bucket, or every stored bucket lies on one side of
    it (stored()'s nearest serves).  M below the smallest bucket a problem has (dense 16: m_bucket's decode M 1..16
    share it; MoE 1) counts as that bucket."""
    at = max(M, m_bucket(1, moe))
    below, above = [b for b in buckets if b < at], [b for b in buckets if b > at]
    if at in buckets or not below or not above:
        return None
    return max(below), min(above)


def save(variant: str, problem: Problem, gpu: str, config: KernelConfig, us: float, about: dict) -> Path:
    """Store the winner of one M bucket in the user's file (other buckets of the file are kept; the shipped file is
    never written, nor copied: its other buckets stay read from the package, so an upgrade's reach the user);
    atomic rewrite."""
    path = config_path(variant, problem, gpu)
    data = _read(path) or {
        "variant": variant,
        "gpu": gpu,
        "N": problem.N,
        "K": problem.K,
        "dtype": problem.dtype,
        "buckets": {},
    }
    if problem.is_moe:  # E: the experts of one rank, as in the file name
        data.update(E=problem.local_experts, topk=problem.topk, **({"ep": problem.ep} if problem.ep > 1 else {}))
    if _config_scaling(problem):
        data["scaling"] = _config_scaling(problem)
    bucket = str(m_bucket(problem.M, problem.is_moe))
    data["buckets"][bucket] = {"config": config.to_dict(), "time_us": round(us, 3), **about}
    data["buckets"] = dict(sorted(data["buckets"].items(), key=lambda kv: int(kv[0])))
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
    """What one choice of config in this process serves: a variant at one problem shape, dtype and scaling."""
    p = problem
    return (t.name, p.M, p.N, p.K, p.E, p.topk, p.ep, p.dtype, p.scaling)


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
    t: Tunable, problem: Problem, inputs, candidates: list[KernelConfig], reference=None, refine: int = 0
) -> list[Trial]:
    """Time every candidate (cold L2, short); with `reference`, first check each one through the one check
    (check.check_cell, against that shared reference: a wrong config is never chosen); then re-time the `refine`
    fastest side by side, longer.  Returns the trials fastest first; failed ones last, with their error.  Without a
    reference (a run's quick choice) the chosen config is checked by the run's own check of the cell."""

    trials = []
    for config in candidates:
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
    path = save(t.name, problem, _gpu_name(inputs), best.params, best.time_us, about)
    _chosen.pop(_choice_key(t, problem), None)
    return best, path, len(candidates)
