"""torch_moe_loop: the reference MoE baseline.  For each local expert, gather the (token, slot) rows routed
to it and run one matmul (cuBLAS on a GPU); scatter the results back to (M * topk, N).  A slot routed to another
expert-parallel rank (id -1) matches no local expert: its row is not computed and not written.

Finding each expert's rows needs their count on the host (nonzero), so this variant syncs with the
host every call, as a naive model loop does: it cannot be captured in a CUDA graph.  It is the speedup
baseline of every MoE row, fp8 included: it has no fp8 path, so fp8 MoE rows show no speedup.
"""

from __future__ import annotations

import torch

from gemmbench.builtin_baselines import BASELINES
from gemmbench.registry import Launch, Variant, register


def _make(problem, inputs) -> Launch:
    a, w, ids = inputs.a, inputs.b, inputs.topk_ids.reshape(-1)
    topk, E = problem.topk, problem.local_experts
    out = torch.empty((problem.M * topk, problem.N), dtype=inputs.out_dtype, device=a.device)

    def run():
        for e in range(E):
            rows = (ids == e).nonzero(as_tuple=True)[0]  # (token, slot) rows of expert e; host sync
            if rows.numel():
                out[rows] = a[rows // topk] @ w[e].t()
        return out

    return Launch(fn=run, out=out, graph_safe=False)


register(
    Variant(
        "torch_moe_loop",
        "moe_ref",
        ("fp16", "bf16"),
        "MoE reference: per-expert gather + torch matmul (cuBLAS) + scatter; syncs with the host",
        _make,
        moe=True,
        baseline=BASELINES["torch_moe_loop"].dtypes,
    )
)
