"""Which stored configs a Triton variant may run for a problem on a GPU, in the lookup's order, without timing
anything and without a GPU (the GPU's properties come from gemmbench/gpu_parts.py, or from the device itself):

  1. own: the GPU's own tuned configs (the user's file over the shipped one: config_files.overlay_buckets);
  2. borrowed (with --borrow): else those of the nearest GPU of the same compute capability that has configs for
     the problem (gpu_parts.nearest_first: SM count, then shared memory per block, L2, HBM bandwidth, then the name);
  3. searched: else what an earlier run's quick search on this GPU stored for M's own bucket.

Each source serves M only from buckets in reach of M's own (config_files.in_reach); a source with none in reach
passes to the next.  Nothing found: the run searches (tuning.choose) and stores the winner as "searched".  Read by
tuning.choose (which also times two neighbour buckets where M lies between them), `gemmbench list configs` and
`run --dry-run --gpu`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gemmbench import gpu_parts
from gemmbench.configs import config_files
from gemmbench.shapes import Problem

BORROW_ENV = "GEMMBENCH_BORROW"  # "1": `--borrow`, for the run's workers
STORE_ENV = "GEMMBENCH_STORE_SEARCHED"  # "0": `--no-store`, for the run's workers
RETUNE_ENV = "GEMMBENCH_RETUNE"  # "1": `--retune`: no stored config at all, and nothing stored
NO_OWN_ENV = "GEMMBENCH_NO_OWN"  # "1": `--no-own`: skip the GPU's own stored configs (what borrowing gives)


@dataclass(frozen=True)
class Policy:
    """What the lookup may do: borrow another GPU's configs (only with --borrow: on the H200 the H100's configs missed
    the rule for a default, docs/BENCHMARKS.md "Configs across GPUs"), store a run's searched winners, read stored
    configs at all (not under --retune), read the GPU's own (not under --no-own)."""

    borrow: bool = False
    store: bool = True
    stored: bool = True
    own: bool = True

    @classmethod
    def from_env(cls) -> Policy:
        """The policy a worker was started with (Policy.env)."""
        retune = os.environ.get(RETUNE_ENV) == "1"
        store = os.environ.get(STORE_ENV) != "0" and not retune
        return cls(os.environ.get(BORROW_ENV) == "1", store, not retune, os.environ.get(NO_OWN_ENV) != "1")

    def env(self) -> dict[str, str]:
        """The environment that gives a worker this policy."""
        return {
            **({BORROW_ENV: "1"} if self.borrow else {}),
            **({STORE_ENV: "0"} if not self.store else {}),
            **({RETUNE_ENV: "1"} if not self.stored else {}),
            **({NO_OWN_ENV: "1"} if not self.own else {}),
        }


@dataclass(frozen=True)
class Found:
    """The stored entries of one source that serve M: kind "own", "borrowed" or "searched"; gpu: the folder's GPU
    (the lender's for "borrowed"); buckets: {bucket: entry} in reach of M; files: {bucket: its file}."""

    kind: str
    gpu: str
    buckets: dict
    files: dict

    def nearest(self, M: int, moe: bool) -> str:
        """The bucket that serves M: its own where stored, else the nearest (a tie: the larger)."""
        return config_files.nearest_bucket(list(self.buckets), config_files.m_bucket(M, moe))


def part_of(gpu: str, dev=None) -> Optional[gpu_parts.GpuPart]:
    """The GPU's part: from the table by name, else from the device's own properties (a measure.device.DeviceInfo)
    where there is one (its HBM bandwidth unknown), else None: a GPU neither listed nor present borrows nothing."""
    part = gpu_parts.find(gpu)
    if part is not None or dev is None or dev.kind != "cuda":
        return part
    smem = (dev.smem_per_block or 0) // 1024
    return gpu_parts.GpuPart(dev.name, dev.capability, dev.sm_count or 0, smem, (dev.l2_bytes or 0) >> 20, None)


def lenders(part: gpu_parts.GpuPart, roots: Optional[list[Path]] = None) -> list[str]:
    """The GPUs whose configs `part` may borrow, nearest first: listed parts of its capability with a configs folder
    (shipped or the user's).  A folder of a GPU not in the table is never lent: its capability is unknown."""
    folders = {d.name for r in (roots or config_files.config_roots()) if r.is_dir() for d in r.iterdir() if d.is_dir()}
    listed = [p for p in (gpu_parts.find(f) for f in folders) if p is not None]
    return [p.name for p in gpu_parts.nearest_first(part, listed)]


