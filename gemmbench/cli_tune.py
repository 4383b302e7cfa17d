"""`gemmbench tune` (registered on cli.app): search the Triton variants' configs and store the winners; the work is
in gemmbench.tuning."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gemmbench.cli import _dtypes, _load_plugins, _problems, _tp_list, app, err, fail, out


@app.command()
def tune(
    shapes: Annotated[str, typer.Option(help="Built-in shape set or a YAML path.")],
    variants: Annotated[str, typer.Option(help="Comma-separated globs of tunable (Triton) variants.")] = "triton_*",
    dtype: Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.")] = "fp8,bf16",
    m: Annotated[Optional[str], typer.Option(help="M values; each is tuned at its bucket (1..16 -> 16, then powers of 2).")] = None,
    tp: Annotated[str, typer.Option(help="Tensor-parallel degrees, comma-separated, e.g. '1,2,4,8'.")] = "1",
    plugin: Annotated[Optional[list[Path]], typer.Option(help="Python file registering extra variants (repeatable).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    skip_stored: Annotated[bool, typer.Option(help="Leave (variant, shape, M bucket)s that already have a stored config.")] = False,
) -> None:
    """Search each Triton variant's config space per (GPU, N, K, dtype, M bucket); store the winners as JSON."""
    from gemmbench import registry, shapes as shapes_mod, tuning

    tps = _tp_list(tp)
    try:
        sset = shapes_mod.load(shapes)
        m_values = shapes_mod.parse_m_list(m) if m is not None else None
        # configs are stored per shape, not per routing: tuned on uniform routing
        problems = _problems(sset, _dtypes(dtype), m_values, tps, ["uniform"])
        _load_plugins(plugin or [])
        chosen = [v for v in registry.select(variants) if v.tunable is not None]
    except (shapes_mod.ShapeError, registry.RegistryError) as exc:
        raise fail(str(exc)) from None
    if not chosen:
        raise fail(f"--variants {variants!r} selects no tunable variant (the Triton ones are)")
    import torch

    if not torch.cuda.is_available():
        raise fail("gemmbench tune needs a CUDA GPU: configs are measured on, and stored for, one GPU")
    from gemmbench.check import reference
    from gemmbench.device import detect
    from gemmbench.inputs import make_inputs

    dev = detect()
    # one job per (problem at its M bucket, variant): M = 1..16 share a bucket, so they are tuned once
    seen, jobs = set(), []
    for p in problems:
        p = p.with_(M=tuning.m_bucket(p.M, p.is_moe))
        for v in chosen:
            key = (v.name, p.label, p.tp)
            if skip_stored and (found := tuning.stored(v.name, p, dev.name)) and found[1]["bucket"] == p.M:
                continue
            if key not in seen and not v.unsupported_reason(p, dev):
                seen.add(key)
                jobs.append((p, v))
    if not jobs:
        if skip_stored:
            err.print("every selected (variant, shape, M bucket) already has a stored config")
            return
        raise fail("no selected variant runs these problems here")
    results = Table(title=f"tuned on {dev.name} (cold L2) -> {tuning.configs_root() / tuning.gpu_dirname(dev.name)}")
    for col in ("variant", "GEMM", "N", "K", "dtype", "M bucket", "µs", "config", "tried"):
        results.add_column(col)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as progress:
        bar = progress.add_task("tuning", total=len(jobs))
        inputs = ref = None
        last = None
        for p, v in jobs:
            progress.update(bar, description=f"{p.label}  {v.name}")
            if (p.label, v.fp8_scaling) != last:  # inputs and reference shared by the variants of a problem
                inputs = make_inputs(p, seed, "cuda", scaling=v.fp8_scaling)
                ref = reference(p, inputs)
                last = (p.label, v.fp8_scaling)
            try:
                best, path, tried = tuning.tune_and_store(v.tunable, p, inputs, ref)
            except tuning.TuningError as exc:
                err.print(escape(f"{v.name} {p.label}: {exc}"), highlight=False)
                progress.advance(bar)
                continue
            except RuntimeError as exc:  # a faulting config: the CUDA context is gone, stop here
                raise fail(f"{v.name} {p.label}: {str(exc).splitlines()[0]} (configs stored so far are kept)", 1) from None
            except KeyboardInterrupt:
                progress.stop()
                raise fail("interrupted: the configs stored so far are kept", 130) from None
            short = " ".join(f"{k}={val}" for k, val in best.config.items() if k not in ("GROUP_M",))
            results.add_row(v.name, p.gemm, str(p.N), str(p.K), p.dtype, str(p.M), f"{best.time_us:.2f}", short, str(tried))
            progress.advance(bar)
    out.print(results)
