"""The fused-MoE config files of the inference engines (vLLM, SGLang): their names, their folders, their entries, the
engine's rule for picking an entry.  Pure (no torch): `tune --export` writes them (engine_export.py), `run
--import-config` reads them (engine_import.py), and provenance.Provenance names an imported config's source by
InferenceEngine.

The format, as the engines' code reads and writes it (read with the `search` tool, public code):
  vLLM `vllm/model_executor/layers/fused_moe/fused_moe.py` (commit 13cb3e44373b): `get_config_file_name`,
  `get_moe_configs`, `try_get_optimal_moe_config`, `invoke_fused_moe_kernel`, `fused_experts_impl`;
  `benchmarks/kernels/benchmark_moe.py` (commit 71acd375e8b6): `save_configs`, the token counts of `main`;
  SGLang `python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py` (commit c050f40d99a1) and its
  successor `.../moe_runner/triton_utils/fused_moe_triton_config.py` (commit 02c7c97fea5f: the `_down` files and
  SGLANG_MOE_CONFIG_DIR), the shipped `.../configs/triton_3_4_0/` files.

- Name: `E=<E>,N=<N>,device_name=<GPU>[,dtype=<dtype>][,block_shape=[<n>,<k>]].json`.  E: the experts one rank holds
  (`w2.shape[0]`); N: the intermediate size per partition (`w2.shape[2]`, "after silu_and_mul"): w13's output is 2N,
  w2's K is N.  No K, no top-k: one file serves every model with the same E and N.  device_name:
  `torch.cuda.get_device_name()` with spaces as `_`; vLLM names every H200 model `NVIDIA_H200`.  dtype: none for
  fp16 and bf16 (`_get_config_dtype_str` returns None), `fp8_w8a8` for fp8 weights and activations; block_shape: the
  fp8 weight blocks.  SGLang writes `block_shape=[128, 128]` (a space: no `.replace(" ", "")`), may add
  `,per_channel_quant=True`, and reads an optional second file, `<name>_down.json`, for w2 (BLOCK_SIZE_M overridden
  to the w13 entry's: both GEMMs share one alignment; revision 7386515d7500 asserts they are equal instead).
- Folder: vLLM reads `$VLLM_TUNED_CONFIG_FOLDER/<name>` first, then its shipped `configs/<name>`.  SGLang reads
  `<dir>/configs/triton_<X_Y_Z>/<name>` (X_Y_Z: triton.__version__, dots as `_`), <dir> being SGLANG_MOE_CONFIG_DIR
  where set, else its own module's folder (the variable replaces the shipped files, it does not add to them); where
  its version's file is missing it takes the same name from the other `configs/triton_*` folders it finds, newest
  version first (each folder name parsed as dotted integers; the older file: a fixed list of versions, no variable);
  a missing `_down` file means w13's entries for w2.
- JSON: `{"<tokens>": {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}}`;
  vLLM's tuner also writes `"triton_version"` first, which vLLM drops on reading (SGLang would read it as a token
  count and fail).  vLLM launches with SPLIT_K = 1 whatever an entry says.  vLLM's tuner writes TOKEN_COUNTS.
- Entry for M tokens: `min(keys, key=lambda x: abs(x - M))` over the keys in file order (a tie: the first).  vLLM
  uses that one entry for both GEMMs of the layer (w13 and w2); SGLang picks the `_down` file's entry by the same rule.
- Kernel: one program per (block of rows, N tile), walked in Triton tutorial 03's grouped order with GROUP_SIZE_M:
  gemmbench's `grouped` schedule (gemmbench/kernels/schedules.py), so an imported config runs `triton_moe_grouped`.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from gemmbench.choices import Choice


class InferenceEngine(Choice):
    """The inference engines whose fused-MoE config files gemmbench writes and runs."""

    vllm = "vllm"
    sglang = "sglang"


FP8 = "fp8_w8a8"
# the token counts vLLM's tuner writes (benchmark_moe.py main), so the keys every exported file holds
TOKEN_COUNTS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
BLOCK = (128, 128)  # the only block shape gemmbench's block scaling has (dtypes.SCALINGS: 1x128, 128x128)
# an engine entry's keys -> the fields of gemmbench's MoE config (gemmbench/kernels/fused_moe.py MoeConfig)
KEYS = {
    "BLOCK_SIZE_M": "BLOCK_M",
    "BLOCK_SIZE_N": "BLOCK_N",
    "BLOCK_SIZE_K": "BLOCK_K",
    "GROUP_SIZE_M": "GROUP_M",
    "num_warps": "num_warps",
    "num_stages": "num_stages",
}
# keys an engine reads beside those: vLLM overwrites SPLIT_K with 1 before the launch; SGLang pops USE_TMA from a
# _down entry (true: its TMA down-projection path, another kernel)
IGNORED = {InferenceEngine.vllm: ("SPLIT_K",), InferenceEngine.sglang: ("USE_TMA",)}
NAME = re.compile(
    r"E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<device>[^,]+?)(?:,dtype=(?P<dtype>[^,]+?))?"
    r"(?:,block_shape=\[(?P<bn>\d+),(?P<space> ?)(?P<bk>\d+)\])?(?P<pcq>,per_channel_quant=True)?(?P<down>_down)?\.json"
)
FORM = {  # the file name, for messages
    InferenceEngine.vllm: "E=<E>,N=<N>,device_name=<GPU>[,dtype=fp8_w8a8][,block_shape=[128,128]].json",
    InferenceEngine.sglang: "E=<E>,N=<N>,device_name=<GPU>[,dtype=fp8_w8a8][,block_shape=[128, 128]][_down].json",
}


def device_name(engine: InferenceEngine, gpu: str) -> str:
    """The device_name of an engine's file name for a GPU (torch.cuda.get_device_name())."""
    name = gpu.replace(" ", "_")
    if engine is InferenceEngine.vllm and "H200" in name.split("_"):
        return "NVIDIA_H200"  # vLLM: "Set device_name to H200 if a device from the H200 family is detected"
    return name


