"""`gemmbench profile`: the command (registered on cli.app); the work is in gemmbench.profile.sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import err, fail, out, progress_bar, select_cells


def _fmt(value, spec: str) -> str:
    return "" if value is None or value != value else format(value, spec)


def profile(
    shapes: Annotated[str, typer.Option(help="Built-in shape set (see `gemmbench list shapes`) or a YAML path.")],
    ncu_: Annotated[bool, typer.Option("--ncu", help="Profile under Nsight Compute (hardware counters).")] = False,
    nsys_: Annotated[
        bool, typer.Option("--nsys", help="Profile under Nsight Systems (launch path, kernel times).")
    ] = False,
    variants: Annotated[
        Optional[str], typer.Option(help="Comma-separated globs, e.g. 'triton_splitk_*,cublas_fp8'.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.")] = "fp8,bf16",
    m: Annotated[Optional[str], typer.Option(help="M values (tokens): '1,16,64', 'decode', 'prefill', 'all'.")] = None,
    tp: Annotated[str, typer.Option(help="Tensor parallelism, e.g. 8 or 1,2,4,8.")] = "1",
    routing: Annotated[
        str, typer.Option(help="MoE token routing, comma-separated: uniform, skewed, one-expert.")
    ] = "uniform",
    plugin: Annotated[
        Optional[list[Path]], typer.Option(help="Python file registering extra variants (repeatable).")
    ] = None,
    metrics: Annotated[Optional[str], typer.Option(help="Extra raw ncu metric names, comma-separated.")] = None,
    ncu_set: Annotated[Optional[str], typer.Option("--set", help="ncu section set to collect too, e.g. full.")] = None,
    out_path: Annotated[
        Path, typer.Option("--out", help="Folder for <run_id>-profile.parquet and the reports.")
    ] = Path("profiles"),
    join: Annotated[
        Optional[list[Path]],
        typer.Option(help="A run's Parquet file(s): also write its rows with the profile's columns."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds one cell's profile may take.")] = 600.0,
) -> None:
    """Profile each selected cell once, in a child process: warm-up and tuning outside its NVTX range, one eager
    launch inside it.  Writes one row per kernel (and a summed row) with ncu_* / nsys_* columns."""
    from gemmbench import registry, store
    from gemmbench.profile import ncu, nsys
    from gemmbench.profile import sweep as prof
    from gemmbench.runner import new_run_id

    if not (ncu_ or nsys_):
        raise fail("say which profiler: --ncu (Nsight Compute counters), --nsys (Nsight Systems), or both")
    if not 0 < timeout < float("inf"):  # subprocess's timeout overflows on inf
        raise fail(f"--timeout must be a positive number of seconds, got {timeout}")
    if out_path.suffix == ".parquet" or out_path.is_file():
        raise fail(f"--out {out_path}: give a folder (the profile table and the reports go inside it)")
    runs = None
    if join:
        try:
            runs = store.load(join)
        except store.StoreError as exc:
            raise fail(f"--join: {exc}") from None
    sset, cells = select_cells(shapes, variants, dtype, m, tp, routing, seed, plugin)

    import torch

    if not torch.cuda.is_available():
        raise fail("gemmbench profile needs a CUDA GPU (the profilers read its counters and trace its kernels)", 1)
    run_id = new_run_id(sset.name)
    opts = prof.ProfileOptions(
        out_dir=out_path,
        run_id=run_id,
        use_ncu=ncu_,
        use_nsys=nsys_,
        seed=seed,
        plugins=plugin or [],
        ncu_set=ncu_set,
        timeout_s=timeout,
        extra_metrics=[x.strip() for x in (metrics or "").split(",") if x.strip()],
    )
    try:
        profiler = prof.CellProfiler(opts)
    except (ncu.NcuError, nsys.NsysError) as exc:
        raise fail(str(exc), 1) from None
    path = out_path / f"{run_id}-profile.parquet"
    rows = []
    with progress_bar() as progress:
        bar = progress.add_task("profiling", total=sum(len(n) for _, n in cells))
        try:
            for problem, names in cells:
                for name in names:
                    progress.update(bar, description=f"{problem.label}  {name}")
                    rows += profiler.cell(problem, registry.get(name))
                    store.write_profile_table(path, rows)
                    progress.advance(bar)
        except prof.ProfileError as exc:
            progress.stop()
            raise fail(f"{exc} ({len(rows)} rows saved to {path})" if rows else str(exc), 1) from None
        except KeyboardInterrupt:
            progress.stop()
            raise fail(f"interrupted: {len(rows)} finished rows are in {path}", 130) from None
    _print(rows)
    cells_done = [r for r in rows if r["status"] == "ok" and r.get("ncu_kernel") in (None, ncu.SUM_KERNEL)]
    err.print(
        escape(
            f"{len(cells_done)} of {sum(len(n) for _, n in cells)} cells profiled. Profile: {path}; "
            f"reports: {out_path / run_id}"
        ),
        highlight=False,
    )
    if runs is not None:
        joined = out_path / f"{run_id}-joined.parquet"
        import pyarrow as pa

        store.write_table(
            joined, pa.Table.from_pandas(prof.join(runs, store.load_profile_tables([path])), preserve_index=False)
        )
        err.print(escape(f"the run's rows with the profile's columns: {joined}"), highlight=False)
    if not cells_done:
        raise typer.Exit(1)  # nothing could be profiled: every row above says why


def _print(rows: list[dict]) -> None:
    from gemmbench.profile.ncu import SUM_KERNEL

    t = Table(title="profile (ncu: one eager launch, caches flushed, clocks not locked)")
    for col in (
        "GEMM",
        "M",
        "N",
        "K",
        "dtype",
        "variant",
        "kernels",
        "ncu µs",
        "DRAM GB/s",
        "% peak",
        "L2 hit %",
        "DRAM/model",
        "nsys range µs",
        "status",
    ):
        t.add_column(col, justify="right" if col[0].isupper() or col[0] in "%n" else "left")
    for r in rows:
        if r.get("ncu_kernel") not in (None, SUM_KERNEL):
            continue
        t.add_row(
            r["gemm"],
            str(r["M"]),
            str(r["N"]),
            str(r["K"]),
            r["dtype"],
            r["variant"],
            _fmt(r.get("ncu_kernels"), "d"),
            _fmt(r.get("ncu_duration_us"), ".1f"),
            _fmt(r.get("ncu_dram_gbps"), ".0f"),
            _fmt(r.get("ncu_dram_pct_peak"), ".0f"),
            _fmt(r.get("ncu_l2_hit_pct"), ".0f"),
            _fmt(r.get("ncu_dram_traffic_ratio"), ".2f"),
            _fmt(r.get("nsys_range_us"), ".1f"),
            r["status"] if r["status"] == "ok" else escape(f"{r['status']}: {r.get('reason') or ''}"[:80]),
        )
    out.print(t)
