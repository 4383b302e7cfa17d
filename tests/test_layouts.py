"""Engine layouts (vllm, sglang, hf), DP, the dry run, and `shapes from-config --as`.

Expected sizes are worked by hand in each test from the model's published config (tests/fixtures/hf-configs) and
the engines' rules (docs/USAGE.md "Sharding"), never read back from gemmbench."""

from __future__ import annotations

import json

import pytest
import torch
from test_cli import bad, invoke

from gemmbench.engine import layer_plan as P
from gemmbench.measure.inputs import route
from gemmbench.models import shape_sets
from gemmbench.models.hf_config import convert
from gemmbench.models.sharding import problems

FIXTURES = "tests/fixtures/hf-configs"


def by_gemm(name: str, **par) -> dict:
    return {p.gemm: p for p in problems(shape_sets.load(name), ["bf16"], [4], **par)}


# ---------------------------------------------------------------- layouts


def test_sglang_folds_deepseek_v3s_shared_expert_into_the_routed_ones():
    got = by_gemm("deepseek-v3", tp=8, layout="sglang")
    # 256 routed + 1 shared = 257 experts, top 8 + 1 = 9; the shared expert's own GEMMs are not launched
    assert (got["moe_w13"].E, got["moe_w13"].topk, got["moe_w13"].shared_experts) == (257, 9, 1)
    assert (got["moe_w13"].N, got["moe_w2"].K) == (4096 // 8, 2048 // 8)  # experts' TP 8 (EP 1)
    assert "moe_shared_gate_up" not in got and "moe_shared_down" not in got
    assert got["moe_w13"].label.endswith("E257 top9 shared1 tp8 sglang")
    # vLLM keeps them apart; SGLang does not fold under expert parallelism
    assert "moe_shared_gate_up" in by_gemm("deepseek-v3", tp=8)
    ep = by_gemm("deepseek-v3", tp=8, ep=8, layout="sglang")
    assert ep["moe_w13"].E == 256 and "moe_shared_down" in ep
    # a model with 64 routed experts and 2 shared (V2-Lite) is not one SGLang folds (256 routed, 1 shared only)
    lite, _ = _from_fixture("deepseek-v2-lite")
    assert all(not g.fold_shared for g in lite.gemms)


def test_a_folded_shared_expert_takes_every_token():
    ids, weights = route(64, 257, 9, torch.Generator().manual_seed(3), shared=1)
    assert ids.shape == (64, 9) and (ids[:, -1] == 256).all()  # the last slot: expert 256, every token
    assert (ids[:, :8] < 256).all() and all(len(set(row)) == 9 for row in ids.tolist())  # 8 distinct routed ones
    assert (weights[:, -1] == 1).all()


def test_sglang_dp_attention_runs_dense_mlps_at_the_worlds_tp_on_gathered_tokens():
    # SGLang --tp 8 --dp 4 --enable-dp-attention is gemmbench --tp 2 --dp 4 --layout sglang: attention at TP 2 on
    # one DP rank's 4 tokens; the dense MLP, the router and the LM head at TP 8 on the 4 x 4 = 16 gathered tokens
    got = by_gemm("deepseek-v3", tp=2, dp=4, layout="sglang")
    assert (got["attn_o"].M, got["attn_o"].K) == (4, 16384 // 2)
    assert (got["mlp_gate_up"].M, got["mlp_gate_up"].N) == (16, 36864 // 8)
    assert (got["moe_router"].M, got["moe_router"].N) == (16, 256)
    assert (got["lm_head"].M, got["lm_head"].N) == (16, 129280 // 8)
    assert (got["moe_w13"].M, got["moe_w13"].N) == (16, 4096 // 8)  # experts' TP 2 x 4 / EP 1
    # vLLM: everything but the experts stays on the DP rank, at TP 2
    v = by_gemm("deepseek-v3", tp=2, dp=4)
    assert (v["mlp_gate_up"].M, v["mlp_gate_up"].N, v["lm_head"].N) == (4, 36864 // 2, 129280 // 2)
    assert (v["moe_w13"].M, v["moe_w13"].N) == (16, 4096 // 8)


def test_hf_runs_the_checkpoints_own_tensors_on_one_gpu():
    got = by_gemm("deepseek-v3", layout="hf")
    # q_a (1536) and kv_a (512 + 64) apart; gate and up apart, dense and routed; the vocabulary unpadded
    assert (got["mla_q_a"].N, got["mla_kv_a"].N) == (1536, 576) and "mla_qkv_a" not in got
    assert (got["mlp_gate"].N, got["mlp_up"].N, got["mlp_down"].K) == (18432, 18432, 18432)
    assert (got["moe_gate"].N, got["moe_gate"].E, got["moe_up"].N) == (2048, 256, 2048)
    qkv = by_gemm("qwen3-235b-a22b", layout="hf")
    assert (qkv["attn_q"].N, qkv["attn_k"].N, qkv["attn_v"].N) == (64 * 128, 4 * 128, 4 * 128)
    # gpt-oss's checkpoint stores each expert's gate and up as one tensor: nothing to split
    assert by_gemm("gpt-oss-120b", layout="hf")["moe_w13"].N == 2 * 2880
    with pytest.raises(ValueError, match="^--layout hf is the checkpoint's own tensors on one GPU"):
        by_gemm("deepseek-v3", tp=2, layout="hf")


def test_lm_head_padding_follows_the_layout():
    s, _ = _from_fixture("codellama-7b")
    # vocabulary 32016: vLLM and SGLang pad it to 32064 (a multiple of 64), the checkpoint does not
    for layout, n in (("vllm", 32064), ("sglang", 32064), ("hf", 32016)):
        assert next(p.N for p in problems(s, ["bf16"], [1], layout=layout) if p.gemm == "lm_head") == n
    assert next(p.N for p in problems(s, ["bf16"], [1], tp=8) if p.gemm == "lm_head") == 32064 // 8


def test_layer_uses_the_same_rule_as_run():
    sset = shape_sets.load("qwen3-235b-a22b")
    layer = {p.gemm: p for p in P.layer_problems(sset, 16, "bf16", 8, ep=8)}
    run = by_gemm("qwen3-235b-a22b", tp=8, ep=8)
    for gemm in ("attn_qkv", "attn_o", "moe_w13", "moe_w2"):
        assert (layer[gemm].N, layer[gemm].K, layer[gemm].local_experts) == (run[gemm].N, run[gemm].K,
                                                                             run[gemm].local_experts)  # fmt: skip
    assert layer["attn_qkv"].N == (64 // 8 + 2 * 1) * 128  # 4 KV heads at TP 8: one (copied) a GPU


# ---------------------------------------------------------------- the dry run


def _dry(*args) -> dict:
    res = invoke("run", *args, "--dry-run", "--format", "json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_dry_run_shows_rank_0s_problems(tmp_path):
    doc = _dry("--shapes", "deepseek-v3", "--tp", "8", "--ep", "8", "--m", "16", "--out", tmp_path / "r")
    assert doc["schema"] == "gemmbench.dry-run/1" and doc["deployment"]["layout"] == "vllm"
    w13 = next(c for c in doc["cells"] if c["gemm"] == "moe_w13" and c["dtype"] == "bf16")
    # experts whole (EP 8 = TP 8): N 2 x 2048, K 7168; 256 / 8 = 32 on rank 0; 16 tokens routed top-8
    assert (w13["N"], w13["K"], w13["local_experts"], w13["E"], w13["tokens"], w13["pairs_routed"]) == (
        4096, 7168, 32, 256, 16, 128)  # fmt: skip
    assert w13["runs"] and all(isinstance(v, str) for v in w13["skips"].values())
    assert not (tmp_path / "r").exists()  # nothing written


def test_dry_run_counts_the_dp_ranks_tokens():
    doc = _dry("--shapes", "mixtral-moe", "--dp", "8", "--m", "2", "--dtype", "bf16")
    cells = {c["gemm"]: c for c in doc["cells"]}
    # DP 8 without EP: each expert split over all 8 GPUs (28672 / 8), routing the 8 ranks' 2 tokens each
    assert (cells["moe_w13"]["M"], cells["moe_w13"]["tokens"], cells["moe_w13"]["N"]) == (2, 16, 3584)
    assert cells["moe_w13"]["local_experts"] == 8 and cells["moe_w13"]["dp"] == 8
    assert (cells["attn_o"]["M"], cells["attn_o"]["tokens"], cells["attn_o"]["K"]) == (2, 2, 4096)  # TP 1


def test_dry_run_needs_no_gpu_for_its_answer(tmp_path):
    doc = _dry("--shapes", "smoke", "--m", "1", "--dtype", "fp16,fp8", "--variants", "triton_dp_row,cublas_*",
               *(() if torch.cuda.is_available() else ("--gpu", "NVIDIA H200")))  # fmt: skip
    cell = next(c for c in doc["cells"] if c["gemm"] == "smoke_square" and c["dtype"] == "fp16")
    fp8 = next(c for c in doc["cells"] if c["gemm"] == "smoke_square" and c["dtype"] == "fp8")
    if torch.cuda.is_available():  # the variant's own check runs against the GPU
        assert "triton_dp_row" in cell["runs"] or "triton_dp_row" in cell["skips"]
    else:  # an H200 from the parts table: Triton needs capability 8.0+ and fp16 (it has 9.0); cuBLAS fp16 always
        assert doc["gpu"] == "NVIDIA H200" and doc["stand_in"] is True
        assert cell["runs"] == ["cublas_fp16", "triton_dp_row"] and not cell["skips"]
        # whether the GPU machine's torch has _scaled_mm is that machine's to say, not this one's
        assert (
            fp8["on_the_gpu"]["cublas_fp8"] == "decided on the GPU: whether its torch has _scaled_mm's tensor-wise path"
        )


def test_dry_run_without_a_gpu_answers_for_an_h200(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = invoke("run", "--shapes", "smoke", "--m", "1", "--dtype", "fp16", "--dry-run")
    assert res.exit_code == 0, res.stderr
    assert "on NVIDIA H200 (described from the parts table)" in " ".join(res.stdout.split())
    assert "runs: cublas_fp16, triton_dp_grouped, triton_splitk_atomic, triton_persistent, triton_streamk" in res.stdout


def test_dry_run_table_and_refusals():
    res = invoke("run", "--shapes", "qwen3-235b-a22b", "--tp", "8", "--m", "1", "--dtype", "bf16", "--dry-run")
    assert res.exit_code == 0 and "1280" in res.stdout  # (64 / 8 + 2 x 1) x 128
    line = bad(invoke("run", "--shapes", str(_yaml_of("qwen2-7b")), "--tp", "8", "--dry-run"))
    assert line.endswith("qwen2-7b: attn_qkv: 28 query heads do not divide by TP 8")


def _from_fixture(name: str):
    made = convert(f"{FIXTURES}/{name}.json")
    return shape_sets.load_text(name, made.text), made


def _yaml_of(name: str):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / f"{name}.yaml"
    path.write_text(convert(f"{FIXTURES}/{name}.json").text)
    return path


# ---------------------------------------------------------------- from-config


def test_qwen1_5_moe_at_ep_8_gives_rank_0_eight_of_60_experts():
    s, _ = _from_fixture("qwen1.5-moe-a2.7b")
    w13 = next(p for p in problems(s, ["bf16"], [2], tp=8, ep=8) if p.gemm == "moe_w13")
    assert (w13.E, w13.local_experts) == (60, 8)  # 60 = 7 x 8 + 4: ranks 0-3 hold 8, ranks 4-7 hold 7


def test_from_config_as_a_family_lists_what_it_read_and_ignored(tmp_path):
    cfg = json.loads(open(f"{FIXTURES}/llama3.1-8b.json").read())
    cfg["architectures"] = ["MyLlamaForCausalLM"]
    cfg["rope_scaling_extra"] = 7
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    line = bad(invoke("shapes", "from-config", path))
    assert "'MyLlamaForCausalLM' is not an architecture gemmbench knows (LlamaForCausalLM, " in line
    assert line.endswith("read it as that one with --as FAMILY")
    res = invoke("shapes", "from-config", path, "--as", "LlamaForCausalLM")
    assert res.exit_code == 0, res.stderr
    assert "name: my-model" in res.stdout  # no _name_or_path: the folder a config.json sits in
    assert "read as LlamaForCausalLM: hidden_size, num_attention_heads" in res.stderr
    assert "rope_scaling_extra" in res.stderr.split("ignored:")[1]
    assert bad(invoke("shapes", "from-config", path, "--as", "Nope")).startswith("error: --as 'Nope': not a family")


def test_from_config_refuses_to_overwrite(tmp_path):
    out = tmp_path / "set.yaml"
    out.write_text("hand-edited\n")
    line = bad(invoke("shapes", "from-config", f"{FIXTURES}/qwen2-7b.json", "--out", out))
    assert line == f"error: --out {out} exists; --force replaces it" and out.read_text() == "hand-edited\n"
    assert invoke("shapes", "from-config", f"{FIXTURES}/qwen2-7b.json", "--out", out, "--force").exit_code == 0
    assert "parallel: qkv" in out.read_text()


def test_tune_uses_the_same_rule_as_run():
    from gemmbench.engine.plan import deployment, tunable

    tuned, _ = tunable("qwen3-235b-a22b", "triton_*", "bf16", "16", deployment("8", "1", "8", "vllm"), None, print)
    got = {p.gemm: (p.N, p.K, p.local_experts) for p in tuned}
    # QKV: (64 / 8 + 2 x 1) x 128 = 1280; experts whole at EP 8 = TP 8: w13 N 2 x 1536, 128 / 8 = 16 on rank 0
    assert got["attn_qkv"] == (1280, 4096, 1) and got["moe_w13"] == (3072, 4096, 16)


def test_the_layout_option_lists_every_layout():
    from gemmbench.cli.formats import LayoutChoice
    from gemmbench.models.sharding import LAYOUTS

    assert [c.value for c in LayoutChoice] == list(LAYOUTS)


def test_lists_of_degrees_run_the_combinations_the_engine_can():
    res = invoke("run", "--shapes", "mixtral-moe", "--tp", "1,8", "--ep", "1,8", "--m", "1", "--dtype", "bf16",
                 "--dry-run", "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    # TP 1 EP 8: EP 8 does not divide the 1 GPU; the other three run
    assert "left out 1 of the --tp/--dp/--ep combinations: mixtral-moe: --ep 8 does not divide the TP 1" in res.stderr
    w13 = {(c["tp"], c["ep"]) for c in json.loads(res.stdout)["cells"] if c["gemm"] == "moe_w13"}
    assert w13 == {(1, 1), (8, 1), (8, 8)}
    line = bad(invoke("run", "--shapes", "mixtral-moe", "--ep", "2,4", "--dry-run"))  # none left: the first refusal
    assert line == "error: mixtral-moe: --ep 2 does not divide the TP 1 x DP 1 = 1 GPUs the experts are spread over"


def test_hf_part_names_are_each_one_gemm(tmp_path):
    text = """name: x
gemms:
  - {id: a, N: 4, K: 8, parallel: column, parts: {x: 2, y: 2}}
  - {id: b, N: 4, K: 8, parallel: column, parts: {x: 2, z: 2}}
"""
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(ValueError, match="part 'x' is also a part of 'a' \\(--layout hf runs both\\)"):
        shape_sets.load(str(tmp_path / "x.yaml"))
    (tmp_path / "v.yaml").write_text(
        "name: v\ngemms: [{id: h, K: 8, parallel: vocab, vocab: 4, parts: {a: 2, b: 2}}]\n"
    )
    with pytest.raises(ValueError, match="parts are not for parallel: vocab"):
        shape_sets.load(str(tmp_path / "v.yaml"))
