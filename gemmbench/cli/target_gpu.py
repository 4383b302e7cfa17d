"""`--gpu NAME` of `run --dry-run` and `list configs`: the GPU whose configs and support are asked about, from the
Hopper parts table (gemmbench/gpu_parts.py) without that GPU, or this machine's own."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from gemmbench import gpu_parts
from gemmbench.cli.common import fail


class TargetGpu(NamedTuple):
    name: str
    part: Optional[gpu_parts.GpuPart]  # None: a GPU neither in the table nor described by its properties
    device: Any  # a measure.device.DeviceInfo: the GPU's, or one posing as the part


def target_gpu(name: Optional[str], required: bool = False) -> Optional[TargetGpu]:
    """The GPU of --gpu NAME (refused in one line naming the table's parts when it is not one), else this machine's;
    None on a machine without a GPU (or a one-line error where `required`)."""
    from gemmbench.configs import config_sources  # not at --help
    from gemmbench.measure import device  # torch

    if name is not None:
        part = gpu_parts.find(name)
        if part is None:
            known = ", ".join(repr(p.name) for p in gpu_parts.PARTS)
            raise fail(f"--gpu {name!r} is not in the Hopper parts table; choose from {known}")
        return TargetGpu(part.name, part, config_sources.device_of(part))
    dev = device.detect()
    if dev.kind != "cuda":
        if required:
            raise fail("no CUDA GPU here: name the GPU to ask about with --gpu (e.g. --gpu 'NVIDIA H200')")
        return None
    return TargetGpu(dev.name, config_sources.part_of(dev.name, dev), dev)
