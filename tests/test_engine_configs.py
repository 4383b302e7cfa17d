"""Fused-MoE configs to and from the inference engines: the engines' file names and entries (expected strings worked
out by hand from the engines' code, cited in gemmbench/configs/inference_engines.py), `tune --export` from a stored config
folder, export -> import round trips, `run --import-config` on a tiny MoE problem in Triton's interpreter, bad
files, the committed vLLM fixture, and why the grouped and row schedules map and the column-major one does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_cli import bad, invoke, text
from test_kernels import tile_order

from gemmbench import registry
from gemmbench.configs import config_files, engine_import, provenance, tuning
from gemmbench.configs.inference_engines import TOKEN_COUNTS, InferenceEngine, device_name, file_name, nearest_key
from gemmbench.kernels.fused_moe import MoeConfig
from gemmbench.measure.check import check_cell
from gemmbench.measure.inputs import make_inputs
from gemmbench.results.store import load
from gemmbench.shapes import Problem

DEV = "cuda" if torch.cuda.is_available() else "cpu"
H100 = "NVIDIA H100 80GB HBM3"
FIXTURE = (
    Path(__file__).parent / "fixtures" / "engine-configs" / "vllm" / "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"
)
# A tiny MoE block: hidden 32, intermediate 32 (w13: N = 2 x 32 = 64, K = 32; w2: N = 32, K = 32), 4 experts, top-2.
TINY = """name: tiny-moe
description: one tiny MoE block for the CPU
m: [3]
gemms:
  - {id: moe_w13, N: 64, K: 32, parallel: column, E: 4, topk: 2}
  - {id: moe_w2, N: 32, K: 32, parallel: row, E: 4, topk: 2}
"""
W13 = Problem("tiny-moe", "moe_w13", 3, 64, 32, "fp16", E=4, topk=2)
W2 = Problem("tiny-moe", "moe_w2", 3, 32, 32, "fp16", E=4, topk=2)


@pytest.fixture(autouse=True)
def no_leftover_imports():
    """An imported variant registered in this process would join later tests' globs (triton_*)."""
    yield
    for engine in InferenceEngine:
        registry.unregister(engine_import.variant_name(engine))


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A stored config folder for the tiny block on an H100: grouped winners at 1 and 4 tokens for both GEMMs, a
    faster row-major winner at 4 tokens for w13, and a w2 winner at 4 tokens that differs from w13's."""
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    about = {"triton": "3.6.0"}
    for p in (W13, W2):
        config_files.save(
            "triton_moe_grouped", p.with_(M=1), H100, MoeConfig.tile(16, 32, 32, 4, 3, GROUP_M=4), 9.0, about
        )
    config_files.save(
        "triton_moe_grouped", W13.with_(M=4), H100, MoeConfig.tile(16, 32, 64, 4, 3, GROUP_M=8), 20.0, about
    )
    config_files.save("triton_moe_row", W13.with_(M=4), H100, MoeConfig.tile(16, 64, 32, 8, 2), 12.0, about)
    config_files.save(
        "triton_moe_grouped", W2.with_(M=4), H100, MoeConfig.tile(32, 32, 32, 4, 4, GROUP_M=2), 15.0, about
    )
    (tmp_path / "tiny.yaml").write_text(TINY)
    return tmp_path


def export(tmp_path, engine: str, *extra):
    return invoke("tune", "--shapes", tmp_path / "tiny.yaml", "--dtype", "fp16", "--export", engine, tmp_path / "out",
                  "--export-only", *extra)  # fmt: skip


# ---------------------------------------------------------------- names and the entry rule


def test_file_names_are_the_engines_own():
    # vLLM get_config_file_name: f"E={E},N={N},device_name={name.replace(' ', '_')}" + ",dtype=..." +
    # f",block_shape={[128, 128]}".replace(" ", ""); SGLang the same without the replace (str([128, 128]) has a space)
    dev = device_name(InferenceEngine.vllm, H100)
    assert dev == "NVIDIA_H100_80GB_HBM3"
    assert file_name(InferenceEngine.vllm, 8, 7168, dev, None, False) == f"E=8,N=7168,device_name={dev}.json"
    assert (file_name(InferenceEngine.vllm, 256, 256, dev, "fp8_w8a8", True)
            == f"E=256,N=256,device_name={dev},dtype=fp8_w8a8,block_shape=[128,128].json")  # fmt: skip
    assert (file_name(InferenceEngine.sglang, 256, 256, dev, "fp8_w8a8", True, down=True)
            == f"E=256,N=256,device_name={dev},dtype=fp8_w8a8,block_shape=[128, 128]_down.json")  # fmt: skip
    # vLLM: '"H200" in device_name.split("_")' -> NVIDIA_H200; SGLang keeps the whole name
    assert device_name(InferenceEngine.vllm, "NVIDIA H200 NVL") == "NVIDIA_H200"
    assert device_name(InferenceEngine.sglang, "NVIDIA H200 NVL") == "NVIDIA_H200_NVL"


