"""The stored config files of the Triton variants: one JSON file per GPU, variant and problem shape
(<gpu>/<variant>/N=..,K=..,dtype=...json), its configs by M bucket; read by the lookup (config_sources.py), written
by `gemmbench tune` (tuning.tune_and_store) and by a run's quick search (tuning.choose: an entry marked
"source": "searched").

Stored files live in two folders (gemmbench/locations.py): the shipped configs (the package's, gemmbench/kernels/configs
in the repository: read only) and the user's (platformdirs' config dir, or GEMMBENCH_CONFIG_DIR), where
`gemmbench tune` and a run's searches write.  A file of the same name in both is read as one: buckets merged, the
user's bucket winning, so that a user's tune overrides the shipped config of that M bucket and keeps the others.
Writes take a lock on the file (filelock): the workers of `--gpus` store their searches at once.

M buckets: decode M = 1..16 share one (BLOCK_M = 16 covers them all: the rows past M are masked, so the
kernel streams the same weight bytes), then powers of two: 32, 64, 128, ... 4096.  MoE problems use powers
of two from 1: there the token count decides how many experts' weights a call streams.  A stored bucket serves M
only within REACH buckets of M's own: a tile tuned for 16 rows is no guess for 64.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional, TypeVar

from gemmbench import dtypes, gpu_parts, locations, registry
from gemmbench.configs.kernel_config import ConfigError, KernelConfig
from gemmbench.configs.provenance import Provenance
from gemmbench.results.atomic_write import write_atomic
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


gpu_dirname = gpu_parts.folder_name

REACH = 1  # buckets (a factor of 2 in M) a stored config serves on either side of its own
SEARCHED = "searched"  # a bucket entry's "source" when a run's quick search stored it (a tune's entry has none)


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


def read_entries(path: Path) -> dict:
    """A stored file's buckets ({} where it does not exist); an unreadable file is a TuningError naming it."""
    return _read(path).get("buckets", {})


def overlay_buckets(
    variant: str, problem: Problem, gpu: str, searched: bool = False, roots: Optional[list[Path]] = None,
    contract_only: bool = False,
) -> tuple[dict, dict[str, str]]:  # fmt: skip
    """The buckets of the shipped file and the user's file of the same name, merged (the user's bucket wins), and
    for each bucket the file it came from: relative to the shipped folder (as the repository's gemmbench/kernels/configs
    names it), or the user's file as a full path.  searched: the entries a run's quick search stored instead of a
    tune's (only those, never both: the lookup tries a tune's own and borrowed configs before its searched ones).
    A user folder that is the shipped one (GEMMBENCH_CONFIG_DIR=gemmbench/kernels/configs in a checkout, how the
    project commits its tunes) is read once, as shipped.  Under fast accumulation the files tuned under it come over
    the shared ones, bucket by bucket (only those, for a variant whose configs fix the promotion: fast_reads_shared).
    roots: the folders to read (default: shipped, then the user's).  contract_only: the files of the problem's own
    contract alone (under fast accumulation, not the shared ones)."""
    shipped = shipped_configs_root()
    folders = config_roots() if roots is None else roots
    buckets: dict = {}
    where: dict[str, str] = {}
    if tuned_fast(problem):
        contracts: tuple[bool, ...] = (True, False) if fast_reads_shared(variant) and not contract_only else (False,)
    else:
        contracts = (True,)
    for shared, root in ((c, r) for c in contracts for r in folders):
        path = config_path(variant, problem, gpu, root, shared)
        found = {b: e for b, e in _read(path).get("buckets", {}).items() if (e.get("source") == SEARCHED) == searched}
        buckets.update(found)
        name = str(path.relative_to(root)) if root == shipped else str(path)
        where.update(dict.fromkeys(found, name))
    return buckets, where


def fast_reads_shared(variant: str) -> bool:
    """Whether a variant's fast-accumulation problems also read the shared files (tuned under precise): a tile tuned
    with promotion still runs fast there.  Not where a config itself promotes (a promoting schedule runs its
    promotion whatever the contract asked, and loses to the fast schedules)."""
    tunable = registry.get(variant).tunable
    return tunable is None or not tunable.promotion_in_config


def config_roots() -> list[Path]:
    """The folders configs are read from, in overlay order: the shipped, then the user's (unless it is the shipped)."""
    shipped, user = shipped_configs_root(), configs_root()
    return [shipped] + ([user] if user.resolve() != shipped else [])


def nearest_bucket(buckets: list[B], bucket: int) -> B:
    """The stored bucket nearest a bucket in log2(M), on a tie the larger (its BLOCK_M covers the smaller M too)."""
    want = math.log2(bucket)
    return min(buckets, key=lambda b: (abs(math.log2(int(b)) - want), -int(b)))


