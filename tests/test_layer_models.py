"""`gemmbench layer` for today's models: MLA projections in order, one layer per kind of layer
(DeepSeek-V3's dense prefix and its MoE layers, Llama-4 Maverick's alternating ones), the router inside the routing
step, shared experts after the routed ones, expert parallelism; and a tiny model of that structure end to end on
the CPU.  The large models are only turned into step sequences (no buffers)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gemmbench.cli import app
from gemmbench.engine import layer_plan as P
from gemmbench.models import shape_sets
from gemmbench.results import side_tables


def steps_of(model: str, kind: str, tp: int = 1, ep: int = 1, M: int = 16):
    return P.steps_for(P.layer_problems(P.resolve_model(model), M, "bf16", tp, ep, kind), lambda p: "v")


def dims(steps) -> dict:
    return {s.name: (s.problem.N, s.problem.K, s.problem.E, s.problem.topk, s.problem.ep) for s in steps if s.is_gemm}


MLA = ["mla_qkv_a", "mla_q_b", "mla_kv_b", "attn_o"]  # q_a and kv_a fused, as vLLM and SGLang run them


def test_deepseek_v3_has_a_dense_and_an_moe_layer_mla_first_router_in_the_routing_step():
    assert P.layer_kinds(shape_sets.load("deepseek-v3")) == ["dense", "moe"]
    dense = steps_of("deepseek-v3", "dense")
    assert [s.name for s in dense] == MLA + ["mlp_gate_up", "mlp_down"]
    moe = steps_of("deepseek-v3", "moe")
    # the router GEMM (256 x 7168) is the routing step's own first launch: not a step of its own
    assert [s.name for s in moe] == MLA + ["routing", "moe_w13", "moe_w2", "moe_shared_gate_up", "moe_shared_down"]
    assert moe[4].routes == (256, 8)


def test_deepseek_v3_dims_at_tp8_ep8():
    d = dims(steps_of("deepseek-v3", "moe", tp=8, ep=8))
    assert d["mla_qkv_a"] == (1536 + 576, 7168, 1, 1, 1)  # replicated: q_lora 1536, kv_lora 512 + rope 64
    assert d["mla_q_b"] == (24576 // 8, 1536, 1, 1, 1)  # 128 heads * 192 / TP 8 = 3072
    assert d["mla_kv_b"] == (32768 // 8, 512, 1, 1, 1)  # 128 heads * (128 + 128) / 8 = 4096
    assert d["attn_o"] == (7168, 16384 // 8, 1, 1, 1)  # row-parallel: K 128 * 128 / 8 = 2048
    # experts: 256 over 8 ranks (32 local), each whole (EP = TP x DP: experts' TP 1): w13 N 4096, w2 K 2048
    assert d["moe_w13"] == (4096, 7168, 256, 8, 8) and d["moe_w2"] == (7168, 2048, 256, 8, 8)
    assert d["moe_shared_gate_up"] == (512, 7168, 1, 1, 1) and d["moe_shared_down"] == (7168, 256, 1, 1, 1)
    # the dense prefix layer has no experts: it is the same layer at any EP degree
    dd = dims(steps_of("deepseek-v3", "dense", tp=8, ep=8))
    assert dd["mlp_gate_up"] == (36864 // 8, 7168, 1, 1, 1) and dd["mlp_down"] == (7168, 18432 // 8, 1, 1, 1)


@pytest.mark.parametrize(
    "model, kinds, moe_steps",
    [
        ("qwen3-30b-a3b", [""], ["attn_qkv", "attn_o", "routing", "moe_w13", "moe_w2"]),
        ("gpt-oss-120b", [""], ["attn_qkv", "attn_o", "routing", "moe_w13", "moe_w2"]),
        (
            "llama4-maverick",
            ["dense", "moe"],
            ["attn_qkv", "attn_o", "routing", "moe_w13", "moe_w2", "moe_shared_gate_up", "moe_shared_down"],
        ),
    ],
)
def test_moe_models_layer_kinds_and_steps(model, kinds, moe_steps):
    assert P.layer_kinds(shape_sets.load(model)) == kinds
    assert [s.name for s in steps_of(model, kinds[-1])] == moe_steps
    if "dense" in kinds:
        assert [s.name for s in steps_of(model, "dense")] == ["attn_qkv", "attn_o", "mlp_gate_up", "mlp_down"]


def test_kind_empty_is_every_gemm_and_dense_models_have_one_kind():
    assert P.layer_kinds(shape_sets.load("llama70b")) == [""]
    every = [s.name for s in steps_of("deepseek-v3", "")]
    assert "mlp_gate_up" in every and "moe_w13" in every and "moe_router" not in every and "lm_head" not in every


TINY = """\
name: tiny-deepseek
m: [3]
gemms:
  - {id: mla_q_a, N: 32, K: 64, parallel: none}
  - {id: mla_q_b, N: 48, K: 32, parallel: column}
  - {id: attn_o, N: 64, K: 48, parallel: row}
  - {id: mlp_gate_up, N: 96, K: 64, parallel: column, layer: dense}
  - {id: mlp_down, N: 64, K: 48, parallel: row, layer: dense}
  - {id: moe_router, N: 4, K: 64, parallel: none, layer: moe, role: router}
  - {id: moe_w13, N: 32, K: 64, parallel: column, E: 4, topk: 2, layer: moe}
  - {id: moe_w2, N: 64, K: 16, parallel: row, E: 4, topk: 2, layer: moe}
  - {id: moe_shared_gate_up, N: 32, K: 64, parallel: column, layer: moe}
  - {id: moe_shared_down, N: 64, K: 16, parallel: row, layer: moe}
  - {id: lm_head, N: 100, K: 64, parallel: column}
"""


def test_a_model_with_two_kinds_of_layer_runs_end_to_end_on_the_cpu_at_ep2(tmp_path):
    model = tmp_path / "tiny.yaml"
    model.write_text(TINY)
    out = tmp_path / "layers.parquet"
    res = CliRunner().invoke(app, ["layer", "--model", str(model), "--tp", "2", "--ep", "2", "--m", "3", "--dtype", "fp16", "--budget", "0.01",
                                   "--variants", "cublas_*,torch_moe_loop", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.stderr
    df = side_tables.load_layer_tables([out])
    layers = df[df["part"] == "layer"]
    assert sorted(layers["layer_kind"]) == ["dense", "moe"] and (layers["status"] == "ok").all()
    moe = df[(df["part"] == "step") & (df["layer_kind"] == "moe")]
    assert list(moe["gemm"]) == ["mla_q_a", "mla_q_b", "attn_o", "routing", "moe_w13", "moe_w2",
                                 "moe_shared_gate_up", "moe_shared_down"]  # fmt: skip
    assert set(moe["ep"]) == {2}
    dense = df[(df["part"] == "step") & (df["layer_kind"] == "dense")]
    assert list(dense["gemm"]) == ["mla_q_a", "mla_q_b", "attn_o", "mlp_gate_up", "mlp_down"]
    assert "tiny-deepseek dense layer" in res.stdout and "tiny-deepseek moe layer" in res.stdout
