"""Shape sets from Hugging Face configs (gemmbench/models/hf_config.py, hf_families.py): every GEMM of one real config per
architecture against sizes worked out by hand here, the built-in model sets against their configs, and every way a
config is refused (as a ShapeError and through the CLI: exit 2, one line, nothing written).  No torch, no kernels."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gemmbench import shapes
from gemmbench.cli import app
from gemmbench.models.hf_config import from_hf_config
from gemmbench.models.shape_sets import load, load_text
from gemmbench.models.sharding import problems
from gemmbench.shapes import ShapeError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hf-configs"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def made(config, **kw) -> shapes.ShapeSet:
    """The set from_hf_config writes, read back by the YAML loader (what `run --shapes` would get)."""
    name, text = from_hf_config(config, **kw)
    return load_text("made", text)


def rows(s: shapes.ShapeSet) -> list[tuple]:
    return [(g.name, g.N, g.K, g.parallel, g.E, g.topk, g.layer, g.role) for g in s.gemms]


# ---------------------------------------------------------------- one real config per architecture
# Each tuple: (id, N, K, parallel, E, topk, layer, role).  Weight (N, K); out = act (M, K) @ W^T.


def test_deepseek_v3():
    # hidden 7168, 128 heads, q_lora 1536, kv_lora 512, qk 128 nope + 64 rope, v 128; 256 experts top-8 of 2048,
    # 1 shared expert; dense intermediate 18432; vocab 129280.  Layers 0..2 dense (first_k_dense_replace 3), 3..60 MoE
    s = made(FIXTURES / "deepseek-v3.json")
    assert rows(s) == [
        # q_a (q_lora_rank 1536) and kv_a (512 kv_lora + 64 rope) as one GEMM, as vLLM and SGLang run them
        ("mla_qkv_a", 2112, 7168, "none", 1, 1, "", ""),  # 1536 + 576 = 2112
        ("mla_q_b", 24576, 1536, "column", 1, 1, "", ""),  # 128 heads * (128 nope + 64 rope) = 24576
        ("mla_kv_b", 32768, 512, "column", 1, 1, "", ""),  # 128 heads * (128 nope + 128 v) = 32768
        ("attn_o", 7168, 16384, "row", 1, 1, "", ""),  # K = 128 heads * 128 v = 16384
        ("mlp_gate_up", 36864, 7168, "column", 1, 1, "dense", "mlp"),  # 2 * 18432 = 36864
        ("mlp_down", 7168, 18432, "row", 1, 1, "dense", "mlp"),
        ("moe_router", 256, 7168, "none", 1, 1, "moe", "router"),  # N = 256 experts
        ("moe_w13", 4096, 7168, "column", 256, 8, "moe", ""),  # 2 * 2048 = 4096
        ("moe_w2", 7168, 2048, "row", 256, 8, "moe", ""),
        ("moe_shared_gate_up", 4096, 7168, "column", 1, 1, "moe", "shared_expert"),  # 2 * (1 shared * 2048) = 4096
        ("moe_shared_down", 7168, 2048, "row", 1, 1, "moe", "shared_expert"),
        ("lm_head", 129280, 7168, "vocab", 1, 1, "", ""),
    ]
    assert "61 layers: 3 dense, 58 MoE" in s.description  # 61 - 3 = 58


def test_deepseek_v3_tensor_parallel_8():
    # replicated: q_a + kv_a, router; column: N / 8; row: K / 8 (the experts too, without --ep)
    got = {p.gemm: (p.N, p.K) for p in problems(load("deepseek-v3"), ["bf16"], [1], tp=8)}
    assert got == {
        "mla_qkv_a": (2112, 7168),
        "mla_q_b": (3072, 1536),  # 24576 / 8
        "mla_kv_b": (4096, 512),  # 32768 / 8
        "attn_o": (7168, 2048),  # 16384 / 8
        "mlp_gate_up": (4608, 7168),  # 36864 / 8
        "mlp_down": (7168, 2304),  # 18432 / 8
        "moe_router": (256, 7168),
        "moe_w13": (512, 7168),  # 4096 / 8
        "moe_w2": (7168, 256),  # 2048 / 8
        "moe_shared_gate_up": (512, 7168),
        "moe_shared_down": (7168, 256),
        "lm_head": (16160, 7168),  # 129280 (a multiple of 64) / 8
    }


def test_deepseek_v2_lite_uncompressed_queries():
    # q_lora_rank null: one q projection.  hidden 2048, 16 heads, kv_lora 512, qk 128 + 64, v 128; 64 experts top-6 of
    # 1408, 2 shared; dense 10944; vocab 102400; layer 0 dense (first_k_dense_replace 1), 1..26 MoE
    s = made(FIXTURES / "deepseek-v2-lite.json")
    assert rows(s) == [
        ("mla_q", 3072, 2048, "column", 1, 1, "", ""),  # 16 heads * (128 + 64) = 3072
        ("mla_kv_a", 576, 2048, "none", 1, 1, "", ""),  # 512 + 64
        ("mla_kv_b", 4096, 512, "column", 1, 1, "", ""),  # 16 * (128 + 128) = 4096
        ("attn_o", 2048, 2048, "row", 1, 1, "", ""),  # K = 16 * 128 = 2048
        ("mlp_gate_up", 21888, 2048, "column", 1, 1, "dense", "mlp"),  # 2 * 10944
        ("mlp_down", 2048, 10944, "row", 1, 1, "dense", "mlp"),
        ("moe_router", 64, 2048, "none", 1, 1, "moe", "router"),
        ("moe_w13", 2816, 2048, "column", 64, 6, "moe", ""),  # 2 * 1408
        ("moe_w2", 2048, 1408, "row", 64, 6, "moe", ""),
        ("moe_shared_gate_up", 5632, 2048, "column", 1, 1, "moe", "shared_expert"),  # 2 * (2 shared * 1408) = 5632
        ("moe_shared_down", 2048, 2816, "row", 1, 1, "moe", "shared_expert"),  # K = 2 * 1408
        ("lm_head", 102400, 2048, "vocab", 1, 1, "", ""),
    ]
    assert "27 layers: 1 dense, 26 MoE" in s.description


def test_deepseek_moe_layer_freq_and_all_dense():
    cfg = fixture("deepseek-v3")
    # freq 2 after 3 dense: MoE at 4, 6, ..., 60 -> 29 layers; the other 32 dense
    assert "61 layers: 32 dense, 29 MoE" in made(dict(cfg, moe_layer_freq=2)).description
    # every layer dense: no router, no experts, and no layer keys (one kind of layer)
    s = made(dict(cfg, first_k_dense_replace=61))
    assert [g.name for g in s.gemms] == ["mla_qkv_a", "mla_q_b", "mla_kv_b", "attn_o", "mlp_gate_up", "mlp_down",
                                         "lm_head"]  # fmt: skip
    assert {g.layer for g in s.gemms} == {""}
    # no shared expert (null or 0): no moe_shared_*
    for none in (None, 0):
        assert not [g for g in made(dict(cfg, n_shared_experts=none)).gemms if "shared" in g.name]


def test_qwen3_30b_a3b():
    # hidden 2048, 32 query heads, 4 KV heads, head_dim 128; 128 experts top-8 of 768; every layer MoE
    # (decoder_sparse_step 1, mlp_only_layers []): no dense MLP, no layer keys
    assert rows(made(FIXTURES / "qwen3-30b-a3b.json")) == [
        ("attn_qkv", 5120, 2048, "qkv", 1, 1, "", ""),  # (32 + 2 * 4) heads * 128 = 5120
        ("attn_o", 2048, 4096, "row", 1, 1, "", ""),  # K = 32 * 128 = 4096 (not hidden: head_dim is given)
        ("moe_router", 128, 2048, "none", 1, 1, "", "router"),
        ("moe_w13", 1536, 2048, "column", 128, 8, "", ""),  # 2 * 768
        ("moe_w2", 2048, 768, "row", 128, 8, "", ""),
        ("lm_head", 151936, 2048, "vocab", 1, 1, "", ""),
    ]


def test_qwen3_235b_a22b():
    # hidden 4096, 64 query heads, 4 KV heads, head_dim 128; 128 experts top-8 of 1536
    assert rows(made(FIXTURES / "qwen3-235b-a22b.json")) == [
        ("attn_qkv", 9216, 4096, "qkv", 1, 1, "", ""),  # (64 + 2 * 4) * 128 = 9216
        ("attn_o", 4096, 8192, "row", 1, 1, "", ""),  # K = 64 * 128
        ("moe_router", 128, 4096, "none", 1, 1, "", "router"),
        ("moe_w13", 3072, 4096, "column", 128, 8, "", ""),  # 2 * 1536
        ("moe_w2", 4096, 1536, "row", 128, 8, "", ""),
        ("lm_head", 151936, 4096, "vocab", 1, 1, "", ""),
    ]


def test_qwen_moe_dense_layers():
    cfg = fixture("qwen3-30b-a3b")
    # mlp_only_layers [0, 47]: 2 dense layers of intermediate 6144, 46 MoE
    s = made(dict(cfg, mlp_only_layers=[0, 47]))
    assert "48 layers: 2 dense, 46 MoE" in s.description
    assert rows(s)[2:4] == [
        ("mlp_gate_up", 12288, 2048, "column", 1, 1, "dense", "mlp"),  # 2 * 6144
        ("mlp_down", 2048, 6144, "row", 1, 1, "dense", "mlp"),
    ]
    assert {g.layer for g in s.gemms if g.name.startswith("moe_")} == {"moe"}
    # decoder_sparse_step 4: layer i is MoE where (i + 1) % 4 == 0 -> 3, 7, ..., 47: 12 MoE, 36 dense
    assert "48 layers: 36 dense, 12 MoE" in made(dict(cfg, decoder_sparse_step=4)).description


def test_qwen1_5_moe_shared_expert():
    # Qwen2-MoE: hidden 2048, 16 heads (MHA: 16 KV heads), head dim 2048 / 16 = 128; 60 experts top-4 of 1408; a
    # shared expert of 5632 (its Linear(2048, 1) gate is a dot product, not listed)
    assert rows(made(FIXTURES / "qwen1.5-moe-a2.7b.json")) == [
        ("attn_qkv", 6144, 2048, "qkv", 1, 1, "", ""),  # (16 + 2 * 16) * 128 = 6144
        ("attn_o", 2048, 2048, "row", 1, 1, "", ""),
        ("moe_router", 60, 2048, "none", 1, 1, "", "router"),
        ("moe_w13", 2816, 2048, "column", 60, 4, "", ""),  # 2 * 1408
        ("moe_w2", 2048, 1408, "row", 60, 4, "", ""),
        ("moe_shared_gate_up", 11264, 2048, "column", 1, 1, "", "shared_expert"),  # 2 * 5632
        ("moe_shared_down", 2048, 5632, "row", 1, 1, "", "shared_expert"),
        ("lm_head", 151936, 2048, "vocab", 1, 1, "", ""),
    ]
    # 0 means no shared expert
    cfg = dict(fixture("qwen1.5-moe-a2.7b"), shared_expert_intermediate_size=0)
    assert not [g for g in made(cfg).gemms if "shared" in g.name]


LLAMA4_ATTN = [
    ("attn_qkv", 7168, 5120, "qkv", 1, 1, "", ""),  # (40 + 2 * 8) heads * 128 = 7168
    ("attn_o", 5120, 5120, "row", 1, 1, "", ""),  # K = 40 * 128 = 5120
]


def test_llama4_scout():
    # text_config: hidden 5120; 16 experts top-1 of 8192 plus a shared expert of 8192 in every layer
    # (interleave_moe_layer_step 1): intermediate_size_mlp (16384) is in the config but no layer uses it
    assert rows(made(FIXTURES / "llama4-scout.json")) == LLAMA4_ATTN + [
        ("moe_router", 16, 5120, "none", 1, 1, "", "router"),
        ("moe_w13", 16384, 5120, "column", 16, 1, "", ""),  # 2 * 8192
        ("moe_w2", 5120, 8192, "row", 16, 1, "", ""),
        ("moe_shared_gate_up", 16384, 5120, "column", 1, 1, "", "shared_expert"),  # 2 * 8192
        ("moe_shared_down", 5120, 8192, "row", 1, 1, "", "shared_expert"),
        ("lm_head", 202048, 5120, "vocab", 1, 1, "", ""),
    ]


def test_llama4_maverick():
    # interleave_moe_layer_step 2: layers 1, 3, ..., 47 MoE (128 experts top-1 of 8192 + shared 8192), the 24 others
    # a dense MLP of intermediate_size_mlp 16384
    s = made(FIXTURES / "llama4-maverick.json")
    assert rows(s) == LLAMA4_ATTN + [
        ("mlp_gate_up", 32768, 5120, "column", 1, 1, "dense", "mlp"),  # 2 * 16384
        ("mlp_down", 5120, 16384, "row", 1, 1, "dense", "mlp"),
        ("moe_router", 128, 5120, "none", 1, 1, "moe", "router"),
        ("moe_w13", 16384, 5120, "column", 128, 1, "moe", ""),
        ("moe_w2", 5120, 8192, "row", 128, 1, "moe", ""),
        ("moe_shared_gate_up", 16384, 5120, "column", 1, 1, "moe", "shared_expert"),
        ("moe_shared_down", 5120, 8192, "row", 1, 1, "moe", "shared_expert"),
        ("lm_head", 202048, 5120, "vocab", 1, 1, "", ""),
    ]
    assert "48 layers: 24 dense, 24 MoE" in s.description


def test_llama4_text_only_config():
    # Llama4ForCausalLM: the same fields at the top level (model_type llama4_text)
    text = dict(fixture("llama4-scout")["text_config"], architectures=["Llama4ForCausalLM"])
    assert rows(made(text)) == rows(made(FIXTURES / "llama4-scout.json"))


def test_gpt_oss_120b():
    # hidden 2880, 64 query heads, 8 KV heads, head_dim 64; 128 experts top-4 of 2880
    assert rows(made(FIXTURES / "gpt-oss-120b.json")) == [
        ("attn_qkv", 5120, 2880, "qkv", 1, 1, "", ""),  # (64 + 2 * 8) * 64 = 5120
        ("attn_o", 2880, 4096, "row", 1, 1, "", ""),  # K = 64 * 64 = 4096
        ("moe_router", 128, 2880, "none", 1, 1, "", "router"),
        ("moe_w13", 5760, 2880, "column", 128, 4, "", ""),  # 2 * 2880
        ("moe_w2", 2880, 2880, "row", 128, 4, "", ""),
        ("lm_head", 201088, 2880, "vocab", 1, 1, "", ""),
    ]
    # either top-k field alone is enough
    cfg = fixture("gpt-oss-120b")
    for key in ("experts_per_token", "num_experts_per_tok"):
        assert rows(made({k: v for k, v in cfg.items() if k != key}))[3][5] == 4


def test_llama3_405b():
    # hidden 16384, 128 query heads, 8 KV heads, head dim 16384 / 128 = 128; intermediate 53248
    assert rows(made(FIXTURES / "llama3-405b.json")) == [
        ("attn_qkv", 18432, 16384, "qkv", 1, 1, "", ""),  # (128 + 2 * 8) * 128 = 18432
        ("attn_o", 16384, 16384, "row", 1, 1, "", ""),
        ("mlp_gate_up", 106496, 16384, "column", 1, 1, "", "mlp"),  # 2 * 53248
        ("mlp_down", 16384, 53248, "row", 1, 1, "", "mlp"),
        ("lm_head", 128256, 16384, "vocab", 1, 1, "", ""),
    ]


def test_qwen2_5_72b():
    # hidden 8192, 64 query heads, 8 KV heads, head dim 8192 / 64 = 128; intermediate 29568
    assert rows(made(FIXTURES / "qwen2.5-72b.json")) == [
        ("attn_qkv", 10240, 8192, "qkv", 1, 1, "", ""),  # (64 + 2 * 8) * 128 = 10240
        ("attn_o", 8192, 8192, "row", 1, 1, "", ""),
        ("mlp_gate_up", 59136, 8192, "column", 1, 1, "", "mlp"),  # 2 * 29568
        ("mlp_down", 8192, 29568, "row", 1, 1, "", "mlp"),
        ("lm_head", 152064, 8192, "vocab", 1, 1, "", ""),
    ]


def test_llama3_70b_matches_the_hand_written_builtin():
    s = made(FIXTURES / "llama3-70b.json")
    assert rows(s) == rows(load("llama70b"))  # attn_qkv (64 + 2 * 8) * 128 = 10240, mlp_gate_up 2 * 28672 = 57344
    assert s.m_values == shapes.DECODE_M + shapes.PREFILL_M


def test_mixtral_8x7b_matches_the_hand_written_builtin_plus_router_and_lm_head():
    s = made(FIXTURES / "mixtral-8x7b.json")
    builtin = rows(load("mixtral-moe"))  # attn_qkv, attn_o, moe_w13 (2 * 14336, E 8 top-2), moe_w2
    assert rows(s) == builtin[:2] + [("moe_router", 8, 4096, "none", 1, 1, "", "router")] + builtin[2:] + [
        ("lm_head", 32000, 4096, "vocab", 1, 1, "", "")
    ]


def test_dense_families_and_head_dim():
    # Mistral-Nemo-like: head_dim 128 given although 5120 / 32 = 160; KV heads default to the query heads (MHA)
    nemo = {"architectures": ["MistralForCausalLM"], "hidden_size": 5120, "intermediate_size": 14336,
            "num_attention_heads": 32, "head_dim": 128, "vocab_size": 131072}  # fmt: skip
    assert rows(made(nemo, name="nemo"))[:2] == [
        ("attn_qkv", 12288, 5120, "qkv", 1, 1, "", ""),  # (32 + 2 * 32) * 128 = 12288
        ("attn_o", 5120, 4096, "row", 1, 1, "", ""),  # K = 32 * 128 = 4096
    ]
    # Qwen3-8B (dense): hidden 4096, 32 heads, 8 KV heads, head_dim 128, intermediate 12288
    qwen3 = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "intermediate_size": 12288,
             "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}  # fmt: skip
    assert rows(made(qwen3, name="q"))[:3] == [
        ("attn_qkv", 6144, 4096, "qkv", 1, 1, "", ""),  # (32 + 16) * 128 = 6144
        ("attn_o", 4096, 4096, "row", 1, 1, "", ""),
        ("mlp_gate_up", 24576, 4096, "column", 1, 1, "", "mlp"),  # 2 * 12288
    ]
    # "head_dim": null means derive it: 8192 / 64 = 128
    assert rows(made(dict(fixture("llama3-70b"), head_dim=None)))[0][1] == (64 + 16) * 128


def test_model_type_names_the_family_when_architectures_is_missing():
    cfg = {k: v for k, v in fixture("mixtral-8x7b").items() if k != "architectures"}  # model_type "mixtral"
    assert rows(made(cfg)) == rows(made(FIXTURES / "mixtral-8x7b.json"))


def test_set_name_and_source():
    cfg = fixture("llama3-70b")
    assert from_hf_config(cfg)[0] == "llama"  # no _name_or_path: the model_type
    assert from_hf_config(dict(cfg, _name_or_path="/models/Meta-Llama-3-70B/"))[0] == "meta-llama-3-70b"
    name, text = from_hf_config(cfg, name="given", source="my/config.json")
    assert name == "given" and load_text("t", text).name == "given"
    assert text.startswith("# Generated by gemmbench from the Hugging Face config my/config.json\n")
    assert "(from my/config.json)" in load_text("t", text).description
    with pytest.raises(ShapeError) as e:
        from_hf_config({k: v for k, v in cfg.items() if k != "model_type"})
    assert str(e.value) == "config: missing field '_name_or_path' or 'model_type' (or pass a name)"


def test_the_yaml_shows_the_arithmetic():
    _, text = from_hf_config(FIXTURES / "deepseek-v3.json")
    assert "  - {id: mla_q_b, N: 24576, K: 1536, parallel: column}  # 128 heads * (128 nope + 64 rope)\n" in text


# ---------------------------------------------------------------- the built-in model sets


def _generator():
    spec = importlib.util.spec_from_file_location("make_model_sets", ROOT / "scripts" / "make-model-sets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_builtin_model_sets_are_what_their_configs_make():
    gen = _generator()
    assert sorted(gen.MODEL_SETS) == sorted(
        ["deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama4-scout", "llama4-maverick", "gpt-oss-120b",
         "llama3-405b", "qwen2.5-72b"]
    )  # fmt: skip
    for name in gen.MODEL_SETS:
        committed = (ROOT / "gemmbench" / "shapesets" / f"{name}.yaml").read_text(encoding="utf-8")
        assert committed == gen.render(name), f"gemmbench/shapesets/{name}.yaml: run scripts/make-model-sets.py"
        s = load(name)
        assert s.name == name and s.m_values == shapes.DECODE_M + shapes.PREFILL_M
        assert rows(s) == rows(made(FIXTURES / f"{name}.json"))
    assert gen.main(["--check"]) == 0


# ---------------------------------------------------------------- refused configs


def raises(config) -> str:
    with pytest.raises(ShapeError) as e:
        from_hf_config(config)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def without(cfg: dict, *keys: str) -> dict:
    return {k: v for k, v in cfg.items() if k not in keys}


def test_unreadable_files(tmp_path):
    (tmp_path / "a.json").write_text("{\n  'hidden_size': 8192\n}")
    assert raises(tmp_path / "a.json").startswith(f"{tmp_path / 'a.json'}: not JSON (line 2): ")
    (tmp_path / "b.json").write_text("[1, 2]")
    assert (
        raises(tmp_path / "b.json") == f"{tmp_path / 'b.json'}: not a model config (top level is list, not an object)"
    )
    assert raises(tmp_path / "c.json") == f"{tmp_path / 'c.json'}: cannot read: No such file or directory"


def test_unknown_architecture():
    msg = raises(dict(fixture("llama3-70b"), architectures=["FalconForCausalLM"]))
    assert msg.startswith("config: field 'architectures': 'FalconForCausalLM' is not an architecture gemmbench knows (")
    assert "DeepseekV3ForCausalLM" in msg
    assert raises(dict(fixture("llama3-70b"), architectures="LlamaForCausalLM")) == (
        "config: field 'architectures' must be a list of class names, got 'LlamaForCausalLM'"
    )
    msg = raises(without(dict(fixture("llama3-70b"), model_type="falcon"), "architectures"))
    assert msg.startswith("config: field 'model_type': 'falcon' is not a model type gemmbench knows (")
    assert raises(without(fixture("llama3-70b"), "architectures", "model_type")) == (
        "config: missing field 'architectures' (or 'model_type')"
    )


@pytest.mark.parametrize(
    "name, field",
    [
        ("llama3-70b", "intermediate_size"),
        ("mixtral-8x7b", "num_local_experts"),
        ("mixtral-8x7b", "num_experts_per_tok"),
        ("qwen3-30b-a3b", "moe_intermediate_size"),
        ("qwen3-30b-a3b", "num_hidden_layers"),
        ("deepseek-v3", "kv_lora_rank"),
        ("deepseek-v3", "v_head_dim"),
        ("deepseek-v3", "first_k_dense_replace"),
        ("deepseek-v3", "n_routed_experts"),
        ("gpt-oss-120b", "vocab_size"),
    ],
)
def test_missing_field(name, field):
    assert raises(without(fixture(name), field)) == f"config: missing field {field!r}"


def test_missing_fields_with_a_reason():
    assert raises(without(fixture("deepseek-v3"), "q_lora_rank")) == (
        "config: missing field 'q_lora_rank' (null where queries are not compressed)"
    )
    assert raises(without(fixture("gpt-oss-120b"), "experts_per_token", "num_experts_per_tok")) == (
        "config: missing field 'experts_per_token' (or 'num_experts_per_tok')"
    )
    assert raises(without(fixture("llama4-scout"), "text_config")) == (
        "config: missing field 'text_config' (an object with the language model's fields)"
    )
    cfg = fixture("llama4-scout")
    del cfg["text_config"]["intermediate_size"]
    assert raises(cfg) == "config: missing field 'text_config.intermediate_size'"


@pytest.mark.parametrize(
    "name, field, value, expected",
    [
        ("llama3-70b", "hidden_size", 0, "must be a positive integer, got 0"),
        ("llama3-70b", "hidden_size", "8192", "must be a positive integer, got '8192'"),
        ("llama3-70b", "vocab_size", True, "must be a positive integer, got True"),
        ("deepseek-v3", "n_routed_experts", -256, "must be a positive integer, got -256"),
        ("deepseek-v3", "moe_intermediate_size", 0, "must be a positive integer, got 0"),
        ("deepseek-v3", "q_lora_rank", 0, "must be a positive integer, got 0"),
        ("deepseek-v3", "first_k_dense_replace", -1, "must be a non-negative integer, got -1"),
        ("qwen1.5-moe-a2.7b", "shared_expert_intermediate_size", -1, "must be a non-negative integer, got -1"),
        ("qwen3-30b-a3b", "decoder_sparse_step", 0, "must be a positive integer, got 0"),
        ("qwen3-30b-a3b", "mlp_only_layers", [48], "must be a list of layer indices 0..47, got [48]"),
        ("gpt-oss-120b", "num_local_experts", 0.5, "must be a positive integer, got 0.5"),
    ],
)
def test_bad_sizes(name, field, value, expected):
    assert raises(dict(fixture(name), **{field: value})) == f"config: field {field!r} {expected}"


def test_bad_size_under_text_config():
    cfg = fixture("llama4-maverick")
    cfg["text_config"]["intermediate_size_mlp"] = 0  # Maverick has dense layers: their size must be positive
    assert raises(cfg) == "config: field 'text_config.intermediate_size_mlp' must be a positive integer, got 0"


@pytest.mark.parametrize(
    "name, extra, field",
    [
        ("llama3-70b", {"num_local_experts": 8}, "num_local_experts"),  # an MoE field on a dense family
        ("qwen2.5-72b", {"num_experts": 64, "num_experts_per_tok": 8}, "num_experts"),
        ("llama3-405b", {"q_lora_rank": 1536}, "q_lora_rank"),  # an MLA field on GQA attention
        ("mixtral-8x7b", {"n_shared_experts": 1}, "n_shared_experts"),  # a shared expert Mixtral has not
        ("qwen3-30b-a3b", {"shared_expert_intermediate_size": 4096}, "shared_expert_intermediate_size"),
        ("gpt-oss-120b", {"first_k_dense_replace": 1}, "first_k_dense_replace"),
        ("deepseek-v3", {"num_local_experts": 256}, "num_local_experts"),
    ],
)
def test_fields_a_family_cannot_place(name, extra, field):
    arch = fixture(name)["architectures"][0]
    value = extra[field]
    assert raises(dict(fixture(name), **extra)) == (
        f"config: field {field!r} = {value!r} is not read by {arch}: gemmbench cannot place it (is the architecture right?)"
    )


def test_inert_values_of_unread_fields_are_no_error():
    # null, 0 and [] say "none": a dense config may carry them
    cfg = dict(fixture("llama3-70b"), num_local_experts=None, n_shared_experts=0, mlp_only_layers=[])
    assert rows(made(cfg)) == rows(load("llama70b"))


def test_topk_above_experts():
    assert raises(dict(fixture("qwen3-30b-a3b"), num_experts_per_tok=129)) == (
        "config: field 'num_experts_per_tok' (129) exceeds the number of experts ('num_experts' = 128)"
    )
    cfg = fixture("llama4-scout")
    cfg["text_config"]["num_experts_per_tok"] = 17
    assert raises(cfg) == (
        "config: field 'text_config.num_experts_per_tok' (17) exceeds the number of experts "
        "('text_config.num_local_experts' = 16)"
    )
    assert raises(dict(fixture("gpt-oss-120b"), num_experts_per_tok=2)) == (
        "config: field 'num_experts_per_tok' (2) differs from experts_per_token (4)"
    )


def test_attention_heads_that_do_not_fit():
    assert raises(dict(fixture("llama3-70b"), num_key_value_heads=7)) == (
        "config: field 'num_key_value_heads' (7) does not divide num_attention_heads (64)"
    )
    assert raises(dict(fixture("llama3-70b"), num_attention_heads=48, num_key_value_heads=8)) == (
        "config: field 'hidden_size' (8192) is not divisible by num_attention_heads (48) and no head_dim is given"
    )


# ---------------------------------------------------------------- through the CLI


def cli(*args):
    return CliRunner().invoke(app, ["shapes", "from-config", *map(str, args)])


def one_error_line(res) -> str:
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    assert res.stdout == "" and "Traceback" not in res.stderr
    lines = [ln for ln in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", res.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_cli_writes_a_model_set(tmp_path):
    out = tmp_path / "ds.yaml"
    res = cli(FIXTURES / "deepseek-v3.json", "--name", "ds", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert rows(load(str(out))) == rows(load("deepseek-v3"))


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda c: c.update(architectures=["GPT2LMHeadModel"]), "field 'architectures': 'GPT2LMHeadModel' is not"),
        (
            lambda c: c.update(num_experts_per_tok=300),
            "field 'num_experts_per_tok' (300) exceeds the number of experts",
        ),
        (lambda c: c.update(hidden_size=0), "field 'hidden_size' must be a positive integer, got 0"),
        (lambda c: c.pop("kv_lora_rank"), "missing field 'kv_lora_rank'"),
        (lambda c: c.update(architectures=["LlamaForCausalLM"]), "field 'n_routed_experts' = 256 is not read by"),
    ],
)
def test_cli_refuses_a_config_in_one_line(tmp_path, change, expected):
    cfg = copy.deepcopy(fixture("deepseek-v3"))
    change(cfg)
    path, out = tmp_path / "config.json", tmp_path / "out.yaml"
    path.write_text(json.dumps(cfg))
    line = one_error_line(cli(path, "--out", out))
    assert str(path) in line and expected in line, line
    assert not out.exists()


def test_cli_not_json_writes_nothing(tmp_path):
    (tmp_path / "config.json").write_text("{hidden_size: 1")
    line = one_error_line(cli(tmp_path / "config.json", "--out", tmp_path / "out.yaml"))
    assert "not JSON" in line and not (tmp_path / "out.yaml").exists()


# ---------------------------------------------------------------- the layer and role keys of a shape set


def gemm_entry(extra: str) -> str:
    return f"name: x\ngemms: [{{id: g, N: 8, K: 8, parallel: none{extra}}}]\n"


def test_layer_and_role_keys_load():
    s = load_text("t", "name: x\ngemms: [{id: r, N: 8, K: 16, parallel: none, layer: moe, role: router},\n"
                  "  {id: d, N: 8, K: 16, parallel: row, layer: dense-2}, {id: a, N: 8, K: 16, parallel: row}]\n")  # fmt: skip
    assert [(g.name, g.layer, g.role) for g in s.gemms] == [("r", "moe", "router"), ("d", "dense-2", ""), ("a", "", "")]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            ", layer: ''",
            "layer must be a layer kind such as dense or moe (a letter, then letters, digits, _ or -), got ''",
        ),
        (
            ", layer: 3",
            "layer must be a layer kind such as dense or moe (a letter, then letters, digits, _ or -), got 3",
        ),
        (", layer: 'moe layer'", "layer must be a layer kind such as dense or moe"),
        (", role: gate", "role must be one of router, mlp, shared_expert, got 'gate'"),
        (", role: router, E: 8, topk: 2", "a router is one dense GEMM (N = the experts it routes to), but E is 8"),
    ],
)
def test_layer_and_role_keys_refused(extra, expected):
    with pytest.raises(ShapeError) as e:
        load_text("t", gemm_entry(extra))
    assert str(e.value).startswith(f"t: gemm 'g': {expected}")


@pytest.mark.parametrize(
    "config, chunks",
    [("deepseek-v3", True), ("deepseek-v2-lite", True), ("qwen3-30b-a3b", True), ("llama4-scout", True),
     ("gpt-oss-120b", True), ("mixtral-8x7b", False), ("qwen1.5-moe-a2.7b", False), ("llama3.1-8b", False)],
)  # fmt: skip
def test_a_set_says_whether_vllm_chunks_its_moe_blocks(config, chunks):
    """vLLM's deepseek_v2.py, qwen3_moe.py, llama4.py and gpt_oss.py chunk an MoE block's tokens across TP under
    sequence-parallel MoE; mixtral.py and qwen2_moe.py do not, and a dense model has no MoE block (USAGE: Sharding)."""
    assert made(FIXTURES / f"{config}.json").moe_sequence_parallel is chunks
