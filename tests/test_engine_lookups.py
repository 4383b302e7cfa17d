"""`tune --export` read back the way the engines read it: their file lookups, re-stated below from their public
source, must find each exported file where the README says to point them, and take for every one of vLLM's 18
token counts the entry gemmbench meant (the stored winner of the bucket a run's stored lookup takes for that many
tokens).  The stored configs are faked in a temporary config folder; nothing runs a kernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest
from test_cli import invoke
from test_engine_configs import TINY  # the tiny MoE block both files export from

from gemmbench.configs import config_files, tuning
from gemmbench.configs.inference_engines import TOKEN_COUNTS
from gemmbench.engine.plan import deployment, tunable
from gemmbench.engine.tasks import tune_task
from gemmbench.kernels.fused_moe import MoeConfig
from gemmbench.measure.device import DeviceInfo
from gemmbench.shapes import Problem

W13 = Problem("tiny-moe", "moe_w13", 1, 64, 32, "fp16", E=4, topk=2)
W2 = Problem("tiny-moe", "moe_w2", 1, 32, 32, "fp16", E=4, topk=2)
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # the MoE buckets `tune` stores, up to 4096
# by hand: the bucket each of vLLM's token counts takes, its own (MoE buckets are the powers of two at or above it)
BUCKET_OF = {1: 1, 2: 2, 4: 4, 8: 8, 16: 16, 24: 32, 32: 32, 48: 64, 64: 64, 96: 128, 128: 128, 256: 256, 512: 512,
             1024: 1024, 1536: 2048, 2048: 2048, 3072: 4096, 4096: 4096}  # fmt: skip
TRITON = "3.6.0"


def w13_entry(bucket: int) -> dict[str, int]:
    """The engines' entry for the fake w13 winner stored at `bucket`: GROUP_M tells the buckets apart."""
    i = BUCKETS.index(bucket)
    return {"BLOCK_SIZE_M": 16 if i < 6 else 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": i + 1,
            "num_warps": 4, "num_stages": 3}  # fmt: skip


def w2_entry(bucket: int) -> dict[str, int]:
    """The same for w2, whose BLOCK_M differs from w13's at some buckets (SGLang then runs w13's)."""
    i = BUCKETS.index(bucket)
    return {"BLOCK_SIZE_M": 16 if i < 4 else 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": i + 20,
            "num_warps": 8, "num_stages": 2}  # fmt: skip


def as_config(entry: dict[str, int]) -> MoeConfig:
    return MoeConfig.tile(entry["BLOCK_SIZE_M"], entry["BLOCK_SIZE_N"], entry["BLOCK_SIZE_K"], entry["num_warps"],
                          entry["num_stages"], GROUP_M=entry["GROUP_SIZE_M"])  # fmt: skip


# ---------------------------------------------------------------- the engines' lookups, re-stated


def _nearest(configs: dict[int, Any], M: int) -> Any:
    # both engines: min(keys, key=lambda x: abs(x - M)), the first key in the file on a tie
    return configs[min(configs.keys(), key=lambda x: abs(x - M))]


def vllm_entry(gpu: str, dtype: Optional[str], block: Optional[list[int]], M: int, tuned: Optional[Path],
               shipped: Path) -> Optional[dict]:  # fmt: skip
    """vLLM's entry for M tokens of the tiny block (E=4, N=32), None for its built-in default.  Re-stated from
    vllm/model_executor/layers/fused_moe/fused_moe.py: get_config_file_name (spaces of the device name as `_`, any
    H200 named NVIDIA_H200, `,dtype=` where there is one, `,block_shape=[n,k]` without its space where both are
    set), get_moe_configs (VLLM_TUNED_CONFIG_FOLDER's file, else the one in its own configs/ folder; the
    triton_version key dropped, the others read as token counts), try_get_optimal_moe_config (the nearest key)."""
    device = gpu.replace(" ", "_")
    if "H200" in device.split("_"):
        device = "NVIDIA_H200"
    name = f"E=4,N=32,device_name={device}" + (f",dtype={dtype}" if dtype else "")
    name += (",block_shape=" + str(block).replace(" ", "") if block and all(block) else "") + ".json"
    for folder in [f for f in (tuned, shipped) if f is not None]:
        if (folder / name).exists():
            table = json.loads((folder / name).read_text())
            table.pop("triton_version", None)
            return _nearest({int(k): v for k, v in table.items()}, M)
    return None


