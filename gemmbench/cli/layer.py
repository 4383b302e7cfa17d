"""`gemmbench layer` (registered on cli.app): one decoder layer's GEMMs, eager vs CUDA graph; the work is in
gemmbench.engine.layer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import (
    err,
    fail,
    out,
    positive_budget,
    progress_bar,
    warn,
    watchdog,
)  # fmt: skip
from gemmbench.cli.engines import import_configs
from gemmbench.cli.formats import LayoutChoice, OutputFormat, print_json
from gemmbench.cli.options import (
    OUTPUT,
    TIMING,
    WHAT,
    CellTimeout,
    DocFormat,
    Dp,
    Ep,
    Force,
    Fp8Accum,
    ImportConfig,
    Layout,
    Ms,
    Plugins,
    Scaling,
    Seed,
    Tp,
)  # fmt: skip
from gemmbench.engine import plan
from gemmbench.engine.pool import Pool, PoolError
from gemmbench.engine.worker_process import WorkerOptions
from gemmbench.measure import timing_modes
from gemmbench.results.run_file import lock, output_path, refuse_existing

# the options only `layer` takes (those it shares: cli.options), by --help panel
LayerModel = Annotated[
    str,
    typer.Option(
        help="llama3-70b, mixtral-8x7b, mixtral-8x22b, a built-in shape set (deepseek-v3, qwen3-30b-a3b, "
        "llama4-maverick, gpt-oss-120b, ...), a shape-set YAML or a Hugging Face config.json: its GEMMs but lm_head "
        "form the layer; a model with dense and MoE layers (DeepSeek-V3, Llama-4 Maverick) gets one of each.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
LayerDtype = Annotated[
    Optional[str],
    typer.Option(help="Comma-separated: fp16, bf16, fp8. Default: bf16 (fp16 on the CPU path).", rich_help_panel=WHAT),
]
LayerVariants = Annotated[
    Optional[str],
    typer.Option(
        help="Comma-separated globs tried in order per GEMM (the first that runs it wins), or GEMM=VARIANT "
        "to pin one, e.g. 'triton_splitk_atomic,moe_w13=triton_moe_splitk'. Default: cuBLAS, and "
        "triton_moe_col for MoE GEMMs.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
BestFrom = Annotated[
    Optional[list[Path]],
    typer.Option(
        help="Run files: per GEMM and M the fastest variant there (cold rows; nearest M if absent). Repeatable.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
Layers = Annotated[
    int,
    typer.Option(help="Layer copies (distinct weights) launched back to back per sample.", rich_help_panel=TIMING),
]
LayerBudget = Annotated[
    float,
    typer.Option(
        help="Seconds of eager + graph sampling per layer at most (after >= 10 samples each).", rich_help_panel=TIMING
    ),
]
LayerOut = Annotated[
    Path, typer.Option("--out", help="Folder for <run_id>.parquet, or a .parquet file path.", rich_help_panel=OUTPUT)
]


def layer(
    model: LayerModel, variants: LayerVariants = None, best_from: BestFrom = None, dtype: LayerDtype = None,
    m: Ms = "decode", scaling: Scaling = None, fp8_accum: Fp8Accum = None, plugin: Plugins = None,
    import_config: ImportConfig = None,
    seed: Seed = 0, tp: Tp = "1", dp: Dp = "1", ep: Ep = "1", layout: Layout = LayoutChoice.vllm,
    layers: Layers = 1, budget: LayerBudget = 1.0, out_path: LayerOut = Path("results/layers"), force: Force = False,
    cell_timeout: CellTimeout = None, fmt: DocFormat = OutputFormat.table,
) -> None:  # fmt: skip
    """Time one decoder layer's GEMMs end to end: eager Python launches vs one CUDA graph, and the kernel sum."""
    import torch  # heavy, as store (pandas) is

    from gemmbench.results import store

    if not torch.cuda.is_available():  # read when a kernel module is imported: before the registry loads them
        os.environ.setdefault("TRITON_INTERPRET", "1")
    # the CPU path's Triton interpreter computes bf16 tl.dot wrongly: there the default layer is fp16
    dtype = dtype or ("bf16" if torch.cuda.is_available() else "fp16")
    if variants is not None and best_from:
        raise fail("give --variants or --best-from, not both")
    if layers < 1:
        raise fail(f"--layers must be at least 1, got {layers}")
    budget = positive_budget(budget)
    watchdog_s = watchdog(cell_timeout, budget)
    if out_path.suffix == ".parquet":
        refuse_existing([out_path], force)
    _, imported = import_configs(import_config, None)  # pinned (moe_w13=triton_moe_grouped@vllm) or in a glob
    sset, plans, notes = _plans(model, plan.deployment(tp, dp, ep, layout), dtype, m, variants, best_from, plugin, scaling,
                                fp8_accum)  # fmt: skip
    gpu = _device_path(plans)
    run_id = store.new_run_id(f"layer-{sset.name}")
    path = output_path(out_path, run_id)
    lock(path)  # one writer: a second layer (or run) on the same file is refused
    if path.exists() and not force:  # written while this one planned
        refuse_existing([path], force)
    for label, note in notes.items():
        err.print(escape(f"--best-from {label}: {note}"), highlight=False)
    from gemmbench.engine.tasks.layer_task import cell  # heavy (pandas, torch)

    cells = [cell(sset, model, run_id, one, seed, layers, budget) for one in plans]
    worker = WorkerOptions(timing_modes.default(gpu), plugins=plugin or [], cpu=not gpu, env=imported,
                           watchdog_s=watchdog_s)  # fmt: skip
    rows = _sweep(cells, path, worker)
    if fmt is OutputFormat.json:  # the layer table's rows: the layer's own and each step's (docs/USAGE.md)
        print_json({"schema": "gemmbench.layer/1", "run_id": run_id, "file": str(path), "rows": rows})
    else:
        _print(rows)
    for r in rows:  # a step whose first variants failed: which ran instead, and why
        if r.get("fallback"):
            err.print(escape(f"M {r['M']} {r['gemm']}: {r['variant']} ran, after {r['fallback']}"), highlight=False,
                      soft_wrap=True)  # fmt: skip
    err.print(escape(f"Results: {path}"), highlight=False)


