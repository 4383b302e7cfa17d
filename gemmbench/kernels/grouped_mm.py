"""torch_grouped_mm: the grouped-matmul MoE baseline.  The (token, slot) rows are sorted by expert and
gathered, torch._grouped_mm multiplies each expert's contiguous segment with its weight in one call
(cuBLAS / CUTLASS grouped GEMM on a GPU), and the results are scattered back to (M * topk, N).  The
sort, gather and scatter are inside the timed closure: what a model using it pays.  Under expert parallelism the
slots of other ranks (id -1) sort after the last local expert's, past the last group offset: torch._grouped_mm
computes no row there, and those (token, slot) rows of the output, another rank's work, hold whatever it left.
Our part never syncs with the host, but torch._grouped_mm itself copies from host memory (torch 2.11), so it
cannot be captured in a CUDA graph: no `stream` or `graph` timing.

torch._grouped_mm is a private torch op: where this torch lacks it, or it refuses the dtype on this
device, the variant is skipped with the reason (found by one tiny trial call per device and dtype).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from gemmbench import dtypes
from gemmbench.measure.device import on_the_gpu
from gemmbench.registry import Launch, Variant, register


@functools.lru_cache(maxsize=None)
def _unsupported(device_kind: str, dtype: str) -> Optional[str]:
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no torch._grouped_mm"
    dev = "cuda" if device_kind == "cuda" else "cpu"
    dt = dtypes.get(dtype).torch
    try:
        a = torch.ones((32, 64), dtype=dt, device=dev)
        b = torch.ones((2, 32, 64), dtype=dt, device=dev).transpose(1, 2)  # as _make passes the weight
        torch._grouped_mm(a, b, offs=torch.tensor([16, 32], dtype=torch.int32, device=dev))
    except Exception as exc:  # noqa: BLE001 - any refusal is the reason this variant cannot run here
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"torch._grouped_mm refuses {dtype} on this device: {line[:200]}"
    return None


def _supports(problem, device) -> Optional[str]:
    return on_the_gpu(device, f"whether its torch._grouped_mm takes {problem.dtype}") or _unsupported(
        device.kind, problem.dtype
    )


def _make(problem, inputs) -> Launch:
    a, w, ids = inputs.a, inputs.b, inputs.topk_ids.reshape(-1).long()
    topk, E = problem.topk, problem.local_experts
    out = torch.empty((problem.M * topk, problem.N), dtype=inputs.out_dtype, device=a.device)
    w_t = w.transpose(1, 2)  # (E, K, N) view of the (E, N, K) weight: K-major B, no copy
    ones = torch.ones_like(ids)
    bucket = torch.where(ids >= 0, ids, E)  # another rank's slot (-1) last, in bucket E, which has no group

    def run():
        order = torch.argsort(bucket, stable=True)
        # scatter_add, not bincount: CUDA's bincount reads the max id on the host (a sync, no graph)
        counts = torch.zeros(E + 1, dtype=torch.long, device=ids.device).scatter_add_(0, bucket, ones)
        ends = torch.cumsum(counts[:E], 0).to(torch.int32)
        out[order] = torch._grouped_mm(a[order // topk], w_t, offs=ends)
        return out

    # Measured on the H100 (torch 2.11): capturing it in a CUDA graph fails ("Cannot copy between CPU and
    # CUDA tensors during CUDA graph capture"): torch._grouped_mm copies from host memory per call.
    return Launch(fn=run, out=out, graph_safe=False)


register(
    Variant(
        "torch_grouped_mm",
        "moe_ref",
        ("fp16", "bf16"),
        "MoE baseline: rows sorted by expert and gathered, torch._grouped_mm (one grouped GEMM), scattered back",
        _make,
        supports=_supports,
        moe=True,
        by_default=False,  # the MoE references' one in a default run is torch_moe_loop, the speedups' baseline
    )
)