def sglang_entries(gpu: str, dtype: Optional[str], block: Optional[list[int]], M: int, triton: str,
                   config_dir: Optional[Path], module_dir: Path,
                   assert_equal_m: bool = False) -> tuple[Optional[dict], Optional[dict]]:  # fmt: skip
    """SGLang's (w13 entry, w2 entry) for M tokens, None for its default (w13) or for w13's entry (w2).  Re-stated
    from python/sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py: get_config_file_name (the
    device name's spaces as `_`, no H200 rule, `,block_shape=[n, k]` as Python prints the list, `_down` for w2),
    get_moe_configs (under SGLANG_MOE_CONFIG_DIR, else its own folder: configs/triton_<version, dots as _>/, and
    where that file is missing the same name in the other configs/triton_* folders, newest version first),
    try_get_optimal_moe_config (the nearest key in each file; w2's BLOCK_SIZE_M overridden to w13's, where another
    revision asserts the two are equal instead: assert_equal_m below)."""
    root = (config_dir or module_dir) / "configs"

    def table(down: bool) -> Optional[dict[int, Any]]:
        name = f"E=4,N=32,device_name={gpu.replace(' ', '_')}" + (f",dtype={dtype}" if dtype else "")
        name += (f",block_shape={block}" if block and all(block) else "") + ("_down" if down else "") + ".json"
        found = [d.name[len("triton_") :].replace("_", ".") for d in root.iterdir() if d.name.startswith("triton_")]
        newest_first = sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)
        for version in [triton] + [v for v in newest_first if v != triton]:
            path = root / f"triton_{version.replace('.', '_')}" / name
            if path.exists():
                return {int(k): v for k, v in json.loads(path.read_text()).items()}
        return None

    up, down = table(False), table(True)
    w13 = _nearest(up, M) if up else None
    w2 = dict(_nearest(down, M)) if down else None
    if w13 is not None and w2 is not None:
        if assert_equal_m:
            assert w2["BLOCK_SIZE_M"] == w13["BLOCK_SIZE_M"]
        w2["BLOCK_SIZE_M"] = w13["BLOCK_SIZE_M"]  # one moe_align_block_size sort serves both GEMMs
    return w13, w2


# ---------------------------------------------------------------- the export, read back

CASES = {  # dtype options -> (the GPU as torch names it, the file's dtype, its block shape)
    ("--dtype", "fp16"): ("NVIDIA H100 80GB HBM3", None, None),
    ("--dtype", "fp8", "--scaling", "block"): ("NVIDIA H200 NVL", "fp8_w8a8", [128, 128]),
}


def _store(tmp_path: Path, gpu: str, options: tuple[str, ...]) -> None:
    """Every bucket up to 4096 of both GEMMs, tuned with TRITON, in a temporary config folder."""
    for bucket in BUCKETS:
        for p, entry in ((W13, w13_entry(bucket)), (W2, w2_entry(bucket))):
            if "fp8" in options:
                p = p.with_(dtype="fp8", scaling="block")
            config_files.save("triton_moe_grouped", p.with_(M=bucket), gpu, as_config(entry), 10.0, {"triton": TRITON})
    (tmp_path / "tiny.yaml").write_text(TINY)


def _decoy(folder: Path, name: str) -> dict:
    """A file of the same name where the engine keeps its own, with another entry at every key."""
    entry = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 99, "num_warps": 8,
             "num_stages": 5}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({str(k): entry for k in TOKEN_COUNTS}))
    return entry