def in_reach(buckets: list[B], M: int, moe: bool) -> list[B]:
    """The stored buckets that may serve M: M's own bucket and those within REACH buckets of it (16 serves M 1..32
    and 32 serves 16..64, where 64 does not serve M 16)."""
    own = math.log2(m_bucket(M, moe))
    return [b for b in buckets if abs(math.log2(int(b)) - own) <= REACH]


def load(
    variant: str, problem: Problem, buckets: dict, files: dict[str, str], key: str, config_type=None
) -> KernelConfig:
    """The config of one stored bucket; a file that does not load is a TuningError naming it."""
    config_type = config_type or registry.get(variant).tunable.config_type
    try:
        return config_type.from_dict(buckets[key]["config"])
    except (ConfigError, KeyError, TypeError) as exc:
        raise TuningError(f"stored config file {files[key]}, bucket {key}: {exc}") from None


def stored(
    variant: str,
    problem: Problem,
    gpu: str,
    config_type: Optional[type[KernelConfig]] = None,
    bucket: Optional[int] = None,
) -> Optional[tuple[KernelConfig, Provenance]]:
    """(config, where it came from) of the GPU's own tuned configs: M's bucket, else the nearest stored bucket in
    reach of M (in_reach; or `bucket`, one that stored_buckets listed), or None."""
    buckets, files = overlay_buckets(variant, problem, gpu)
    reach: list[str] = list(buckets) if bucket is not None else in_reach(list(buckets), problem.M, problem.is_moe)
    if not reach:
        return None
    key = str(bucket) if bucket is not None else nearest_bucket(reach, m_bucket(problem.M, problem.is_moe))
    return load(variant, problem, buckets, files, key, config_type), Provenance("stored", files[key], int(key))


def own_bucket(
    variant: str, problem: Problem, gpu: str, config_type=None, contract_only: bool = False
) -> Optional[KernelConfig]:
    """The GPU's own tuned config for the problem's own M bucket (the user's over the shipped), or None; a file that
    does not load is a TuningError.  contract_only: as overlay_buckets."""
    buckets, files = overlay_buckets(variant, problem, gpu, contract_only=contract_only)
    key = str(m_bucket(problem.M, problem.is_moe))
    return load(variant, problem, buckets, files, key, config_type) if key in buckets else None


def stored_buckets(variant: str, problem: Problem, gpu: str) -> list[int]:
    """The M buckets of the GPU's own tuned configs for this variant and problem (any M), ascending."""
    return sorted(int(b) for b in overlay_buckets(variant, problem, gpu)[0])


def neighbour_buckets(buckets: list[int], M: int, moe: bool) -> Optional[tuple[int, int]]:
    """The stored buckets just below and just above M where M lies strictly between two of them (M 100 between 64
    and 128; M 17 between 16 and 32), else None: M is a stored bucket, or every stored bucket lies on one side of
    it (stored()'s nearest in reach serves).  Give it the buckets in reach of M (in_reach).  M below the smallest bucket a problem has (dense 16: m_bucket's decode M 1..16
    share it; MoE 1) counts as that bucket."""
    at = max(M, m_bucket(1, moe))
    below, above = [b for b in buckets if b < at], [b for b in buckets if b > at]
    if at in buckets or not below or not above:
        return None
    return max(below), min(above)


def save(variant: str, problem: Problem, gpu: str, config: KernelConfig, us: float, about: dict) -> Path:
    """Store the winner of one M bucket in the user's file (other buckets of the file are kept; the shipped file is
    never written, nor copied: its other buckets stay read from the package, so an upgrade's reach the user);
    atomic rewrite, under the file's lock (another worker may store into the same file at once).  A run's search
    (about's "source": "searched") never replaces a tune's entry of that bucket."""
    from filelock import FileLock  # torch's dependency: only a GPU run or tune stores

    path = config_path(variant, problem, gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    bucket = str(m_bucket(problem.M, problem.is_moe))
    with FileLock(path.parent / f".{path.name}.lock"):
        data = _read(path) or {
            "variant": variant,
            "gpu": gpu,
            "N": problem.N,
            "K": problem.K,
            "dtype": problem.dtype,
            "buckets": {},
        }
        held = data["buckets"].get(bucket)
        if about.get("source") == SEARCHED and held is not None and held.get("source") != SEARCHED:
            return path
        if problem.is_moe:  # E: the experts of one rank, as in the file name
            data.update(E=problem.local_experts, topk=problem.topk, **({"ep": problem.ep} if problem.ep > 1 else {}))
        if _config_scaling(problem):
            data["scaling"] = _config_scaling(problem)
        if tuned_fast(problem):
            data["fp8_accum"] = problem.fp8_accum
        data["buckets"][bucket] = {"config": config.to_dict(), "time_us": round(us, 3), **about}
        data["buckets"] = dict(sorted(data["buckets"].items(), key=lambda kv: int(kv[0])))
        write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    return path
