"""`gemmbench layer` (registered on cli.app): one decoder layer's GEMMs, eager vs CUDA graph; the work is in
gemmbench.layer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import _dtypes, _load_plugins, _tp_list, err, fail, out, progress_bar


def layer(
    model: Annotated[
        str,
        typer.Option(
            help="llama3-70b, mixtral-8x7b, mixtral-8x22b, a built-in shape set, a shape-set "
            "YAML or a Hugging Face config.json: its GEMMs but lm_head form the layer."
        ),
    ],
    tp: Annotated[str, typer.Option(help="Tensor-parallel degrees, comma-separated.")] = "1",
    dtype: Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.")] = "bf16",
    m: Annotated[str, typer.Option(help="M values (tokens): '1,16,64', 'decode', 'prefill'.")] = "decode",
    variants: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated globs tried in order per GEMM (the first that "
            "runs it wins), or GEMM=VARIANT to pin one, e.g. "
            "'triton_splitk_atomic,moe_w13=triton_moe_splitk'. Default: "
            "cuBLAS, and triton_moe_col for MoE GEMMs."
        ),
    ] = None,
    best_from: Annotated[
        Optional[list[Path]],
        typer.Option(
            help="Run files: per GEMM and M the fastest variant there (cold rows; nearest M if absent). Repeatable."
        ),
    ] = None,
    layers: Annotated[int, typer.Option(help="Layer copies (distinct weights) launched back to back per sample.")] = 1,
    budget: Annotated[
        float, typer.Option(help="Seconds of eager + graph sampling per layer at most (after >= 10 samples each).")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    out_path: Annotated[
        Path, typer.Option("--out", help="Folder for <run_id>.parquet, or a .parquet file path.")
    ] = Path("results/layers"),
    plugin: Annotated[
        Optional[list[Path]], typer.Option(help="Python file registering extra variants (repeatable).")
    ] = None,
) -> None:
    """Time one decoder layer's GEMMs end to end: eager Python launches vs one CUDA graph, and the kernel sum."""
    import torch

    if not torch.cuda.is_available():  # read when a kernel module is imported: before the registry loads them
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from gemmbench import layer as L
    from gemmbench import registry, shapes, store
    from gemmbench.device import detect, provenance
    from gemmbench.runner import cpu_too_large, new_run_id
    from gemmbench.store import StoreError, load

    if variants is not None and best_from:
        raise fail("give --variants or --best-from, not both")
    if layers < 1:
        raise fail(f"--layers must be at least 1, got {layers}")
    if not budget > 0 or budget == float("inf"):
        raise fail(f"--budget must be a positive number of seconds, got {budget}")
    dev = detect()
    try:
        sset = L.resolve_model(model)
        m_values = shapes.parse_m_list(m)
        _load_plugins(plugin or [])
        notes: dict = {}
        if best_from:
            choose, notes = L.best_chooser(load(L.run_files(best_from)), dev)
        else:
            choose = L.chooser(variants or L.DEFAULT_VARIANTS, dev, L.layer_gemms(sset))
        plans = [
            (t, d, M, L.steps_for(L.layer_problems(sset, M, d, t), choose))
            for t in _tp_list(tp)
            for d in _dtypes(dtype)
            for M in m_values
        ]
    except (shapes.ShapeError, registry.RegistryError, L.LayerError, StoreError) as exc:
        raise fail(str(exc)) from None
    gpu = dev.kind == "cuda"
    if not gpu:
        reason = cpu_too_large([s.problem for *_, steps in plans for s in steps if s.is_gemm])
        if reason:
            raise fail(f"no CUDA GPU here, so this would be the CPU path, and {reason}")
        err.print(
            "[bold yellow]No CUDA GPU: CPU path.[/] Host wall times of CPU launches; no kernel events and no "
            "CUDA graph (graph mode skipped).",
            highlight=False,
        )
    run_id = new_run_id(f"layer-{sset.name}")
    path = out_path if out_path.suffix == ".parquet" else out_path / f"{run_id}.parquet"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"--out {out_path}: cannot create the folder ({exc.strerror})") from None
    for label, note in notes.items():
        err.print(escape(f"--best-from {label}: {note}"), highlight=False)

    rows: list = []
    with progress_bar() as progress:
        bar = progress.add_task("building", total=len(plans))
        for t, d, M, steps in plans:
            label = f"{sset.name} tp{t} {d} M{M}"
            progress.update(bar, description=label)
            meta = dict(
                provenance(),
                run_id=run_id,
                timestamp=_now(),
                model=model,
                shape_set=sset.name,
                tp=t,
                dtype=d,
                M=M,
                layers=layers,
                l2_state="cold at layer start",
                timing_mode="wall",
            )
            rows += _one_layer(L, meta, steps, seed, "cuda" if gpu else "cpu", layers, budget, label)
            try:
                store.write_layer_table(path, rows)  # after every layer: an interrupted sweep keeps what it measured
            except OSError as exc:
                raise fail(f"cannot write {path}: {exc}") from None
            progress.advance(bar)
    _print(rows)
    err.print(escape(f"Results: {path}"), highlight=False)


def _one_layer(L, meta: dict, steps, seed: int, device: str, layers: int, budget: float, label: str) -> list:
    """Build, check and time one layer; a failure is recorded in its rows with the reason and the sweep goes on."""
    import torch

    built, checks = [], []
    try:
        copies = [L.build(steps, seed + 7919 * i, device) for i in range(layers)]
        built = copies[0]
        checks = L.check(built)
        wrong = [c for c in checks if not c["ok"]]
        if wrong:
            reason = "; ".join(f"{c['step']}: {c['detail']}" for c in wrong)
            return L.rows_for(meta, steps, built, None, "wrong", reason, checks)
        return L.rows_for(meta, steps, built, L.measure(copies, budget, label), "ok", None, checks)
    except Exception as exc:  # a fault, a failed launch, a variant's bug: this layer only, the sweep goes on
        text = str(exc).strip().splitlines()
        return L.rows_for(meta, steps, built, None, "error", f"{type(exc).__name__}: {text[0] if text else ''}", checks)
    finally:
        built = copies = None  # noqa: F841  the next layer needs the memory
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _fmt(v, spec: str = ".1f") -> str:
    return "" if v is None or v != v else format(v, spec)


def _print(rows: list) -> None:
    """One table per (TP, dtype): a line per M; then each step's kernel time."""
    import pandas as pd

    df = pd.DataFrame(rows)
    for (t, d), g in df.groupby(["tp", "dtype"], sort=False):
        table = Table(
            title=f"{g['shape_set'].iloc[0]} layer, tp {t}, {d}: µs per layer "
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
            table.add_row(
                str(r["M"]),
                escape(str(r["variant"])),
                _fmt(r.get("kernel_us")),
                _fmt(r.get("eager_us")),
                _fmt(r.get("graph_us")),
                _fmt(r.get("gap_us")),
                _fmt(r.get("graph_gap_us")),
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
