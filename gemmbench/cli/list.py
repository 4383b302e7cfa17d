"""`gemmbench list shapes`, `gemmbench list variants` and `gemmbench list configs`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli.common import fail, out, warn
from gemmbench.cli.formats import LayoutChoice, OutputFormat, format_option, print_json
from gemmbench.cli.options import OUTPUT, WHAT, Borrow, Dp, Dtype, Ep, GpuName, Layout, Ms, Plugins, Tp, Variants
from gemmbench.engine import plan

list_app = typer.Typer(no_args_is_help=True, help="List shape sets, variants, or the configs a GPU would run.")


def _m_label(m_values: tuple) -> str:
    from gemmbench.shapes import PRESETS  # not at --help (yaml)

    for name, values in PRESETS.items():
        if tuple(m_values) == tuple(values):
            return f"{name} ({values[0]}..{values[-1]})"
    return ",".join(map(str, m_values))


Format = Annotated[
    OutputFormat,
    format_option("table, or json: one JSON document on stdout (docs/USAGE.md: JSON output).", panel=OUTPUT),
]


@list_app.command("shapes")
def list_shapes(fmt: Format = OutputFormat.table) -> None:
    """Built-in shape sets with their GEMMs and default M lists."""
    from gemmbench.models import shape_sets  # not at --help (yaml)

    sets = [shape_sets.load(name) for name in shape_sets.builtin_names()]
    if fmt is OutputFormat.json:
        print_json({"schema": "gemmbench.shapes/1", "sets": [_set_json(s) for s in sets]})
        return
    t = Table(title="shape sets (gemmbench run --shapes NAME; --m and --tp override)")
    for col in ("set", "GEMM", "N", "K", "E", "topk", "TP splits", "layer, role", "default M"):
        t.add_column(col)
    for s in sets:
        for i, g in enumerate(s.gemms):
            t.add_row(
                s.name if i == 0 else "",
                g.name,
                str(g.N),
                str(g.K),
                str(g.E) if g.is_moe else "",
                str(g.topk) if g.is_moe else "",
                {"column": "N", "row": "K"}.get(g.parallel, "-"),
                ", ".join(filter(None, (g.layer, g.role))),  # e.g. "moe, router"; empty: every layer
                _m_label(s.m_values) if i == 0 else "",
            )
        t.add_section()
    out.print(t)


def _set_json(s) -> dict:
    """A shape set as `list shapes --format json` has it (docs/USAGE.md: JSON output): sizes as the YAML gives them (before
    --tp and --ep divide them), E = topk = 1 for a dense GEMM, "" where a GEMM has no layer kind or role."""
    gemms = [{"id": g.name, "N": g.N, "K": g.K, "E": g.E, "topk": g.topk, "parallel": g.parallel, "layer": g.layer,
              "role": g.role} for g in s.gemms]  # fmt: skip
    return {"name": s.name, "description": s.description, "m": list(s.m_values), "gemms": gemms}


@list_app.command("variants")
def list_variants(
    plugin: Plugins = None,
    fmt: Format = OutputFormat.table,
) -> None:
    """Registered kernel variants: name, family, dtypes and what each does."""
    from gemmbench import registry  # not at --help (yaml, importlib.metadata)

    try:
        plan.load_plugins(plugin)
        variants = registry.all_variants()
    except registry.RegistryError as exc:
        raise fail(str(exc)) from None
    if fmt is OutputFormat.json:
        print_json({"schema": "gemmbench.variants/1", "variants": [_variant_json(v) for v in variants]})
        return
    t = Table(title="variants (gemmbench run --variants GLOB,...)")
    for col in ("variant", "family", "dtypes", "runs", "description"):
        t.add_column(col)
    for v in variants:
        src = "" if v.source == "builtin" else escape(f" [plugin {v.source}]")
        t.add_row(v.name, v.family, ",".join(v.dtypes), "MoE" if v.moe else "dense", escape(v.description) + src)
    out.print(t)


def _variant_json(v) -> dict:
    """A variant as `list variants --format json` has it (docs/USAGE.md: JSON output)."""
    return {
        "name": v.name,
        "family": v.family,
        "dtypes": list(v.dtypes),
        "scalings": list(v.scalings),  # the fp8 scalings it runs
        "fp8_accums": list(v.fp8_accums),  # the fp8 accumulation contracts it runs
        "kind": "moe" if v.moe else "dense",
        "baseline_of": list(v.baseline),  # the dtypes whose speedups of its kind are measured against it
        "tunable": v.tunable is not None,
        "source": v.source,  # "builtin", or the plugin file it came from
        "description": v.description,
    }


ConfigShapes = Annotated[
    Optional[str],
    typer.Option(
        "--shapes",
        help="A shape set: the config each Triton variant would take for each of its problems.  Without it: every "
        "stored config file the GPU would read, its own or borrowed.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]


@list_app.command("configs")
def list_configs(
    gpu: GpuName = None, shapes: ConfigShapes = None, variants: Variants = None, dtype: Dtype = "fp8,bf16",
    m: Ms = None, tp: Tp = "1", dp: Dp = "1", ep: Ep = "1", layout: Layout = LayoutChoice.vllm,
    borrow: Borrow = False, fmt: Format = OutputFormat.table,
) -> None:  # fmt: skip
    """The Triton configs a run on a GPU would use: its own, borrowed, searched earlier, or to search; no GPU needed."""
    from gemmbench.cli.target_gpu import target_gpu  # not at --help (torch)

    target = target_gpu(gpu, required=True)
    assert target is not None  # required: refused in one line otherwise
    rows = _config_rows(target, shapes, variants, dtype, m, plan.deployment(tp, dp, ep, layout), borrow)
    if fmt is OutputFormat.json:
        print_json({"schema": "gemmbench.configs/1", "gpu": target.name, "configs": rows})
        return
    title = f"configs a run on {target.name} would use" + (f" ({shapes})" if shapes else " (stored files)")
    t = Table(title=escape(title))
    columns = [k for k in (rows[0] if rows else {"variant": 0, "source": 0})]
    for col in columns:
        t.add_column(col)
    for r in rows:
        t.add_row(*(escape("" if r[c] is None else str(r[c])) for c in columns))
    out.print(t)


def _config_rows(target, shapes, variants, dtype, m, dep, borrow: bool) -> list[dict]:
    """One row per (Triton variant, problem) of a shape set, or per stored file the GPU would read."""
    from gemmbench import registry
    from gemmbench.configs import config_sources
    from gemmbench.measure.device import ON_THE_GPU  # torch: not at --help

    policy = config_sources.Policy(borrow=borrow)
    if shapes is None:
        return config_sources.files_for(target.name, target.part, variants, policy)
    _, cells = plan.cells(shapes, variants, dtype, m, "uniform", 0, None, dep, warn)
    rows = []
    for p, names in cells:
        for name in names:
            v = registry.get(name)
            why = v.declared_reason(p) or (v.supports(p, target.device) if v.supports else None)
            if v.tunable is None or (why and not why.startswith(ON_THE_GPU)):  # the GPU's own rules: predicted
                continue
            got = config_sources.predict(name, p, target.name, target.part, policy)
            rows.append({"variant": name, "gemm": p.gemm, "M": p.M, "N": p.N, "K": p.K, "E": p.local_experts,
                         "dtype": p.dtype, "scaling": p.scaling, **got})  # fmt: skip
    return rows