def test_the_entry_for_m_is_the_nearest_key_first_in_file_order():
    # try_get_optimal_moe_config: configs[min(configs.keys(), key=lambda x: abs(x - M))]
    assert nearest_key([1, 4, 64], 3) == 4  # |4 - 3| = 1 < |1 - 3| = 2
    assert nearest_key([1, 4, 64], 2) == 1  # |1 - 2| = 1 < |4 - 2| = 2
    assert nearest_key([1, 3], 2) == 1 and nearest_key([3, 1], 2) == 3  # a tie: min keeps the first it saw
    assert nearest_key([1, 4, 64], 10_000) == 64


def test_provenance_of_an_imported_config():
    p = provenance.Provenance("vllm", file="E=8,N=7168,device_name=X.json", key=4)
    assert p.to_dict() == {"source": "vllm", "file": "E=8,N=7168,device_name=X.json", "key": 4}
    for wrong in (dict(source="vllm"), dict(source="vllm", file="f", bucket=4), dict(source="stored", file="f", key=1)):
        with pytest.raises(ValueError, match="not a provenance"):
            provenance.Provenance(**wrong)


# ---------------------------------------------------------------- tune --export


def test_export_vllm_writes_w13s_winners_as_vllms_file(stored):
    res = export(stored, "vllm")
    assert res.exit_code == 0, res.output
    files = sorted(p.relative_to(stored / "out").as_posix() for p in (stored / "out").rglob("*.json"))
    assert files == ["E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json"]  # E per rank, N = w13 N / 2 = w2 K = 32
    # by hand: key 1 grouped (GROUP_M 4); bucket 4 row-major (12 us beats grouped's 20 us) with GROUP_SIZE_M 1, for
    # key 4 and every other key (bucket 2 is not stored: 2 is as near 4 as 1 in log2, and the tie goes up);
    # triton_version first, as vLLM's benchmark_moe.py save_configs writes it; indent 4 and a newline
    one = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 4, "num_warps": 4,
           "num_stages": 3}  # fmt: skip
    four = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 8,
            "num_stages": 2}  # fmt: skip
    want = {"triton_version": "3.6.0", **{str(k): one if k == 1 else four for k in TOKEN_COUNTS}}
    assert (stored / "out" / files[0]).read_text() == json.dumps(want, indent=4) + "\n"
    # w2's own winner at bucket 4 (32x32x32) is not w13's: a note says vLLM runs w13's there
    assert f"note: {files[0]}: w2's own winner differs at token counts 2, 4, 8, 16, 24," in text(res.stderr)
    assert "no stored bucket of their own for 2, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, " \
           "4096 (bucket 4's winner): the nearest in log2" in text(res.stderr)  # fmt: skip
    assert "1 … 4096 (18 keys, 2 buckets)" in text(res.stdout)  # the keys and the tuned buckets behind them
    assert f"reads them with VLLM_TUNED_CONFIG_FOLDER={(stored / 'out').resolve()}" in text(res.stderr)


