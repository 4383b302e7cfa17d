"""The engine files `tune --export ... --export-only` writes from the shipped configs alone, without a GPU, for each
model whose engine-mappable configs are committed.  The expected names are worked here from the engines' rule
(vLLM's get_config_file_name: E = experts on one rank, N = the expert's intermediate size over its TP, the GPU's
name with '_' for ' ', `dtype=fp8_w8a8` for fp8, `block_shape=[128,128]` for block scales) and the models' configs."""

from __future__ import annotations

import json

import pytest
from test_cli import invoke

from gemmbench.configs import tuning

H100 = "device_name=NVIDIA_H100_80GB_HBM3"
BLOCK = "dtype=fp8_w8a8,block_shape=[128,128]"
VLLM_KEYS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]  # its tuner's counts

CASES = [  # (tune options, the file vLLM looks for)
    # DeepSeek-V3: 256 routed experts, moe_intermediate_size 2048; TP 8 splits each expert (2048 / 8 = 256)
    ("--shapes deepseek-v3 --tp 8 --dtype fp8 --scaling block", f"E=256,N=256,{H100},{BLOCK}.json"),
    # DP 8 + EP 8: whole experts, 256 / 8 = 32 a rank
    ("--shapes deepseek-v3 --tp 1 --dp 8 --ep 8 --dtype fp8 --scaling block", f"E=32,N=2048,{H100},{BLOCK}.json"),
    # Qwen3-30B-A3B: 128 experts, moe_intermediate_size 768, one GPU
    ("--shapes qwen3-30b-a3b --dtype bf16", f"E=128,N=768,{H100}.json"),
    ("--shapes qwen3-30b-a3b --dtype fp8 --scaling block", f"E=128,N=768,{H100},{BLOCK}.json"),
    # Qwen3-235B-A22B: 128 experts, moe_intermediate_size 1536: 1536 / 8 = 192, 1536 / 4 = 384
    ("--shapes qwen3-235b-a22b --tp 8 --dtype bf16", f"E=128,N=192,{H100}.json"),
    ("--shapes qwen3-235b-a22b --tp 4 --dtype fp8 --scaling block", f"E=128,N=384,{H100},{BLOCK}.json"),
    # Mixtral 8x7B: 8 experts, intermediate_size 14336 (/ 2 = 7168); Mixtral 8x22B: 16384 (/ 8 = 2048, / 4 = 4096)
    ("--shapes mixtral-moe --tp 2 --dtype bf16", f"E=8,N=7168,{H100}.json"),
    ("--shapes mixtral-moe --tp 2 --dtype fp8 --fp8-accum fast", f"E=8,N=7168,{H100},dtype=fp8_w8a8.json"),
    ("--shapes mixtral-8x22b-moe --tp 8 --dtype bf16", f"E=8,N=2048,{H100}.json"),
    ("--shapes mixtral-8x22b-moe --tp 4 --dtype fp8 --fp8-accum fast", f"E=8,N=4096,{H100},dtype=fp8_w8a8.json"),
]


@pytest.mark.parametrize("options,name", CASES, ids=[c[1].split(",device")[0] + c[0].split()[1] for c in CASES])
def test_the_shipped_configs_export_as_the_file_vllm_looks_for(tmp_path, monkeypatch, options, name):
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "none"))  # the shipped configs only
    res = invoke("tune", *options.split(), "--variants", "triton_moe_grouped", "--export", "vllm", tmp_path / "out",
                 "--export-only")  # fmt: skip
    assert res.exit_code == 0, res.output
    written = json.loads((tmp_path / "out" / name).read_text())
    assert list(written)[0] == "triton_version" and [int(k) for k in list(written)[1:]] == VLLM_KEYS


def test_deepseek_v3_with_sglangs_shared_expert_exports_e_257(tmp_path, monkeypatch):
    """SGLang folds DeepSeek-V3's shared expert into the routed ones (257 experts, top 9): its file name says E=257,
    in the folder of the Triton version the configs were tuned with, w2's entries in the `_down` file beside it."""
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "none"))
    res = invoke("tune", *"--shapes deepseek-v3 --tp 8 --layout sglang --dtype fp8 --scaling block".split(),
                 "--variants", "triton_moe_grouped", "--export", "sglang", tmp_path / "out", "--export-only")  # fmt: skip
    assert res.exit_code == 0, res.output
    name = f"E=257,N=256,{H100},dtype=fp8_w8a8,block_shape=[128, 128]"
    folder = tmp_path / "out" / "configs" / "triton_3_6_0"
    assert sorted(p.name for p in folder.iterdir()) == [f"{name}.json", f"{name}_down.json"]
