"""`gemmbench ceilings`: this GPU's measured ceilings (gemmbench.measure.ceilings), from the cache or measured now, with every
rung of the compute ladder so a user sees where the GPU peaks."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import err, fail, out
from gemmbench.cli.formats import OutputFormat, print_json
from gemmbench.cli.options import DocFormat

Remeasure = Annotated[bool, typer.Option(help="Measure again, replacing this GPU's cached ceilings.")]
Stream = Annotated[
    bool, typer.Option(help="The bandwidth ladder of --timing stream (distinct buffers back to back); else cold.")
]


def ceilings(remeasure: Remeasure = False, stream: Stream = False, fmt: DocFormat = OutputFormat.table) -> None:
    """Measure (or read from the cache) this GPU's bandwidth and compute ceilings; print both ladders."""
    import torch  # heavy

    from gemmbench.measure import ceilings as measured  # heavy (torch)
    from gemmbench.measure import compute_ladder

    if not torch.cuda.is_available():
        raise fail("no CUDA GPU here: ceilings are measured on a GPU (a CPU run has no roofline)")
    got = measured.ceilings("stream" if stream else "cold", remeasure=remeasure)
    assert got is not None  # a CUDA GPU is there
    rungs = compute_ladder.from_rows(got.compute_ladder)
    if fmt is OutputFormat.json:
        print_json({"schema": "gemmbench.ceilings/1", "mode": got.mode, "key": got.key,
                    "cache": str(measured.cache_path(got.key)), "peak_tflops": got.peak_tflops,
                    "compute_ladder": [dict(dtype=r.dtype, M=r.m, N=r.n, K=r.k, median_us=r.median_us, p10_us=r.fast_us,
                                            tflops=r.tflops, skipped=r.skipped) for r in rungs],
                    "bandwidth_ladder": [{"bytes": b, "gbps": g} for b, g in got.bandwidth_ladder]})  # fmt: skip
        return
    t = Table(title="compute ladder: cuBLAS, zero operands, cold L2; TFLOP/s at each rung's fastest tenth of "
              "samples (p10 µs); the peak is each dtype's best (*)")  # fmt: skip
    for col in ("dtype", "M x N x K", "median µs", "p10 µs", "TFLOP/s"):
        t.add_column(col, justify="left" if col in ("dtype", "M x N x K") else "right")
    for r in rungs:
        shape = f"{r.m} x {r.n} x {r.k}"
        if r.tflops is None:
            t.add_row(r.dtype, shape, "-", "-", f"skipped: {escape(r.skipped or '')}")
            continue
        star = " *" if r.tflops == got.peak_tflops.get(r.dtype) else ""
        t.add_row(r.dtype, shape, f"{r.median_us:.1f}", f"{r.fast_us:.1f}", f"{r.tflops:.1f}{star}")
    out.print(t)
    bw = Table(title=f"bandwidth ladder: streaming read, {got.mode} timing")
    bw.add_column("bytes", justify="right")
    bw.add_column("GB/s", justify="right")
    for nbytes, gbps in got.bandwidth_ladder:
        bw.add_row(f"{nbytes / 2**20:.0f} MiB", f"{gbps:.0f}")
    out.print(bw)
    key = ", ".join(f"{k} {v}" for k, v in got.key.items())
    err.print(escape(f"cache: {measured.cache_path(got.key)} ({key})"), highlight=False)