def _plans(model, dep, dtype, m, variants, best_from, plugin, scaling=None, fp8_accum=None) -> tuple:
    """(shape set, [(tp, ep, dp, layout, dtype, scaling, fp8_accum, M, layer kind, steps)], --best-from notes) of the
    options, or a one-line error.  A 16-bit dtype's layer runs once, unscaled and "none", whatever --scaling and
    --fp8-accum ask (they apply to fp8 only); a block-scaled fast fp8 layer is left out (dtypes.NO_FAST_FOR_BLOCKS)."""
    from gemmbench import dtypes, registry, shapes
    from gemmbench.engine import (
        layer_plan as P,  # heavy (pandas, torch), as device and store are; the rest not at --help
    )
    from gemmbench.measure.device import detect
    from gemmbench.results.store import StoreError, load

    dev = detect()
    dtype_names = plan.dtype_names(dtype)
    scalings = plan.scaling_names(scaling, dtype_names)
    accums = plan.fp8_accum_names(fp8_accum, dtype_names)
    dtype_runs = [(d, s, a) for d in dtype_names
                  for s in (scalings if dtypes.get(d).scaled else [dtypes.REFERENCE_SCALING])  # a 16-bit one: "none"
                  for a in (accums if dtypes.get(d).scaled else [dtypes.REFERENCE_FP8_ACCUM])  # a 16-bit one: "none"
                  if not dtypes.fp8_accum_excluded(s, a)]  # fmt: skip
    if not dtype_runs:
        raise fail(f"--fp8-accum {fp8_accum} --scaling {scaling}: {dtypes.NO_FAST_FOR_BLOCKS}")
    try:
        sset = P.resolve_model(model)
        plan.set_warnings(sset, warn)
        m_values = shapes.parse_m_list(m)
        plan.load_plugins(plugin)
        notes: dict = {}
        if best_from:
            choose, notes = P.best_chooser(load(P.run_files(best_from)), dev)
        else:
            choose = P.chooser(variants or P.DEFAULT_VARIANTS, dev, P.layer_gemms(sset, dep.layout))
        plans = [
            (
                t,
                e,
                dp,
                dep.layout,
                d,
                s,
                a,
                M,
                kind,
                P.steps_for(P.layer_problems(sset, M, d, t, e, kind, s, dp, dep.layout, a), choose),
            )  # fmt: skip
            for t, dp, e in plan.combinations(sset, dep, warn)
            for d, s, a in dtype_runs
            for M in m_values
            for kind in P.layer_kinds(sset)
        ]
    except (shapes.ShapeError, registry.RegistryError, P.LayerError, StoreError) as exc:
        raise fail(str(exc)) from None
    return sset, plans, notes


def _device_path(plans: list) -> bool:
    """True on a GPU; on the CPU, refuses a layer too large for it and says what the CPU path measures."""
    import torch  # heavy

    if torch.cuda.is_available():
        return True
    reason = plan.cpu_too_large([s.problem for *_, steps in plans for s in steps if s.is_gemm], "--model")
    if reason:
        raise fail(f"no CUDA GPU here, so this would be the CPU path, and {reason}")
    err.print(
        "[bold yellow]No CUDA GPU: CPU path.[/] Host wall times of CPU launches; no kernel events and no "
        "CUDA graph (graph mode skipped).",
        highlight=False,
    )
    return False