def _in_reach(kind: str, gpu: str, variant: str, problem: Problem, searched: bool = False) -> Optional[Found]:
    buckets, files = config_files.overlay_buckets(variant, problem, gpu, searched=searched)
    if searched:
        reach = [b for b in buckets if int(b) == config_files.m_bucket(problem.M, problem.is_moe)]
    else:
        reach = config_files.in_reach(list(buckets), problem.M, problem.is_moe)
    if not reach:
        return None
    return Found(kind, gpu, {b: buckets[b] for b in reach}, {b: files[b] for b in reach})


def lookup(
    variant: str, problem: Problem, gpu: str, policy: Policy = Policy(), part: Optional[gpu_parts.GpuPart] = None
) -> Optional[Found]:
    """The first source in the lookup's order with a stored config in reach of M, or None (the run searches).
    part: the GPU's (part_of); without it nothing is borrowed."""
    if not policy.stored:
        return None
    found = _in_reach("own", gpu, variant, problem) if policy.own else None
    if found is None and policy.borrow and part is not None:
        for lender in lenders(part):
            found = _in_reach("borrowed", lender, variant, problem)
            if found is not None:
                break
    return found or (_in_reach("searched", gpu, variant, problem, searched=True) if policy.own else None)


def predict(
    variant: str, problem: Problem, gpu: str, part: Optional[gpu_parts.GpuPart], policy: Policy = Policy()
) -> dict:
    """What a run on `gpu` would take for a Triton variant's problem, without timing: {"source": "own", "borrowed",
    "searched" (an earlier run's, stored) or "search" (nothing stored: the run searches, then stores), "from": the
    lender (as the driver names it) or None, "bucket", "file": the stored entry's, or None}."""
    found = lookup(variant, problem, gpu, policy, part)
    if found is None:
        return {"source": "search", "from": None, "bucket": None, "file": None}
    b = found.nearest(problem.M, problem.is_moe)
    lender = found.gpu if found.kind == "borrowed" else None  # lenders() names them as the driver does
    return {"source": found.kind, "from": lender, "bucket": int(b), "file": found.files[b]}


def device_of(part: gpu_parts.GpuPart):
    """A measure.device.DeviceInfo posing as the part, for the variants' support checks without that GPU."""
    from gemmbench.measure.device import DeviceInfo  # torch: only where a part stands in for a GPU

    return DeviceInfo(kind="cuda", name=part.name, capability=part.capability, sm_count=part.sms,
                      l2_bytes=part.l2_mib << 20, smem_per_block=part.smem_per_block_kib << 10, stand_in=True)  # fmt: skip


def files_for(
    gpu: str, part: Optional[gpu_parts.GpuPart], variants: Optional[str] = None, policy: Policy = Policy()
) -> list[dict]:
    """Every stored file a run on `gpu` would read, one row each: its own files, then (policy.borrow) for each file
    name it lacks the nearest lender's; {"variant", "file" (its name), "buckets", "source": "own" or "borrowed",
    "from"}.  Entries a run's search stored count as "searched" files of its own.  variants: comma-separated globs."""
    import fnmatch

    globs = [g.strip() for g in (variants or "*").split(",") if g.strip()]
    folders = [gpu] + (lenders(part) if part is not None and policy.borrow else [])
    rows, seen = [], set()
    for i, folder in enumerate(folders):
        merged: dict[tuple[str, str], dict] = {}  # (variant, file name) -> its buckets, the user's over the shipped
        for root in config_files.config_roots():
            for f in sorted((root / config_files.gpu_dirname(folder)).glob("*/*.json")):
                if any(fnmatch.fnmatch(f.parent.name, g) for g in globs):
                    merged.setdefault((f.parent.name, f.name), {}).update(config_files.read_entries(f))
        for key, entries in sorted(merged.items()):
            tuned = sorted(int(b) for b, e in entries.items() if e.get("source") != config_files.SEARCHED)
            if key in seen or (i > 0 and not tuned):  # a lender's searched entries are never lent
                continue
            seen.add(key)
            kind = "borrowed" if i else ("own" if tuned else "searched")
            buckets = tuned if i else sorted(int(b) for b in entries)
            rows.append({"variant": key[0], "file": key[1], "buckets": ",".join(map(str, buckets)), "source": kind,
                         "from": folder if i else None})  # fmt: skip
    return rows
