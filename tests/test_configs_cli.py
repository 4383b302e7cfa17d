"""What the commands say of configs, without a GPU: the run's configs line per GPU (text and JSON), `list configs`
(stored files and per problem, own or borrowed), `run --dry-run --gpu`, and the refusals of a bad --gpu."""

from __future__ import annotations

import json

import pytest
from test_cli import bad, invoke, table_rows

from gemmbench.cli import configs_used
from gemmbench.configs import config_files
from gemmbench.kernels.splitk import SplitKConfig
from gemmbench.shapes import Problem

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def _row(variant, source, gpu=H200, M=16, **prov):
    config = {"BLOCK_M": 16, "source": source, **prov} if source else {}
    return dict(gpu=gpu, variant=variant, config=json.dumps(config), shape_set="llama70b-attn", gemm="attn_qkv",
                M=M, N=10240, K=8192, E=1, dtype="fp8", scaling="tensor", tp=1, ep=1, dp=1)  # fmt: skip


def test_the_configs_line_counts_cells_by_source_per_gpu():
    rows = [
        _row("triton_splitk_atomic", "stored", file="f", bucket=16),
        _row("triton_splitk_atomic", "stored-neighbour", M=24, file="f", bucket=16),
        _row("gluon_ws", "fitted", M=333, neighbours_us={"256": 2.0, "512": 3.0}, fitted_us=1.0),
        _row("triton_dp_grouped", "borrowed", borrowed="NVIDIA_H100_80GB_HBM3", file="f", bucket=16),
        _row("triton_streamk", "searched", M=16),
        _row("triton_streamk", "searched", M=8),  # M 8 and 16 share bucket 16: one tune job
        _row("triton_persistent", "searched", M=64),
        _row("triton_moe_grouped@vllm", "vllm", file="E=8.json", key=16),
        _row("cublas_fp8", None),  # no config: not counted
        _row("triton_streamk", "only", gpu=H100),
    ]
    docs = {d["gpu"]: d for d in configs_used.summarize(rows)}
    h200 = docs[H200]
    assert (h200["own"], h200["borrowed"], h200["searched"], h200["imported"]) == (3, {H100: 1}, 3, 1)
    assert h200["tune"] == ("gemmbench tune --shapes llama70b-attn --variants triton_persistent,triton_streamk "
                            "--dtype fp8 --m 8,16,64")  # fmt: skip
    # two jobs: (streamk, bucket 16) and (persistent, bucket 64)
    assert h200["tune_estimate_s"] == round(2 * configs_used.TUNE_S_PER_JOB)
    line = configs_used.line(h200)
    assert line.startswith(f"configs on {H200}: own 3, borrowed from {H100} 1, searched 3, imported 1 (cells)")
    assert line.endswith(f"to tune the searched ones: {h200['tune']} (about {h200['tune_estimate_s']} s)")
    assert configs_used.line(docs[H100]) == f"configs on {H100}: own 0, borrowed 0, searched 0, only 1 (cells)"


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A user config folder with an H100 file and an H200 file of two shapes no shipped file has."""
    monkeypatch.setenv("GEMMBENCH_CONFIG_DIR", str(tmp_path))
    p = Problem("s", "g", 16, 4224, 8192, "fp8", scaling="tensor", fp8_accum="precise")
    config = SplitKConfig.tile(16, 64, 128, 4, 3, SPLIT_K=4)
    config_files.save("triton_splitk_atomic", p, H100, config, 9.0, {})
    config_files.save("triton_splitk_atomic", p.with_(N=4352, M=64), H200, config, 9.0, {})
    return tmp_path


def test_list_configs_of_stored_files(stored):
    plain = invoke("list", "configs", "--gpu", H200, "--variants", "triton_splitk_atomic", "--format", "json")
    assert plain.exit_code == 0, plain.stderr
    files = {(c["file"], c["source"]) for c in json.loads(plain.stdout)["configs"]}
    assert ("N=4352,K=8192,dtype=fp8.json", "own") in files and (
        "N=4224,K=8192,dtype=fp8.json",
        "borrowed",
    ) not in files
    lent = invoke(
        "list", "configs", "--gpu", H200, "--variants", "triton_splitk_atomic", "--borrow", "--format", "json"
    )
    got = {c["file"]: c for c in json.loads(lent.stdout)["configs"]}
    assert got["N=4224,K=8192,dtype=fp8.json"]["source"] == "borrowed"
    assert (
        got["N=4224,K=8192,dtype=fp8.json"]["from"] == H100 and got["N=4352,K=8192,dtype=fp8.json"]["buckets"] == "64"
    )


def test_list_configs_per_problem_and_the_dry_run_agree(stored, tmp_path):
    shapes = tmp_path / "two.yaml"
    shapes.write_text(
        "name: two\ngemms:\n  - {id: a, N: 4224, K: 8192, parallel: none}\n"
        "  - {id: b, N: 4352, K: 8192, parallel: none}\n"
    )
    args = ("--gpu", H200, "--shapes", shapes, "--m", "16", "--dtype", "fp8", "--variants", "triton_splitk_atomic")
    listed = invoke("list", "configs", *args, "--borrow")
    assert listed.exit_code == 0, listed.stderr
    sources = {r[1]: (r[8], r[9]) for r in table_rows(listed.stdout) if r[1]}  # gemm -> (source, from)
    # b: the H200's own bucket 64 is two buckets from M 16's bucket (16, 32, 64): out of reach, so it is searched
    assert sources == {"a": ("borrowed", H100), "b": ("search", "")}
    dry = invoke("run", "--shapes", shapes, "--m", "16", "--dtype", "fp8", "--variants", "triton_splitk_atomic",
                 "--dry-run", "--gpu", H200, "--borrow", "--format", "json")  # fmt: skip
    doc = json.loads(dry.stdout)
    assert doc["gpu"] == H200 and doc["configs"] == {"gpu": H200, "own": 0, "searched": 0, "search": 1,
                                                     "borrowed": {H100: 1}}  # fmt: skip
    assert [c["configs"]["triton_splitk_atomic"]["source"] for c in doc["cells"]] == ["borrowed", "search"]


def test_a_gpu_not_in_the_table_and_gpu_without_dry_run_are_refused():
    unknown = invoke("list", "configs", "--gpu", "NVIDIA B200")
    assert unknown.exit_code == 2 and "'NVIDIA B200' is not in the Hopper parts table" in bad(unknown)
    assert "'NVIDIA H200'" in bad(unknown)
    ran = invoke("run", "--shapes", "smoke", "--gpu", H200)
    assert ran.exit_code == 2 and "--gpu goes with --dry-run" in bad(ran)
    nogpu = invoke("list", "configs")
    assert nogpu.exit_code == 2 and "name the GPU to ask about with --gpu" in bad(nogpu)


def test_list_configs_counts_a_variant_whose_rule_only_the_gpu_can_settle():
    # gluon_ws on an H200 from the parts table: whether that machine's Triton has the kernel's Gluon is its own to
    # say, so the config it would take is still listed: llama70b-attn's 2 GEMMs x the 7 decode M, in fp8
    res = invoke("list", "configs", "--gpu", "NVIDIA H200", "--shapes", "llama70b-attn", "--variants", "gluon_ws",
                 "--dtype", "fp8", "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["configs"]
    assert len(rows) == 2 * 7 and {r["variant"] for r in rows} == {"gluon_ws"}