@pytest.mark.parametrize("options", CASES, ids=["fp16", "fp8-block"])
def test_each_engine_finds_the_export_and_takes_the_entry_gemmbench_meant(tmp_path, monkeypatch, options):
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    gpu, dtype, block = CASES[options]
    _store(tmp_path, gpu, options)
    for engine in ("vllm", "sglang"):
        res = invoke("tune", "--shapes", tmp_path / "tiny.yaml", *options, "--export", engine, tmp_path / engine,
                     "--export-only")  # fmt: skip
        assert res.exit_code == 0, res.output
    [vllm_file] = (tmp_path / "vllm").iterdir()
    vllm_shipped, sglang_module = tmp_path / "vllm-package" / "configs", tmp_path / "sglang-package"
    theirs = _decoy(vllm_shipped, vllm_file.name)
    [sglang_file] = [p for p in (tmp_path / "sglang" / "configs" / "triton_3_6_0").iterdir() if "_down" not in p.name]
    _decoy(sglang_module / "configs" / "triton_3_6_0", sglang_file.name)
    for M in TOKEN_COUNTS:
        up, down = w13_entry(BUCKET_OF[M]), w2_entry(BUCKET_OF[M])
        # vLLM: VLLM_TUNED_CONFIG_FOLDER=DIR before its own folder; one entry for both GEMMs, w13's
        assert vllm_entry(gpu, dtype, block, M, tmp_path / "vllm", vllm_shipped) == up, M
        # SGLang: SGLANG_MOE_CONFIG_DIR=DIR; w2 from the _down file, with w13's BLOCK_SIZE_M
        got = sglang_entries(gpu, dtype, block, M, TRITON, tmp_path / "sglang", sglang_module)
        assert got == (up, {**down, "BLOCK_SIZE_M": up["BLOCK_SIZE_M"]}), M
        # SGLang on another Triton finds no folder of its own version in DIR, and falls back to the export's
        assert sglang_entries(gpu, dtype, block, M, "3.7.0", tmp_path / "sglang", sglang_module) == got, M
        # the revision that asserts w2's BLOCK_SIZE_M equals w13's reads the same files without failing
        assert sglang_entries(gpu, dtype, block, M, TRITON, tmp_path / "sglang", sglang_module, True) == got, M
    # without the variables each engine reads its own shipped files; SGLang's variable replaces them
    assert vllm_entry(gpu, dtype, block, 16, None, vllm_shipped) == theirs
    assert sglang_entries(gpu, dtype, block, 16, TRITON, None, sglang_module) == (theirs, None)


def test_the_export_holds_vllms_token_counts_whichever_buckets_are_stored(tmp_path, monkeypatch):
    """Only buckets 1, 64 and 4096 stored: every key still there, each with the bucket a run's stored lookup takes
    (its own where stored, else the nearest in log2, the larger on a tie), which vLLM then finds at that key."""
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    for bucket in (1, 64, 4096):
        config_files.save("triton_moe_grouped", W13.with_(M=bucket), "NVIDIA H100 80GB HBM3",
                          as_config(w13_entry(bucket)), 10.0, {"triton": TRITON})  # fmt: skip
    (tmp_path / "tiny.yaml").write_text(TINY)
    res = invoke("tune", "--shapes", tmp_path / "tiny.yaml", "--dtype", "fp16", "--export", "vllm", tmp_path / "v",
                 "--export-only")  # fmt: skip
    assert res.exit_code == 0, res.output
    # by hand, in log2: 8 is 3 from 1 and 3 from 64 (the tie goes up); 512 is 3 from 64 and 3 from 4096
    near = {1: 1, 2: 1, 4: 1, 8: 64, 16: 64, 24: 64, 32: 64, 48: 64, 64: 64, 96: 64, 128: 64, 256: 64, 512: 4096,
            1024: 4096, 1536: 4096, 2048: 4096, 3072: 4096, 4096: 4096}  # fmt: skip
    for M in TOKEN_COUNTS:
        assert vllm_entry("NVIDIA H100 80GB HBM3", None, None, M, tmp_path / "v", tmp_path / "none") == w13_entry(
            near[M]
        ), M


def test_tune_m_with_vllms_token_counts_tunes_the_power_of_two_buckets(tmp_path):
    """`tune --m` with the 18 counts tunes 13 jobs per GEMM: 24, 48, 96, 1536 and 3072 fall in the buckets 32, 64,
    128, 2048 and 4096, so the export gives them those buckets' winners."""
    (tmp_path / "tiny.yaml").write_text(TINY)
    m = ",".join(map(str, TOKEN_COUNTS))
    problems, chosen = tunable(str(tmp_path / "tiny.yaml"), "triton_moe_grouped", "fp16", m,
                                        deployment("1", "1", "1", "vllm"), None, print)  # fmt: skip
    gpu = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", capability=(9, 0), sm_count=132)
    jobs = tune_task.jobs(problems, chosen, gpu)
    assert sorted({p.M for p, _ in jobs}) == list(BUCKETS) and len(jobs) == 2 * len(BUCKETS)
