"""What we run on: the device and its provenance for every row (its measured ceilings are in ceilings.py)."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

import gemmbench
from gemmbench import build_id


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cuda" | "cpu"
    name: str
    capability: tuple = (0, 0)
    sm_count: Optional[int] = None
    l2_bytes: Optional[int] = None
    uuid: Optional[str] = None
    memory_bytes: Optional[int] = None
    smem_per_block: Optional[int] = None  # bytes a block may opt in to (Hopper: 227 KiB)
    # a GPU described from the parts table, not this machine's: what a probe of this machine's stack (torch's
    # _scaled_mm paths, Triton's Gluon) finds says nothing about it (on_the_gpu)
    stand_in: bool = False


ON_THE_GPU = "decided on the GPU"  # the start of a reason only the GPU's own machine can settle


def on_the_gpu(device: DeviceInfo, what: str) -> Optional[str]:
    """For a stand-in device, the reason that a rule probed on this machine (`what`) is left to the GPU's machine;
    None for a real device, whose probe then runs."""
    return f"{ON_THE_GPU}: {what}" if device.stand_in else None


@functools.lru_cache(maxsize=None)
def detect(index: int = 0) -> DeviceInfo:
    """This process's GPU `index` (reading its properties makes no CUDA context), or the CPU without CUDA."""
    if not torch.cuda.is_available():
        return DeviceInfo(kind="cpu", name=platform.processor() or platform.machine() or "cpu")
    p = torch.cuda.get_device_properties(index)
    return DeviceInfo(
        kind="cuda",
        name=p.name,
        capability=(p.major, p.minor),
        sm_count=p.multi_processor_count,
        l2_bytes=getattr(p, "L2_cache_size", None),
        uuid=str(getattr(p, "uuid", "")) or None,
        memory_bytes=p.total_memory,
        smem_per_block=getattr(p, "shared_memory_per_block_optin", None),
    )


def _run(cmd: list[str], cwd: Optional[Path] = None) -> Optional[str]:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=None)
def git_sha(package: Optional[Path] = None) -> Optional[str]:
    """The build of the gemmbench source that ran, never the repository of the folder it happens to sit in: the
    commit of gemmbench's own checkout (a source tree or an editable install), with "-dirty.<hash of the uncommitted
    changes>" when it has any; a wheel's commit written at build time; else a hash of the package's files
    (build_id.files_hash).  GEMMBENCH_GIT_SHA, first, names it where the source is a copy without .git (e.g. shipped
    to a GPU host)."""
    if os.environ.get("GEMMBENCH_GIT_SHA"):
        return os.environ["GEMMBENCH_GIT_SHA"]
    return build_id.build_commit(package or Path(gemmbench.__file__).resolve().parent)


@functools.lru_cache(maxsize=None)
def processor_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The host's processor as its vendor names it ("AMD EPYC 9654 96-Core Processor"): /proc/cpuinfo's "model
    name" on Linux, else platform.processor(); "" when neither says (aarch64 Linux has no "model name")."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor().strip()


@functools.lru_cache(maxsize=None)
def provenance(index: int = 0) -> dict:
    """The provenance columns of every row, of this process's GPU `index` (a row made for a worker's GPU names it)."""
    import triton  # heavy: only provenance needs it; run's option checks import this module (sweep, timing)

    dev = detect(index)
    driver = None
    if dev.kind == "cuda":
        # nvidia-smi counts GPUs past CUDA_VISIBLE_DEVICES: the UUID is sure (nvidia-smi wants torch's with "GPU-")
        which = (dev.uuid if dev.uuid.startswith("GPU-") else f"GPU-{dev.uuid}") if dev.uuid else str(index)
        driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", which])
    return {
        "device": dev.kind,
        "gpu": dev.name if dev.kind == "cuda" else None,
        "gpu_uuid": dev.uuid,
        "sm_count": dev.sm_count,
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "gemmbench_version": gemmbench.__version__,
        "git_sha": git_sha(),
        "host": platform.node(),
        # every row, a GPU's too (its launch overhead is host work); a CPU run's titles read "CPU (<cpu>)"
        "cpu": processor_name(),
    }
