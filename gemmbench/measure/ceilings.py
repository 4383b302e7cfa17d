"""Measured ceilings: the bandwidth a streaming read reaches at a ladder of sizes (a 6 µs kernel cannot reach the
bandwidth of a 2 GiB copy, docs/GPU-FACTS.md §2) and the matmul rate of each dtype, the best cuBLAS rate (at its fastest tenth of
samples) over a ladder of large GEMMs (gemmbench.measure.compute_ladder).  Measured, not taken from a datasheet; cached in ~/.cache/gemmbench
(override with GEMMBENCH_CACHE) per physical GPU (its uuid, else its name), clock state (the maximum and the
application SM clock NVML reports: a cache taken at other clocks is not reused; without NVML the key has no clocks),
timing mode and torch version, and stored in each row."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from gemmbench import dtypes
from gemmbench.measure import compute_ladder, telemetry, timing_modes
from gemmbench.measure.device import detect
from gemmbench.measure.streamread import StreamReader
from gemmbench.measure.timing import Timer
from gemmbench.results import metrics
from gemmbench.results.atomic_write import write_atomic

LADDER_MIB = (4, 16, 64, 256, 1024, 2048)


def cache_dir() -> Path:
    return Path(os.environ.get("GEMMBENCH_CACHE", Path.home() / ".cache" / "gemmbench"))


@dataclass
class Ceilings:
    mode: str
    bandwidth_ladder: list  # [[bytes, GB/s], ...] of the streaming-read kernel in this timing mode
    peak_tflops: dict  # dtype -> the best TFLOP/s of its compute ladder (at the fast tenth) (compute_ladder.best)
    compute_ladder: list = field(default_factory=list)  # compute_ladder.as_rows: every rung, timed or skipped
    key: dict = field(default_factory=dict)  # what the cache is keyed by (cache_key_parts)

    def peak_for(self, dtype: str) -> float:
        """The dtype's own measured peak, else the one it shares (dtypes.DType.peak: fp16 runs at bf16's rate)."""
        own = self.peak_tflops.get(dtype)
        return own if own else self.peak_tflops[dtypes.get(dtype).peak]


def clock_state(uuid: Optional[str]) -> Optional[dict]:
    """{"sm_max_mhz", "sm_app_mhz"} of the GPU with this uuid from NVML (telemetry.Probe.clock_limits), or None where
    NVML, the package or the GPU is not there: a ceiling from other clocks would be wrong here."""
    found = telemetry.probe(uuid)
    return None if found is None else found.clock_limits()


def cache_key_parts(name: str, uuid: Optional[str], clocks: Optional[dict], mode: str, torch_version: str) -> dict:
    """What a cached ceiling is valid for: this physical GPU (uuid; the name where torch gives none), its clock state
    (absent without NVML: then a cache of the same GPU at other clocks is reused), the timing mode and torch
    (another cuBLAS)."""
    key: dict[str, Any] = {"gpu": name}
    if uuid:
        key["uuid"] = uuid
    if clocks:
        key.update(clocks)
    key.update(mode=mode, torch=torch_version)
    return key


def cache_path(key: dict) -> Path:
    text = "_".join(str(v) for v in key.values())
    return cache_dir() / "ceilings" / f"{''.join(c if c.isalnum() or c in '.-' else '-' for c in text)}.json"


def _load(path: Path) -> Optional[Ceilings]:
    """The cached ceilings, or None for a missing, damaged or older file (it is measured again)."""
    try:
        got = Ceilings(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return (
        got if got.compute_ladder and set(compute_ladder.best(compute_ladder.from_rows(got.compute_ladder))) else None
    )


def ceilings(timer_mode: str, remeasure: bool = False) -> Optional[Ceilings]:
    """Measured ceilings for this GPU, clock state and timing mode (None on the CPU), from the cache when present."""
    dev = detect()
    if dev.kind != "cuda":
        return None
    mode = timing_modes.get(timer_mode).ladder  # every mode but stream shares the cold ladder
    key = cache_key_parts(dev.name, dev.uuid, clock_state(dev.uuid), mode, torch.__version__)
    path = cache_path(key)
    cached = None if remeasure else _load(path)
    if cached is not None:
        return cached
    result = _measure(mode, key)
    # workers on several GPUs of one host may measure the same GPU at once: each write is whole
    write_atomic(path, json.dumps(asdict(result), indent=1).encode())
    return result


def _measure(mode: str, key: dict) -> Ceilings:
    timer = Timer(mode)
    ladder = []
    for mib in LADDER_MIB:
        nbytes = mib << 20
        # stream mode reads distinct buffers back to back, as consecutive layers would
        copies = timer.copies_needed(nbytes)
        readers = [StreamReader(nbytes) for _ in range(copies)]
        samples = timer.measure(readers, graph_safe=True)
        ladder.append([nbytes, metrics.gbps(nbytes, metrics.summarize(samples)["time_us_median"])])
        del readers
    torch.cuda.empty_cache()
    rungs = compute_ladder.climb(compute_ladder.cuda_samples, torch.cuda.mem_get_info()[0])
    peaks = compute_ladder.best(rungs)
    if "bf16" not in peaks:
        raise RuntimeError("no bf16 rung of the compute ladder could be timed (GPU memory?)")
    peaks.setdefault("fp8", peaks["bf16"])  # no fp8 path on this GPU: fp8 variants are skipped anyway
    return Ceilings(mode, ladder, peaks, compute_ladder.as_rows(rungs), key)
