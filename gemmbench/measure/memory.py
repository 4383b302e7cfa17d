"""Device memory: how much a step may still allocate (the fp32 reference's slices, stream mode's input copies) and
the peak a cell reached (a run row's `gpu_mem_peak_bytes`).

One place to ask, so that tests can shrink the budget (monkeypatch `free_bytes`) and watch the reference slice
its work, on a CPU that has no memory counters.
"""

from __future__ import annotations

from typing import Optional

import torch

# On a CPU nothing is measured: the reference and the input draw are sized against this fixed budget (the CPU
# suite's problems are <= 128 per dimension, i.e. well under 1 MiB each, so it only matters to tests that shrink it)
CPU_BUDGET_BYTES = 1 << 30


def _on_gpu(device: str) -> bool:
    return device.startswith("cuda") and torch.cuda.is_available()


def free_bytes(device: str) -> int:
    """Bytes a new allocation on `device` can still get: the driver's free memory plus what PyTorch's caching
    allocator holds but does not use (blocks freed by earlier steps, which it hands out again before asking the
    driver).  CPU: CPU_BUDGET_BYTES."""
    if not _on_gpu(device):
        return CPU_BUDGET_BYTES
    free, _total = torch.cuda.mem_get_info()
    return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())


def reset_peak(device: str) -> None:
    """Start a new peak: what is allocated now is its floor (torch.cuda.reset_peak_memory_stats)."""
    if _on_gpu(device):
        torch.cuda.reset_peak_memory_stats()


def peak_bytes(device: str) -> Optional[int]:
    """The most bytes allocated through PyTorch since the last reset_peak (torch.cuda.max_memory_allocated); None on
    a CPU.  The kernels' buffers here are PyTorch tensors; what the driver holds outside PyTorch's allocator (the
    CUDA context, loaded kernels) is not counted."""
    if not _on_gpu(device):
        return None
    try:
        return int(torch.cuda.max_memory_allocated())
    except RuntimeError:  # a CUDA context poisoned by a faulting kernel: the row records the fault, not a peak
        return None