def engine_dtype(dtype: str, scaling: str) -> tuple[Optional[str], bool]:
    """(the file name's dtype, whether it has block_shape) of one of gemmbench's dtypes and fp8 scalings.  ValueError
    for an fp8 scaling the engines' fused Triton path has no file for (row: gemmbench's fused MoE kernel has none)."""
    if dtype in ("fp16", "bf16"):
        return None, False
    if dtype == "fp8" and scaling == "tensor":
        return FP8, False
    if dtype == "fp8" and scaling in ("block", "block-ue8m0"):  # ue8m0: the same kernel, scales rounded to 2^k
        return FP8, True
    raise ValueError(f"{dtype} scaled by {scaling} has no fused-MoE config file in the engines")


def file_name(
    engine: InferenceEngine, E: int, N: int, device: str, dtype: Optional[str], block: bool, down: bool = False
) -> str:
    """The engine's file name (get_config_file_name): vLLM strips the space of `[128, 128]`, SGLang keeps it."""
    sep = ", " if engine is InferenceEngine.sglang else ","
    shape = f",block_shape=[{BLOCK[0]}{sep}{BLOCK[1]}]" if block else ""
    return f"E={E},N={N},device_name={device}{f',dtype={dtype}' if dtype else ''}{shape}{'_down' if down else ''}.json"


def sglang_folder(triton: str) -> str:
    """SGLang's folder for the files of one Triton version, under SGLANG_MOE_CONFIG_DIR: `configs/triton_3_6_0`.
    ValueError for a version SGLang's fallback could not parse (it reads every `triton_*` folder as dotted integers)."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", triton):
        raise ValueError(f"Triton {triton} is not a version SGLang's folder lookup can parse (dotted integers)")
    return f"configs/triton_{triton.replace('.', '_')}"


def to_entry(config: Any, group_m: Optional[int] = None) -> dict[str, int]:
    """A MoE config (tuning.KernelConfig) as an engine's entry; group_m: GROUP_SIZE_M where the variant's schedule
    fixes it (row-major: 1)."""
    values = config.to_dict()
    entry = {theirs: values[ours] for theirs, ours in KEYS.items()}
    if group_m is not None:
        entry["GROUP_SIZE_M"] = group_m
    return entry


def nearest_key(keys: list[int], M: int) -> int:
    """The engine's entry for M tokens (try_get_optimal_moe_config): the nearest key, the first in file order on a
    tie."""
    return min(keys, key=lambda x: abs(x - M))
