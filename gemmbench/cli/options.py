"""The options several commands take, each declared once (its type, flag, help and --help panel), and the names of the
panels that group a command's options in --help.  An option only one command takes is declared in that command's
module, in one of these panels."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gemmbench.cli.formats import LayoutChoice, OutputFormat, choice, format_option
from gemmbench.dtypes import FP8_ACCUM_ENGINES  # light (no torch): the contracts' engine counterparts, written once

# The --help panels, in the order a command's options first name them
WHAT = "What to run"
SHARDING = "Sharding"
TIMING = "Timing"
OUTPUT = "Output"
COMPARISON = "Comparison"
ENGINE = "Engine/reliability"
ROWS = "Rows"  # which rows of result files plot and report draw

# ---------------------------------------------------------------- what to run: run, profile, tune, layer

Shapes = Annotated[
    str, typer.Option(help="Built-in shape set (see `gemmbench list shapes`) or a YAML path.", rich_help_panel=WHAT)
]
Variants = Annotated[
    Optional[str], typer.Option(help="Comma-separated globs, e.g. 'triton_*,cublas_fp8'.", rich_help_panel=WHAT)
]
Dtype = Annotated[str, typer.Option(help="Comma-separated: fp16, bf16, fp8.", rich_help_panel=WHAT)]
Ms = Annotated[
    Optional[str],
    typer.Option(help="M values (tokens): '1,16,64', 'decode', 'prefill', 'all'.", rich_help_panel=WHAT),
]
Routing = Annotated[
    str, typer.Option(help="MoE token routing, comma-separated: uniform, skewed, one-expert.", rich_help_panel=WHAT)
]
Scaling = Annotated[
    Optional[str],
    typer.Option(
        help="fp8 scales, comma-separated: tensor (default), row, block (activations 1x128, weights 128x128), "
        "block-ue8m0 (the same, power-of-two scales). fp8 only.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
Fp8Accum = Annotated[
    Optional[str],
    typer.Option(
        "--fp8-accum",
        help="fp8 accumulation contracts, comma-separated: "
        + "; ".join(f"{name} ({engines})" for name, engines in FP8_ACCUM_ENGINES.items())
        + ". Default: precise. Each fp8 problem runs once per contract; fp8 only (block scales have no fast).",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
Plugins = Annotated[
    Optional[list[Path]],
    typer.Option(help="Python file registering extra variants (repeatable).", rich_help_panel=WHAT),
]
Seed = Annotated[int, typer.Option(help="Seed of the random inputs.", rich_help_panel=WHAT)]
ImportConfig = Annotated[
    Optional[list[str]],
    typer.Option(
        metavar="ENGINE:FILE",
        help="Run triton_moe_grouped with an engine's config file (vllm:E=8,N=7168,device_name=….json, or sglang:…) "
        "as the variant triton_moe_grouped@ENGINE, its entry for each M picked by the engine's rule. Repeatable.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]

# ---------------------------------------------------------------- sharding: the deployment whose rank 0 is measured

Tp = Annotated[
    str,
    typer.Option(
        help="Tensor parallelism, e.g. 8 or 1,2,4,8: column-parallel GEMMs divide N, row-parallel K.",
        rich_help_panel=SHARDING,
    ),
]
Ep = Annotated[
    str,
    typer.Option(
        help="Expert parallelism, e.g. 8 or 1,8: whole experts over N of the TP x DP GPUs; rank 0's ceil(E/N) experts "
        "and the tokens routed to them. vLLM runs EP 1 or TP x DP.",
        rich_help_panel=SHARDING,
    ),  # fmt: skip
]
Dp = Annotated[
    str,
    typer.Option(
        help="Data parallelism, e.g. 8 or 1,8: groups of --tp GPUs, each with its own M tokens; expert GEMMs see the "
        "M x DP tokens of all groups.",
        rich_help_panel=SHARDING,
    ),  # fmt: skip
]
Layout = Annotated[
    LayoutChoice,
    typer.Option(
        parser=choice(LayoutChoice, "--layout"),
        help="Whose GEMMs: vllm (QKV, gate+up, MLA q_a+kv_a fused), sglang (the same; DeepSeek-V3's shared expert "
        "folded into the experts; DP attention), hf (the checkpoint's tensors, one GPU). docs/USAGE.md: Sharding.",
        rich_help_panel=SHARDING,
    ),
]

# ---------------------------------------------------------------- the engine: run, tune, profile, layer

Borrow = Annotated[
    bool,
    typer.Option(
        "--borrow",
        help="Where this GPU has no stored Triton config, run those of the nearest GPU of its compute capability "
        "(README: Which configs a run uses) instead of searching.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
GpuName = Annotated[
    Optional[str],
    typer.Option(
        "--gpu",
        help="Say what a run on this GPU would use, without it: a name of the Hopper parts table, e.g. 'NVIDIA H200' "
        "(README: Which configs a run uses).  Default: this machine's GPU; with --dry-run on a machine without one, "
        "NVIDIA H200.",
        rich_help_panel=WHAT,
    ),  # fmt: skip
]
Gpus = Annotated[
    Optional[str],
    typer.Option(
        help="Run on these GPUs of this host at once, one worker each: 'all' or 0,1,... A cell that faults costs only "
        "itself. With --shard, the shard's cells are split across them.",
        rich_help_panel=ENGINE,
    ),  # fmt: skip
]
CellTimeout = Annotated[
    Optional[float],
    typer.Option(
        help="Seconds one phase of a cell (compile, make, check, warm-up, a batch of samples, a tuning candidate) "
        "may go silent before its worker is stopped and the cell recorded as 'error: timeout after N s (phase)'; "
        "the sweep goes on with a fresh worker. Default: max(300, 20 x --budget); 0: no limit.",
        rich_help_panel=ENGINE,
    ),
]

# ---------------------------------------------------------------- output and comparison

Force = Annotated[
    bool,
    typer.Option(
        help="Replace the --out files that exist (without it: refused, nothing written).", rich_help_panel=OUTPUT
    ),
]
AcrossGpus = Annotated[
    bool,
    typer.Option(
        help="Compare cells run on different physical GPUs (gpu_uuid); otherwise they are other-gpu.",
        rich_help_panel=COMPARISON,
    ),
]

# ---------------------------------------------------------------- the rows plot and report draw

RESULTS_HELP = "Run files or profile tables (.parquet), or folders of them."
Results = Annotated[list[Path], typer.Argument(help=RESULTS_HELP, show_default=False)]
RowBaseline = Annotated[
    Optional[str],
    typer.Option(
        help="Variant speedups are measured against (default: cuBLAS of each row's dtype; torch_moe_loop for MoE).",
        rich_help_panel=ROWS,
    ),
]
RowShapes = Annotated[
    Optional[str],
    typer.Option(
        help="Comma-separated globs on the GEMM id (attn_qkv) or the shape set (llama70b-attn).",
        rich_help_panel=ROWS,
    ),
]
RowVariants = Annotated[
    Optional[str],
    typer.Option(
        help="Comma-separated globs: the variants drawn (a baseline still counts when it is not drawn).",
        rich_help_panel=ROWS,
    ),
]
RowDtype = Annotated[
    Optional[str],
    typer.Option(help="Comma-separated: fp16, bf16, fp8 (default: all).", rich_help_panel=ROWS),
]
RowTp = Annotated[
    Optional[str],
    typer.Option(help="Tensor-parallel degrees, e.g. 8 or 1,8 (default: all).", rich_help_panel=ROWS),
]
RowGpu = Annotated[
    Optional[str],
    typer.Option(
        help="The GPU whose rows to use (its name, or part of it: 'H100'); needed when RESULTS hold several.",
        rich_help_panel=ROWS,
    ),
]


# `--format` of the commands that print tables or one JSON document (docs/USAGE.md: JSON output)
DocFormat = Annotated[
    OutputFormat,
    format_option("table, or json: one JSON document on stdout (docs/USAGE.md: JSON output).", OUTPUT),
]
