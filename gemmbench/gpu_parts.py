"""The Hopper parts gemmbench knows without a GPU: each one's compute capability, SMs, shared memory per block, L2
and HBM bandwidth, keyed by the name the driver reports (the rows' `gpu` column, the configs' folder names).

Two things read it: the config lookup, to find the GPU of the same capability nearest to this one whose configs
can be borrowed (configs/config_sources.py), and `gemmbench list configs --gpu NAME` and `run --dry-run --gpu NAME`,
which say what a run on a GPU would use without that GPU.  Figures are NVIDIA's datasheets (SXM/PCIe/NVL product
briefs); where NVIDIA publishes no SM count (the H20) the one CUDA reports on the part is used, and said below.
Shared memory per block is the opt-in maximum CUDA gives one block on Hopper (227 KiB of the SM's 228).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class GpuPart:
    name: str  # as torch.cuda.get_device_name() and nvidia-smi report it
    capability: tuple[int, int]
    sms: int
    smem_per_block_kib: int
    l2_mib: int
    hbm_gbps: Optional[float]  # None: a GPU not listed here, known only by its properties

    @property
    def dirname(self) -> str:
        return folder_name(self.name)


HOPPER_SMEM_KIB = 227

PARTS: tuple[GpuPart, ...] = (
    GpuPart("NVIDIA H100 80GB HBM3", (9, 0), 132, HOPPER_SMEM_KIB, 50, 3350.0),  # H100 SXM5
    GpuPart("NVIDIA H100 PCIe", (9, 0), 114, HOPPER_SMEM_KIB, 50, 2000.0),
    GpuPart("NVIDIA H100 NVL", (9, 0), 132, HOPPER_SMEM_KIB, 50, 3900.0),
    GpuPart("NVIDIA H200", (9, 0), 132, HOPPER_SMEM_KIB, 50, 4800.0),  # H200 SXM 141 GB
    GpuPart("NVIDIA H200 NVL", (9, 0), 132, HOPPER_SMEM_KIB, 50, 4800.0),
    GpuPart("NVIDIA H800", (9, 0), 132, HOPPER_SMEM_KIB, 50, 3350.0),  # H800 SXM5
    GpuPart("NVIDIA H800 PCIe", (9, 0), 114, HOPPER_SMEM_KIB, 50, 2000.0),
    GpuPart("NVIDIA H20", (9, 0), 78, HOPPER_SMEM_KIB, 60, 4000.0),  # SMs: as CUDA reports them (not in the datasheet)
    GpuPart("NVIDIA GH200 480GB", (9, 0), 132, HOPPER_SMEM_KIB, 50, 4000.0),  # 96 GB HBM3
    GpuPart("NVIDIA GH200 144G HBM3e", (9, 0), 132, HOPPER_SMEM_KIB, 50, 4900.0),
)


def folder_name(gpu: str) -> str:
    """A GPU's name as a folder: every run of other characters becomes one '_' (NVIDIA_H100_80GB_HBM3)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_")


def find(gpu: str) -> Optional[GpuPart]:
    """The part of a name as the driver reports it, or as a configs folder names it; None for a GPU not listed."""
    key = folder_name(gpu).lower()
    return next((p for p in PARTS if p.dirname.lower() == key), None)


def distance(a: GpuPart, b: GpuPart) -> tuple:
    """How far part b is from part a, compared in order: SM count, then shared memory per block, L2, HBM bandwidth,
    then b's name (alphabetical), so that no two parts are ever equally near.  An unknown bandwidth counts as equal."""
    return (
        abs(a.sms - b.sms),
        abs(a.smem_per_block_kib - b.smem_per_block_kib),
        abs(a.l2_mib - b.l2_mib),
        abs(a.hbm_gbps - b.hbm_gbps) if a.hbm_gbps is not None and b.hbm_gbps is not None else 0.0,
        b.name,
    )


def nearest_first(target: GpuPart, donors: list[GpuPart]) -> list[GpuPart]:
    """The donors of target's compute capability, nearest first (distance); never the target itself, never another
    capability: a tile that fits one generation's shared memory or instructions need not run on another."""
    same = [d for d in donors if d.capability == target.capability and d.dirname != target.dirname]
    return sorted(same, key=lambda d: distance(target, d))
