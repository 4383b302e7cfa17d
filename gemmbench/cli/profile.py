"""`gemmbench profile`: the command (registered on cli.app); the work is in gemmbench.profile.sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import (
    err,
    fail,
    out,
    progress_bar,
    warn,
    watchdog,
)  # fmt: skip
from gemmbench.cli.engines import import_configs
from gemmbench.cli.formats import LayoutChoice, OutputFormat, print_json
from gemmbench.cli.options import (
    OUTPUT,
    CellTimeout,
    DocFormat,
    Dp,
    Dtype,
    Ep,
    Fp8Accum,
    ImportConfig,
    Layout,
    Ms,
    Plugins,
    Routing,
    Scaling,
    Seed,
    Shapes,
    Tp,
    Variants,
)  # fmt: skip
from gemmbench.dtypes import label
from gemmbench.engine import plan
from gemmbench.profile import ncu
from gemmbench.profile.ncu import SUM_KERNEL

PROFILED_SLOWDOWN = 20  # the default --cell-timeout under ncu, as a multiple of a run's


def _fmt(value, spec: str) -> str:
    return "" if value is None or value != value else format(value, spec)


# the options only `profile` takes (those it shares: cli.options), by --help panel
PROFILER = "Profiler"
Ncu = Annotated[
    bool, typer.Option("--ncu", help="Profile under Nsight Compute (hardware counters).", rich_help_panel=PROFILER)
]
Nsys = Annotated[
    bool,
    typer.Option("--nsys", help="Profile under Nsight Systems (launch path, kernel times).", rich_help_panel=PROFILER),
]
Metrics = Annotated[
    Optional[str], typer.Option(help="Extra raw ncu metric names, comma-separated.", rich_help_panel=PROFILER)
]
NcuSet = Annotated[
    Optional[str],
    typer.Option(
        "--set",
        help="ncu section set to collect too, e.g. full (which also fills the stall and SM-balance columns: "
        "ncu_issue_cycles, ncu_stall_top, ncu_sm_balance).",
        rich_help_panel=PROFILER,
    ),
]
ProfileOut = Annotated[
    Path,
    typer.Option("--out", help="Folder for <run_id>-profile.parquet and the reports.", rich_help_panel=OUTPUT),
]
Join = Annotated[
    Optional[list[Path]],
    typer.Option(
        help="A run's Parquet file(s): also write its rows with the profile's columns.", rich_help_panel=OUTPUT
    ),
]


def profile(
    shapes: Shapes, variants: Variants = None, dtype: Dtype = "fp8,bf16", m: Ms = None, routing: Routing = "uniform",
    scaling: Scaling = None, fp8_accum: Fp8Accum = None, plugin: Plugins = None, import_config: ImportConfig = None,
    seed: Seed = 0, tp: Tp = "1", dp: Dp = "1", ep: Ep = "1", layout: Layout = LayoutChoice.vllm,
    ncu_: Ncu = False, nsys_: Nsys = False, metrics: Metrics = None, ncu_set: NcuSet = None,
    out_path: ProfileOut = Path("profiles"), join: Join = None, cell_timeout: CellTimeout = None,
    fmt: DocFormat = OutputFormat.table,
) -> None:  # fmt: skip
    """Profile each selected cell once under Nsight Compute or Nsight Systems: one row per kernel, and a summed row.

    Each cell runs in a child process: warm-up and tuning outside its NVTX range, one eager launch inside it. The rows carry ncu_* / nsys_* columns."""
    from gemmbench.results import store  # heavy (pandas, pyarrow)

    if not (ncu_ or nsys_):
        raise fail("say which profiler: --ncu (Nsight Compute counters), --nsys (Nsight Systems), or both")
    # a profiler replays each kernel many times: its phases get PROFILED_SLOWDOWN times the limit of a run's
    timeout = watchdog(cell_timeout, factor=PROFILED_SLOWDOWN if ncu_ else 1.0)
    if out_path.suffix == ".parquet" or out_path.is_file():
        raise fail(f"--out {out_path}: give a folder (the profile table and the reports go inside it)")
    runs = _runs_to_join(join)
    dep = plan.deployment(tp, dp, ep, layout)
    variants, imported = import_configs(import_config, variants)  # profiled beside the kernel they configure
    sset, cells = plan.cells(shapes, variants, dtype, m, routing, seed, plugin, dep, warn, scaling, fp8_accum)
    run_id = store.new_run_id(sset.name)
    profiler = _profiler(out_path, run_id, ncu_, nsys_, seed, plugin, ncu_set, timeout, metrics, imported)
    path = out_path / f"{run_id}-profile.parquet"
    rows = _sweep(profiler, cells, path)
    if fmt is OutputFormat.json:  # the profile table's rows: per kernel, and each cell's sum (docs/RESULTS.md)
        print_json({"schema": "gemmbench.profile/1", "run_id": run_id, "file": str(path), "reports": str(out_path / run_id),
                    "rows": rows})  # fmt: skip
    else:
        _print(rows)
    done = [r for r in rows if r["status"] == "ok" and r.get("ncu_kernel") in (None, SUM_KERNEL)]
    total = sum(len(n) for _, n in cells)
    err.print(escape(f"{len(done)} of {total} cells profiled. Profile: {path}; reports: {out_path / run_id}"),
              highlight=False)  # fmt: skip
    if runs is not None:
        _join(runs, path, out_path / f"{run_id}-joined.parquet")
    if not done:
        raise typer.Exit(1)  # nothing could be profiled: every row above says why


def _runs_to_join(join: Optional[list[Path]]):
    from gemmbench.results import store  # heavy (pandas, pyarrow)

    try:
        return store.load(join) if join else None
    except store.StoreError as exc:
        raise fail(f"--join: {exc}") from None


def _profiler(out_path, run_id, use_ncu, use_nsys, seed, plugin, ncu_set, timeout, metrics, env):
    import torch  # heavy, as profile.sweep (pandas, torch) is; nsys not at --help (sqlite3)

    from gemmbench.profile import nsys
    from gemmbench.profile import sweep as prof

    if not torch.cuda.is_available():
        raise fail("gemmbench profile needs a CUDA GPU (the profilers read its counters and trace its kernels)", 1)
    extra = [x.strip() for x in (metrics or "").split(",") if x.strip()]
    opts = prof.ProfileOptions(out_dir=out_path, run_id=run_id, use_ncu=use_ncu, use_nsys=use_nsys, seed=seed,
                               plugins=plugin or [], ncu_set=ncu_set, timeout_s=timeout, extra_metrics=extra,
                               env=env)  # fmt: skip
    try:
        return prof.CellProfiler(opts)
    except (ncu.NcuError, nsys.NsysError) as exc:
        raise fail(str(exc), 1) from None


def _sweep(profiler, cells: list, path: Path) -> list:
    """Every cell through the profiler, the table rewritten after each; a sweep that cannot go on keeps its rows."""
    from gemmbench import registry
    from gemmbench.profile.sweep import ProfileError
    from gemmbench.results import side_tables  # side_tables, profile.sweep: heavy (pandas); registry not at --help

    rows: list = []
    with progress_bar(eta=True) as progress:
        bar = progress.add_task("profiling", total=sum(len(n) for _, n in cells))
        try:
            for problem, names in cells:
                for name in names:
                    progress.update(bar, description=f"{problem.label}  {name}")
                    rows += profiler.cell(problem, registry.get(name))
                    side_tables.write_profile_table(path, rows)
                    progress.advance(bar)
        except ProfileError as exc:
            progress.stop()
            raise fail(f"{exc} ({len(rows)} rows saved to {path})" if rows else str(exc), 1) from None
        except KeyboardInterrupt:
            progress.stop()
            raise fail(f"interrupted: {len(rows)} finished rows are in {path}", 130) from None
    return rows


def _join(runs, path: Path, joined: Path) -> None:
    import pyarrow as pa  # heavy, as store and profile.sweep (pandas) are

    from gemmbench.profile.sweep import join
    from gemmbench.results import side_tables, store

    table = pa.Table.from_pandas(join(runs, side_tables.load_profile_tables([path])), preserve_index=False)
    store.write_table(joined, table)
    err.print(escape(f"the run's rows with the profile's columns: {joined}"), highlight=False)


def _print(rows: list[dict]) -> None:
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
            label(r["dtype"], r.get("scaling"), r.get("fp8_accum")),
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
