"""The stored config files of the Triton variants: one JSON file per GPU, variant and problem shape
(<gpu>/<variant>/N=..,K=..,dtype=...json), its configs by M bucket; read by tuning.choose(), written by
`gemmbench tune` (tuning.tune_and_store).

Stored files live in two folders (gemmbench/locations.py): the shipped configs (the package's, gemmbench/kernels/configs
in the repository: read only) and the user's (platformdirs' config dir, or GEMMBENCH_CONFIG_DIR), where
`gemmbench tune` writes.  A file of the same name in both is read as one: buckets merged, the user's bucket
winning, so that a user's tune overrides the shipped config of that M bucket and keeps the others.

M buckets: decode M = 1..16 share one (BLOCK_M = 16 covers them all: the rows past M are masked, so the
kernel streams the same weight bytes), then powers of two: 32, 64, 128, ... 4096.  MoE problems use powers
of two from 1: there the token count decides how many experts' weights a call streams.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Optional, TypeVar

from gemmbench import dtypes, locations, registry
from gemmbench.configs.kernel_config import ConfigError, KernelConfig
from gemmbench.configs.provenance import Provenance
from gemmbench.results.store import write_atomic
from gemmbench.shapes import Problem

B = TypeVar("B", str, int)  # a bucket: a file's key (str) or its number


class TuningError(RuntimeError):
    """A config that cannot be read (a stored file) or found (tuning.search: no candidate runs)."""


def m_bucket(M: int, moe: bool = False) -> int:
    """The bucket of M (tokens).  Dense: 1..16 share 16.  MoE: powers of two from 1, since the tokens decide
    how many experts (so blocks of rows) a call touches: 1 token hits topk experts, 16 tokens all of them."""
    return 1 << (M - 1).bit_length() if moe or M > 16 else 16


def configs_root() -> Path:
    """The user's configs folder: where `gemmbench tune` writes (never into the package), read over the shipped."""
    return locations.user_configs_dir()


def shipped_configs_root() -> Path:
    """The configs the package ships (gemmbench/kernels/configs in the repository)."""
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


def tuned_fast(problem: Problem) -> bool:
    """Whether a problem's configs have a file of their own for fast accumulation: fp8 under the fast contract.  A
    tile chosen with promotion pays for its second fp32 tile in registers; without it larger tiles win (the engines'
    per-tensor fp8 kernels run fast: docs/BENCHMARKS.md, "Fused MoE against vLLM's kernel")."""
    return problem.dtype == "fp8" and problem.fp8_accum == dtypes.FAST_FP8_ACCUM


def config_path(variant: str, problem: Problem, gpu: str, root: Optional[Path] = None, shared: bool = False) -> Path:
    """The file of a variant's configs for a problem's shape on a GPU, under `root` (default: the user's folder,
    configs_root(), where tune writes).
    MoE files are named by the experts one rank holds (E=local) and, under expert parallelism, the degree
    (ep=N): 32 local experts of 256 at EP 8 get 1/8 of the routed pairs spread over 32 experts, another load than
    E=32 without EP.  Without EP the name is E=<all experts>,topk=..., as before EP existed.  An fp8 scaling other
    than per tensor ends the name (,scaling=block): per-tensor files keep the names they had before scalings.  Configs
    tuned under fast accumulation end it with ,fp8_accum=fast (tuned_fast); shared: the file every contract reads,
    without that ending."""
    ep = f"ep={problem.ep}," if problem.ep > 1 else ""
    moe = f"E={problem.local_experts},{ep}topk={problem.topk}," if problem.is_moe else ""
    scaling = f",scaling={_config_scaling(problem)}" if _config_scaling(problem) else ""
    fast = ",fp8_accum=fast" if tuned_fast(problem) and not shared else ""
    name = f"{moe}N={problem.N},K={problem.K},dtype={problem.dtype}{scaling}{fast}.json"
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
    for each bucket the file it came from: relative to the shipped folder (as the repository's gemmbench/kernels/configs
    names it), or the user's file as a full path.  A user folder that is the shipped one (GEMMBENCH_CONFIG_DIR
    =gemmbench/kernels/configs in a checkout, how the project commits its tunes) is read once, as shipped.  Under fast
    accumulation the files tuned under it come over the shared ones, bucket by bucket."""
    shipped, user = shipped_configs_root(), configs_root()
    buckets: dict = {}
    where: dict[str, str] = {}
    roots = [(shipped, True)] + ([(user, False)] if user.resolve() != shipped else [])
    contracts = (True, False) if tuned_fast(problem) else (True,)
    for shared, (root, is_shipped) in ((c, r) for c in contracts for r in roots):
        path = config_path(variant, problem, gpu, root, shared)
        found = _read(path).get("buckets", {})
        buckets.update(found)
        name = str(path.relative_to(root)) if is_shipped else str(path)
        where.update(dict.fromkeys(found, name))
    return buckets, where


def nearest_bucket(buckets: list[B], bucket: int) -> B:
    """The stored bucket a lookup of M's bucket (m_bucket) takes: that bucket where stored, else the nearest in
    log2(M), on a tie the larger (its BLOCK_M covers the smaller M too)."""
    want = math.log2(bucket)
    return min(buckets, key=lambda b: (abs(math.log2(int(b)) - want), -int(b)))


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
    key = nearest_bucket(list(buckets), m_bucket(problem.M, problem.is_moe) if bucket is None else bucket)
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
    if tuned_fast(problem):
        data["fp8_accum"] = problem.fp8_accum
    bucket = str(m_bucket(problem.M, problem.is_moe))
    data["buckets"][bucket] = {"config": config.to_dict(), "time_us": round(us, 3), **about}
    data["buckets"] = dict(sorted(data["buckets"].items(), key=lambda kv: int(kv[0])))
    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    return path
