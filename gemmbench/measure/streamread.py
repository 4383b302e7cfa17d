"""The pure streaming-read kernel: it empties L2 before a cold sample (reading, never writing, so no
dirty lines are left to be written back inside the timed kernel: docs/GPU-FACTS.md §1) and measures the
read bandwidth a kernel of a given size can reach (docs/GPU-FACTS.md §2).  Harness infrastructure, not a
benchmarked variant."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

READ_BLOCK = 4096  # int32 elements per program: 16 KiB, eight 16-byte loads per thread at 4 warps


@triton.jit
def read_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    # x_ptr: (n,) int32; partial_ptr: (cdiv(n, BLOCK),) int32 - one word written per 16 KiB read
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


class StreamReader:
    """A buffer of `nbytes` and a closure that reads all of it once."""

    def __init__(self, nbytes: int, device: str = "cuda"):
        n = max(READ_BLOCK, nbytes // 4)
        # random contents (nothing may be special-cased on zeros), drawn on the device: a CPU draw of
        # 2 GiB took seconds
        gen = torch.Generator(device=device).manual_seed(0)
        self.buf = torch.randint(-100, 100, (n,), dtype=torch.int32, generator=gen, device=device)
        self.partial = torch.empty(triton.cdiv(n, READ_BLOCK), dtype=torch.int32, device=device)
        self.nbytes = n * 4

    def __call__(self) -> torch.Tensor:
        read_kernel[(self.partial.numel(),)](self.buf, self.partial, self.buf.numel(), BLOCK=READ_BLOCK, num_warps=4)
        return self.partial