def test_export_sglang_writes_w2_as_the_down_file_in_the_triton_folder(stored):
    res = export(stored, "sglang")
    assert res.exit_code == 0, res.output
    out = stored / "out" / "configs" / "triton_3_6_0"  # where SGLANG_MOE_CONFIG_DIR=out finds them
    assert sorted(p.name for p in out.iterdir()) == [
        "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json",
        "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3_down.json",
    ]
    up = json.loads((out / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json").read_text())
    assert list(up) == [str(k) for k in TOKEN_COUNTS]  # no triton_version: SGLang would read it as a token count
    down = json.loads((out / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3_down.json").read_text())
    # w2's stored winner at bucket 4 has BLOCK_SIZE_M 32, w13's 16: one alignment of the tokens serves both GEMMs,
    # so the file holds w13's 16 (SGLang replaces w2's or asserts they agree, by revision), and a note says so
    assert down["4"] == {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2,
                         "num_warps": 4, "num_stages": 4}  # fmt: skip
    assert "_down.json: w13's BLOCK_SIZE_M written for w2 at token counts 2, 4, 8," in text(res.stderr)


def test_export_block_fp8_names(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    for p in (W13, W2):
        p = p.with_(dtype="fp8", scaling="block", M=1)
        config_files.save("triton_moe_grouped", p, H100, MoeConfig.tile(16, 32, 64, 4, 3), 9.0, {"triton": "3.6.0"})
    (tmp_path / "tiny.yaml").write_text(TINY)
    args = ("tune", "--shapes", tmp_path / "tiny.yaml", "--dtype", "fp8", "--scaling", "block", "--export-only")
    assert invoke(*args, "--export", "vllm", tmp_path / "v").exit_code == 0
    assert invoke(*args, "--export", "sglang", tmp_path / "s").exit_code == 0
    name = "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape="
    assert [p.name for p in (tmp_path / "v").iterdir()] == [name + "[128,128].json"]
    assert sorted(p.name for p in (tmp_path / "s" / "configs" / "triton_3_6_0").iterdir()) == [name + "[128, 128].json",
                                                                                 name + "[128, 128]_down.json"]  # fmt: skip


def test_export_of_per_tensor_fp8_takes_what_was_tuned_under_fast(tmp_path, monkeypatch):
    """The engines' Triton kernel sums per-tensor fp8 with fast accumulation (vLLM's fused_moe_kernel: tl.dot with
    acc=, Triton's sm90 default): a bucket tuned under fast (its own file) is exported over the shared file's, and a
    bucket only the shared file has is exported from it."""
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    about = {"triton": "3.6.0"}
    for p in (W13, W2):
        p = p.with_(dtype="fp8")
        config_files.save("triton_moe_grouped", p.with_(M=1), H100, MoeConfig.tile(16, 32, 64, 4, 3), 9.0, about)
        config_files.save("triton_moe_grouped", p.with_(M=4), H100, MoeConfig.tile(16, 32, 64, 4, 4), 9.0, about)
        fast = p.with_(M=4, fp8_accum="fast")
        config_files.save("triton_moe_grouped", fast, H100, MoeConfig.tile(16, 64, 64, 8, 4), 8.0, about)
    (tmp_path / "tiny.yaml").write_text(TINY)
    res = invoke("tune", "--shapes", tmp_path / "tiny.yaml", "--dtype", "fp8", "--export", "vllm", tmp_path / "v",
                 "--export-only")  # fmt: skip
    assert res.exit_code == 0, res.output
    written = json.loads(
        (tmp_path / "v" / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json").read_text()
    )
    # by hand: key 1 from the shared file's bucket 1 (16 x 32 x 64, 3 stages); key 4 from the fast file's bucket 4
    # (16 x 64 x 64, 8 warps), not the shared 16 x 32 x 64 with 4 stages
    assert (written["1"]["BLOCK_SIZE_N"], written["1"]["num_stages"]) == (32, 3)
    assert (written["4"]["BLOCK_SIZE_N"], written["4"]["num_warps"]) == (64, 8)


def test_export_refusals(stored, monkeypatch):
    line = bad(export(stored, "vllm", "--dtype", "fp8"))  # the tiny block is stored in fp16 only
    assert "nothing to export" in line and "no stored config of triton_moe_row or triton_moe_grouped" in line
    line = bad(export(stored, "vllm", "--variants", "triton_moe_col,triton_moe_splitk"))
    assert "column-major is not the engines' grouped order" in line and "SPLIT_K = 1" in line
    # fp16 and bf16 both have no dtype in the name: one file, two sources
    line = bad(invoke("tune", "--shapes", stored / "tiny.yaml", "--dtype", "fp16,bf16", "--export", "vllm",
                      stored / "o", "--export-only"))  # fmt: skip
    assert "would both be w13 of E=4,N=32" in line
    assert "--export-only goes with --export" in bad(invoke("tune", "--shapes", "smoke", "--export-only"))
    assert not (stored / "o").exists()
    path = config_files.config_path("triton_moe_grouped", W13, H100)
    data = json.loads(path.read_text())
    data["buckets"]["4"]["config"]["BLOCK_N"] = 48
    path.write_text(json.dumps(data))
    line = bad(export(stored, "vllm"))
    assert f"{path}, bucket 4" in line and "BLOCK_N must be a power of two" in line
    assert not (stored / "out").exists()


def test_export_sglang_refuses_a_triton_version_its_folder_lookup_cannot_parse(tmp_path, monkeypatch):
    # SGLang's fallback reads every configs/triton_* folder name as dotted integers: one like this would break it
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path / "configs"))
    config_files.save("triton_moe_grouped", W13, H100, MoeConfig.tile(16, 32, 32, 4, 3), 9.0, {"triton": "3.5.0+git1"})
    (tmp_path / "tiny.yaml").write_text(TINY)
    line = bad(export(tmp_path, "sglang"))
    assert "not exported: Triton 3.5.0+git1 is not a version SGLang's folder lookup can parse" in line
    assert "no stored config" not in line and not (tmp_path / "out").exists()
    assert export(tmp_path, "vllm").exit_code == 0  # vLLM keeps no folder per version


def test_export_never_replaces_a_file_without_force(stored):
    assert export(stored, "vllm").exit_code == 0
    path = stored / "out" / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json"
    path.write_text("mine")
    assert "exists; --force replaces it" in bad(export(stored, "vllm"))
    assert path.read_text() == "mine"
    assert export(stored, "vllm", "--force").exit_code == 0 and path.read_text().startswith("{")


# ---------------------------------------------------------------- --import-config


def test_export_then_import_gives_the_same_kernel_parameters(stored):
    assert export(stored, "vllm").exit_code == 0
    table = engine_import.read(InferenceEngine.vllm, stored / "out" / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json")
    assert (table.E, table.N, table.device, table.dtype, table.block) == (4, 32, "NVIDIA_H100_80GB_HBM3", None, False)
    # the stored winners, GROUP_M where the schedule is grouped, 1 where it was row-major (the same tile order)
    assert list(table.entries) == list(TOKEN_COUNTS)
    assert table.entries[1] == MoeConfig.tile(16, 32, 32, 4, 3, GROUP_M=4)
    assert table.entries[4] == table.entries[3072] == MoeConfig.tile(16, 64, 32, 8, 2, GROUP_M=1)
    assert export(stored, "sglang").exit_code == 0
    table = engine_import.read(
        InferenceEngine.sglang,
        stored / "out" / "configs" / "triton_3_6_0" / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json",
    )
    assert table.down is not None and table.down.entries[4] == MoeConfig.tile(16, 32, 32, 4, 4, GROUP_M=2)


def test_import_runs_beside_the_tuned_variant_in_one_run(stored):
    """The CPU path end to end (Triton's interpreter, fp16, M = 3; w13 only: each interpreted cell costs a second, and
    w2's entry is the same file's): the imported file's entry for 3 tokens is its key 2 (2 and 4 are as near: the first),
    checked against the reference and timed as a variant of its own, beside the gemmbench-tuned one."""
    assert export(stored, "vllm").exit_code == 0
    spec = f"vllm:{stored / 'out' / 'E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json'}"
    (stored / "w13.yaml").write_text(TINY.split("  - {id: moe_w2")[0])
    res = invoke("run", "--shapes", stored / "w13.yaml", "--dtype", "fp16", "--variants", "triton_moe_grouped",
                 "--import-config", spec, "--budget", "0.01", "--out", stored / "r.parquet")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "-> triton_moe_grouped@vllm" in text(res.stderr)
    df = load([stored / "r.parquet"])
    assert sorted(df.variant) == ["triton_moe_grouped", "triton_moe_grouped@vllm"] and (df.status == "ok").all()
    config = json.loads(df[df.variant == "triton_moe_grouped@vllm"].config.iloc[0])
    assert config["source"] == "vllm" and config["key"] == 2 and config["file"] == spec.rsplit("/", 1)[1]
    # key 2's entry (bucket 4's row-major winner: 16x64x32, GROUP_SIZE_M 1, 8 warps, 2 stages), run in the grouped kernel
    assert (config["BLOCK_N"], config["GROUP_M"], config["num_warps"], config["schedule"]) == (64, 1, 8, "grouped")
    assert json.loads(df[df.variant == "triton_moe_grouped"].config.iloc[0])["source"] == "only"  # the interpreter's


def test_sglang_down_file_gives_w2_its_entry_with_w13s_block_m(stored):
    """In this process (no worker): w2 takes the _down file's entry for M = 3 (key 2, bucket 4's: 32x32x32) with
    w13's BLOCK_SIZE_M at that M (16), as SGLang runs it, and computes the right result."""
    assert export(stored, "sglang").exit_code == 0
    path = stored / "out" / "configs" / "triton_3_6_0" / "E=4,N=32,device_name=NVIDIA_H100_80GB_HBM3.json"
    engine_import.register_imports([f"sglang:{path}"])
    v = registry.get("triton_moe_grouped@sglang")
    inputs = make_inputs(W2, 0, DEV)
    launch = v.make(W2, inputs)
    assert launch.params == MoeConfig.tile(16, 32, 32, 4, 4, GROUP_M=2, schedule="grouped")
    assert launch.config["file"] == path.name.replace(".json", "_down.json") and launch.config["key"] == 2
    assert check_cell(W2, v, make_inputs(W2, 0, DEV)).result.ok


def test_the_committed_vllm_fixture_is_mixtrals_tp2_file():
    """vLLM's H100 file for Mixtral 8x7B at TP 2 (README beside it): intermediate 14336 / 2 = 7168 per partition,
    so it serves mixtral-moe's w13 at TP 2 (N = 28672 / 2 = 14336 = 2 x 7168) and w2 (K = 14336 / 2 = 7168)."""
    table = engine_import.read(InferenceEngine.vllm, FIXTURE)
    assert (table.E, table.N, table.dtype) == (8, 7168, None)
    assert list(table.entries) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
    assert table.entries[4] == MoeConfig.tile(16, 32, 256, 4, 4, GROUP_M=16)
    w13 = Problem("mixtral-moe", "moe_w13", 20, 14336, 4096, "bf16", tp=2, E=8, topk=2)
    w2 = Problem("mixtral-moe", "moe_w2", 20, 4096, 7168, "bf16", tp=2, E=8, topk=2)
    for p in (w13, w2):  # 20 tokens: |16 - 20| = 4 = |24 - 20|: the tie goes to 16, the first in the file
        (config, where), why = engine_import.entry_for([table], p)
        assert config == table.entries[16] and where == provenance.Provenance("vllm", file=FIXTURE.name, key=16)
    assert "is for E=8, N=7168" in engine_import.entry_for([table], w13.with_(N=28672, tp=1))[1]  # TP 1: another file
    assert "for fp8" in engine_import.entry_for([table], w13.with_(dtype="fp8"))[1]


BAD = {  # file name -> (content, what the one line says)
    "mixtral.json": ({}, "not a vllm config file name"),
    "E=8,N=32,device_name=X,dtype=int8_w8a16.json": ({}, "dtype=int8_w8a16"),
    "E=8,N=32,device_name=X,dtype=fp8_w8a8,block_shape=[64,64].json": ({}, "block_shape=[64,64]"),
    "E=8,N=32,device_name=X,dtype=fp8_w8a8,block_shape=[128, 128].json": ({}, "not a vllm config file name"),
    "E=8,N=32,device_name=Y.json": ({"abc": {}}, "entry 'abc': a key must be a token count"),
    "E=8,N=32,device_name=Z.json": ({"1": {"BLOCK_SIZE_M": 16}}, "entry '1': missing key 'BLOCK_SIZE_N'"),
    "E=8,N=32,device_name=W.json": (
        {
            "1": {
                "BLOCK_SIZE_M": 8,
                "BLOCK_SIZE_N": 32,
                "BLOCK_SIZE_K": 32,
                "GROUP_SIZE_M": 1,
                "num_warps": 4,
                "num_stages": 2,
            }
        },
        "entry '1': BLOCK_SIZE_M must be a power of two >= 16, not 8",
    ),  # fmt: skip
    "E=8,N=32,device_name=V.json": (
        {
            "1": {
                "BLOCK_SIZE_M": 16,
                "BLOCK_SIZE_N": 32,
                "BLOCK_SIZE_K": 32,
                "GROUP_SIZE_M": 1,
                "num_warps": 4,
                "num_stages": 2,
                "waves_per_eu": 0,
            }
        },
        "entry '1': unknown key 'waves_per_eu'",
    ),  # fmt: skip
    "E=8,N=32,device_name=U.json": ("{not json", "unreadable"),
}


@pytest.mark.parametrize("name", BAD)
def test_a_bad_engine_file_is_one_line_naming_file_and_field(tmp_path, name):
    content, message = BAD[name]
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    line = bad(invoke("run", "--shapes", "smoke", "--import-config", f"vllm:{path}", "--out", tmp_path / "r.parquet"))
    assert message in line and path.name in line
    assert not (tmp_path / "r.parquet").exists()


def test_bad_import_specs(tmp_path):
    assert "give ENGINE:FILE" in bad(invoke("run", "--shapes", "smoke", "--import-config", "trtllm:x.json"))
    assert "no such file" in bad(
        invoke("run", "--shapes", "smoke", "--import-config", "vllm:E=8,N=1,device_name=X.json")
    )
    down = tmp_path / "E=8,N=32,device_name=X_down.json"
    down.write_text("{}")
    assert "import its w13 file" in bad(invoke("layer", "--model", "smoke", "--import-config", f"sglang:{down}"))
    # SGLang reads every key as a token count: vLLM's triton_version would fail it
    up = tmp_path / "E=8,N=32,device_name=X.json"
    up.write_text(json.dumps({"triton_version": "3.4.0"}))
    assert "entry 'triton_version'" in bad(invoke("run", "--shapes", "smoke", "--import-config", f"sglang:{up}"))


# ---------------------------------------------------------------- why grouped and row map, and col does not


def _order(schedule: str, grid_m: int, grid_n: int, group_m: int) -> list[tuple[int, int]]:
    out = torch.full((grid_m * grid_n, 2), -1, dtype=torch.int32, device=DEV)
    tile_order[(grid_m * grid_n,)](out, grid_m, grid_n, SCHEDULE=schedule, GROUP_M=group_m)
    return [tuple(r) for r in out.cpu().tolist()]


def _vllm_order(num_pid_m: int, num_pid_n: int, group_size_m: int) -> list[tuple[int, int]]:
    """vLLM's fused_moe_kernel, pid -> (pid_m, pid_n), line by line (vllm/model_executor/layers/fused_moe/fused_moe.py)."""
    out = []
    for pid in range(num_pid_m * num_pid_n):
        num_pid_in_group = group_size_m * num_pid_n
        first_pid_m = (pid // num_pid_in_group) * group_size_m
        size_m = min(num_pid_m - first_pid_m, group_size_m)
        out.append((first_pid_m + (pid % num_pid_in_group) % size_m, (pid % num_pid_in_group) // size_m))
    return out


@pytest.mark.parametrize("grid_m,grid_n,group_m", [(5, 3, 2), (7, 4, 3), (4, 6, 8)])
def test_grouped_is_vllms_order_and_row_is_grouped_by_one(grid_m, grid_n, group_m):
    assert _order("grouped", grid_m, grid_n, group_m) == _vllm_order(grid_m, grid_n, group_m)
    assert _order("row", grid_m, grid_n, 1) == _vllm_order(grid_m, grid_n, 1)
    # column-major is the grouped order only where GROUP_SIZE_M covers every block of rows; the engine's grid
    # (blocks of rows) grows with the tokens, so a fixed GROUP_SIZE_M below it walks another order
    assert _order("col", grid_m, grid_n, 1) == _vllm_order(grid_m, grid_n, grid_m)
    assert _order("col", grid_m, grid_n, 1) != _vllm_order(grid_m, grid_n, min(group_m, grid_m - 1))


@pytest.mark.parametrize("gpu,warned", [("NVIDIA H100 80GB HBM3", False), ("NVIDIA H200", True)])
def test_import_on_a_gpu_names_where_the_file_was_tuned(monkeypatch, capsys, gpu, warned):
    """The GPU path of `--import-config` (the engine's name for this GPU against the file's), with detect() faked."""
    import gemmbench.measure.device
    from gemmbench.cli.engines import import_configs
    from gemmbench.measure.device import DeviceInfo

    monkeypatch.setattr(
        gemmbench.measure.device, "detect", lambda: DeviceInfo(kind="cuda", name=gpu, capability=(9, 0))
    )
    try:
        variants, env = import_configs([f"vllm:{FIXTURE}"], "triton_moe_grouped")
    finally:
        registry.unregister("triton_moe_grouped@vllm")
    assert variants == "triton_moe_grouped,triton_moe_grouped@vllm" and env
    warning = "was tuned on NVIDIA_H100_80GB_HBM3; this GPU is NVIDIA_H200"
    assert (warning in capsys.readouterr().err) == warned
