"""What names a cell: the columns a row takes from its problem and its variant, and the key runs, profiles and
comparisons match on; light (no pandas), as the worker processes build rows with it."""

from __future__ import annotations

from gemmbench.results.metrics import flops


def cell_columns(problem, variant) -> dict:
    """The columns that name a cell: its problem (a shapes.Problem) and its variant (a registry.Variant)."""
    return dict(
        shape_set=problem.shape_set,
        gemm=problem.gemm,
        M=problem.M,
        N=problem.N,
        K=problem.K,
        E=problem.E,
        topk=problem.topk,
        routing=problem.routing if problem.is_moe else None,
        tp=problem.tp,
        ep=problem.ep,
        dp=problem.dp,
        layout=problem.layout,
        dtype=problem.dtype,
        scaling=problem.scaling,
        fp8_accum=problem.fp8_accum,
        variant=variant.name,
        family=variant.family,
        variant_source=variant.source,
        # under expert parallelism the FLOPs depend on the routing: an ok row has them (tasks), others none
        flops=flops(problem) if variant.gemm and problem.ep == 1 else None,
    )


# The columns that name a cell (cell_columns' problem and variant): runs, profiles and comparisons match on them.
CELL_KEY = ("shape_set", "gemm", "M", "N", "K", "E", "topk", "routing", "tp", "ep", "dp", "layout", "dtype", "scaling",
            "fp8_accum", "variant")  # fmt: skip
