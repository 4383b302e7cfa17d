"""Measured ceilings: the bandwidth a streaming read reaches at a ladder of sizes (a 6 µs kernel cannot reach the
bandwidth of a 2 GiB copy, docs/GPU-FACTS.md §2) and the matmul rate of large cuBLAS GEMMs.  Measured, not taken from
a datasheet; cached per GPU, timing mode and torch version in ~/.cache/gemmbench (override with GEMMBENCH_CACHE) and
stored in each row."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import torch

from gemmbench import dtypes, metrics
from gemmbench.device import detect
from gemmbench.store import write_atomic
from gemmbench.streamread import StreamReader
from gemmbench.timing import Timer

LADDER_MIB = (4, 16, 64, 256, 1024, 2048)


def cache_dir() -> Path:
    return Path(os.environ.get("GEMMBENCH_CACHE", Path.home() / ".cache" / "gemmbench"))


@dataclass
class Ceilings:
    mode: str
    bandwidth_ladder: list  # [[bytes, GB/s], ...] of the streaming-read kernel in this timing mode
    peak_tflops: dict  # "bf16" | "fp8" -> TFLOP/s of a large cuBLAS GEMM (8192^3); DType.peak names the one it uses

    def peak_for(self, dtype: str) -> float:
        return self.peak_tflops[dtypes.get(dtype).peak]


def ceilings(timer_mode: str, remeasure: bool = False) -> Optional[Ceilings]:
    """Measured ceilings for this GPU and timing mode (None on the CPU), from the cache when present."""
    dev = detect()
    if dev.kind != "cuda":
        return None
    mode = "stream" if timer_mode == "stream" else "cold"  # graph and wall share the cold ladder
    safe = "".join(c if c.isalnum() else "-" for c in f"{dev.name}_{mode}_{torch.__version__}")
    path = cache_dir() / "ceilings" / f"{safe}.json"
    if path.exists() and not remeasure:
        try:
            return Ceilings(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # a damaged cache file is measured again
    result = _measure(mode)
    # workers on several GPUs of one host may measure the same GPU model at once: each write is whole
    write_atomic(path, json.dumps(asdict(result), indent=1).encode())
    return result


def _measure(mode: str) -> Ceilings:
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
    peaks = {}
    n = 8192
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn((n, n), generator=gen).cuda()
    b = torch.randn((n, n), generator=gen).cuda()
    a16, b16 = a.bfloat16(), b.bfloat16()
    samples = Timer("cold").measure([lambda: a16 @ b16.t()], graph_safe=True)
    peaks["bf16"] = metrics.tflops(2 * n**3, metrics.summarize(samples)["time_us_median"])
    try:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        samples = Timer("cold").measure(
            [lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)], graph_safe=True
        )
        peaks["fp8"] = metrics.tflops(2 * n**3, metrics.summarize(samples)["time_us_median"])
    except RuntimeError:
        peaks["fp8"] = peaks["bf16"]  # no fp8 path on this GPU: fp8 variants are skipped anyway
    return Ceilings(mode=mode, bandwidth_ladder=ladder, peak_tflops=peaks)