def _sweep(cells: list, path: Path, worker) -> list:
    from gemmbench.engine.tasks.layer_task import LayerSink  # heavy (pandas, torch)

    with progress_bar(eta=True) as progress:
        bar = progress.add_task("building", total=len(cells))
        sink = LayerSink(
            path,
            begin_hook=lambda text: progress.update(bar, description=escape(text)),
            advance=lambda: progress.advance(bar),
            note_hook=lambda text: progress.console.print(escape(text), highlight=False),
        )
        try:
            with Pool(worker, sink) as pool:
                pool.run(cells)
        except OSError as exc:
            progress.stop()
            raise fail(f"cannot write {path}: {exc}") from None
        except PoolError as exc:
            raise fail(f"{exc} ({len(sink.rows)} rows saved to {path})") from None
        except KeyboardInterrupt:
            progress.stop()
            raise fail(f"interrupted: {len(sink.rows)} finished rows are in {path}", 130) from None
    return sink.rows


def _fmt(v, spec: str = ".1f") -> str:
    return "" if v is None or v != v else format(v, spec)


def _gap(v) -> str:
    """A launch gap; N/A below zero (timing noise, not a cost: metrics.gap_note)."""
    from gemmbench.results.metrics import gap_below_zero  # not at --help (numpy)

    return "N/A" if gap_below_zero(v) else _fmt(v)


def _print(rows: list) -> None:
    """One table per (layer kind, TP, EP, DP, layout, dtype, scaling, fp8 accumulation): a line per M; then each
    step's kernel time."""
    import pandas as pd  # heavy

    from gemmbench.dtypes import fp8_accum, label

    df = pd.DataFrame(rows)
    # rows of one kind of layer, or from before expert parallelism, scalings or accumulation contracts, may lack these
    df = df.assign(layer_kind=df["layer_kind"].fillna("") if "layer_kind" in df else "", ep=df.get("ep", 1),
                   dp=df.get("dp", 1), layout=df.get("layout", "vllm"),
                   scaling=df["scaling"].fillna("") if "scaling" in df else "",
                   fp8_accum=df["fp8_accum"].astype(object).fillna(df["dtype"].map(fp8_accum)) if "fp8_accum" in df
                   else df["dtype"].map(fp8_accum))  # fmt: skip
    keys = ["layer_kind", "tp", "ep", "dp", "layout", "dtype", "scaling", "fp8_accum"]
    for (kind, t, e, dp, layout, d, s, a), g in df.groupby(keys, sort=False):
        par = f"tp {t}{f', ep {e}' if e > 1 else ''}{f', dp {dp}' if dp > 1 else ''}"
        table = Table(
            title=f"{g['shape_set'].iloc[0]}{f' {kind}' if kind else ''} layer, {par}"
            f"{f', {layout} layout' if layout != 'vllm' else ''}, {label(d, s, a)}: µs per layer "
            f"({int(g['layers'].iloc[0])} layer copies per sample)"
        )
        for col in ("M", "variants", "kernels", "eager", "graph", "gap eager", "gap graph", "graph speedup", "status"):
            table.add_column(col, justify="right" if col not in ("variants", "status") else "left")
        for _, r in g[g["part"] == "layer"].iterrows():
            status = (
                r["status"]
                if r["status"] != "ok"
                else ("ok" if pd.notna(r.get("graph_us")) else f"ok; no graph: {r.get('graph_reason')}")
            )
            if r["status"] != "ok":
                status += f": {r.get('reason')}"
            elif pd.notna(r.get("gap_note")):  # a gap below zero: shown as N/A, and why
                status += f"; {r['gap_note']}"
            table.add_row(
                str(r["M"]),
                escape(str(r["variant"])),
                _fmt(r.get("kernel_us")),
                _fmt(r.get("eager_us")),
                _fmt(r.get("graph_us")),
                _gap(r.get("gap_us")),
                _gap(r.get("graph_gap_us")),
                _fmt(r.get("graph_speedup"), ".2f") + ("x" if pd.notna(r.get("graph_speedup")) else ""),
                escape(str(status)),
            )
        out.print(table)
        steps = g[(g["part"] == "step")]
        if "kernel_us" in steps and steps["kernel_us"].notna().any():
            modes = ", ".join(sorted(steps["timing_mode"].dropna().unique()))
            table = Table(title=f"kernel time per step, µs (each alone, cold L2; timing {modes})")
            names = list(dict.fromkeys(steps["gemm"]))
            table.add_column("M", justify="right")
            for n in names:
                table.add_column(n, justify="right")
            for M, s in steps.groupby("M", sort=True):
                by = dict(zip(s["gemm"], s["kernel_us"], strict=False))
                vs = dict(zip(s["gemm"], s["variant"], strict=False))
                table.add_row(str(M), *[f"{_fmt(by.get(n))} {escape(str(vs.get(n, '')))}" for n in names])
            out.print(table)
