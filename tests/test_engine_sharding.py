"""Rank 0's view of every GEMM of every public Hugging Face config in tests/fixtures/hf-configs, under vLLM's
tensor, data and expert parallelism, against a second derivation written here.

The expected values come from the engine rules worked independently here: `derive` reads the raw config JSON with
plain arithmetic and imports nothing from gemmbench.  The rules are vLLM's:

  QKVParallelLinear          heads/TP query heads; kv/TP KV heads, or one copied KV head once TP >= kv
  (Merged)Column/RowParallel N/TP (gate and up each divided) or K/TP; ReplicatedLinear whole
  ParallelLMHead             the vocabulary padded to a multiple of 64 (pad_vocab_size), then divided by TP
  FusedMoEParallelConfig     experts split over world / EP GPUs (world = TP x DP; EP is 1 or the world), and the
                             tokens of the DP group (M x DP) routed together
  determine_expert_map       rank 0 holds ceil(E / EP) experts
  use_sequence_parallel_moe  (vllm/config/parallel.py at 00193b8, default all2all backend allgather_reducescatter)
                             with EP = world, TP > 1 and DP > 1, the MoE blocks of the model files that chunk
                             (deepseek_v2.py, qwen3_moe.py, llama4.py, gpt_oss.py; not mixtral.py, qwen2_moe.py)
                             give each TP rank ceil(M / TP) of its DP rank's tokens: router and shared experts on
                             that share, shared experts whole (disable_tp), experts on world x ceil(M / TP) tokens

A size a deployment cannot divide is refused by vLLM (its divide() asserts): there gemmbench must raise ShapeError.
gemmbench's answer is gemmbench.models.sharding.problems on the set gemmbench.models.hf_config.from_hf_config makes of the file.
"""

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from gemmbench.models.hf_config import from_hf_config
from gemmbench.models.shape_sets import load_text
from gemmbench.models.sharding import problems
from gemmbench.shapes import ShapeError

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"
CONFIGS = sorted(p.stem for p in FIXTURES.glob("*.json"))
TPS = (1, 2, 4, 8)
DPS = (1, 8)
MS = (1, 16)  # M = 1 and M > 1: expert GEMMs must scale M by DP, the others must not
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE

# A fixture with one field changed, to reach rules no published config at TP <= 8 trips (key: (fixture, changes))
MUTATIONS = {
    "llama3.1-8b-inter14004": ("llama3.1-8b", {"intermediate_size": 14004}),  # 14004 / 8 is not whole
    "qwen3-8b-kv12": ("qwen3-8b", {"num_attention_heads": 48, "num_key_value_heads": 12}),  # 12 KV heads vs TP 8
    "qwen2-7b-kv3": ("qwen2-7b", {"num_attention_heads": 24, "num_key_value_heads": 3, "hidden_size": 3072}),
    "qwen2-7b-kv-null": ("qwen2-7b", {"num_key_value_heads": None}),  # no GQA: kv = heads
    "qwen3-30b-a3b-moe772": ("qwen3-30b-a3b", {"moe_intermediate_size": 772}),  # 772 = 4 x 193: experts_tp <= 4
    "qwen3-30b-a3b-mlp-only-0": ("qwen3-30b-a3b", {"mlp_only_layers": [0]}),  # one dense layer
    "qwen3-30b-a3b-sparse-step-2": ("qwen3-30b-a3b", {"decoder_sparse_step": 2}),  # every other layer dense
    "deepseek-v3-no-dense": ("deepseek-v3", {"first_k_dense_replace": 0}),  # every layer MoE
}

LLAMA4 = "Llama4ForConditionalGeneration"
MLA = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"}
QWEN_MOE = {"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"}
ALL_LAYERS_MOE = {"MixtralForCausalLM", "GptOssForCausalLM"}
# the model files whose MoE blocks chunk tokens across TP under sequence-parallel MoE, read from vLLM's source
CHUNKING = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM", LLAMA4, "GptOssForCausalLM"}
DEPLOYMENT = "deployment"  # the refused "GEMM" when the flags themselves are refused


# ---------------------------------------------------------------- the second derivation (no gemmbench)


@dataclass(frozen=True)
class Rank:
    """One GEMM as rank 0 runs it; the field names are Problem's."""

    M: int
    N: int
    K: int
    E: int = 1
    topk: int = 1
    local_experts: int = 1
    ep: int = 1


def moe_layers(arch: str, c: dict) -> list[bool]:
    """Which decoder layers are MoE, by each family's own rule (HF config defaults where a field is absent)."""
    layers = range(c["num_hidden_layers"])
    if arch in MLA:
        first, freq = c.get("first_k_dense_replace", 0), c.get("moe_layer_freq", 1)
        return [i >= first and i % freq == 0 for i in layers]
    if arch in QWEN_MOE:
        dense, step = c.get("mlp_only_layers") or [], c.get("decoder_sparse_step", 1)
        return [i not in dense and (i + 1) % step == 0 for i in layers]
    if arch == LLAMA4:
        return [(i + 1) % c.get("interleave_moe_layer_step", 1) == 0 for i in layers]
    return [arch in ALL_LAYERS_MOE for _ in layers]


def shared_intermediate(arch: str, c: dict) -> int:
    """The shared expert's intermediate size, 0 for none."""
    if arch == "Qwen2MoeForCausalLM":
        return c.get("shared_expert_intermediate_size") or 0
    if arch in MLA:
        return (c.get("n_shared_experts") or 0) * c["moe_intermediate_size"]
    if arch == LLAMA4:
        return c["intermediate_size"]
    return 0


def derive(cfg: dict, tp: int, dp: int, ep: int, m: int) -> tuple[dict[str, Rank], set[str]]:
    """Rank 0's GEMMs {id: Rank} for M tokens a DP rank, and the ids whose division the deployment refuses
    (DEPLOYMENT where the flags are refused); any refused id refuses the whole deployment."""
    arch = cfg["architectures"][0]
    c = cfg["text_config"] if arch == LLAMA4 else cfg  # a vision-language config: the decoder is text_config
    world = tp * dp
    hidden = c["hidden_size"]
    gemms: dict[str, Rank] = {}
    refused: set[str] = set()
    if ep not in (1, world):  # FusedMoEParallelConfig: experts split over the world, or whole on each GPU
        refused.add(DEPLOYMENT)

    def part(gemm: str, size: int, ways: int) -> int:
        if size % ways:
            refused.add(gemm)
        return size // ways

    def dense(gemm: str, n: int, k: int) -> None:
        gemms[gemm] = Rank(m, n, k)

    heads = c["num_attention_heads"]
    if arch in MLA:
        nope, rope, v_dim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        kv_rank, q_rank = c["kv_lora_rank"], c.get("q_lora_rank")
        if q_rank is None:  # V2-Lite: q projected straight from the hidden state
            dense("mla_q", part("mla_q", heads * (nope + rope), tp), hidden)
            dense("mla_kv_a", kv_rank + rope, hidden)
        else:
            dense("mla_qkv_a", q_rank + kv_rank + rope, hidden)
            dense("mla_q_b", part("mla_q_b", heads * (nope + rope), tp), q_rank)
        dense("mla_kv_b", part("mla_kv_b", heads * (nope + v_dim), tp), kv_rank)
        dense("attn_o", hidden, part("attn_o", heads * v_dim, tp))
    else:
        kv = c.get("num_key_value_heads") or heads
        head_dim = c.get("head_dim") or hidden // heads
        if heads % tp:
            refused.add("attn_qkv")
        if tp < kv:
            kv_local = part("attn_qkv", kv, tp)
        else:  # each KV head copied to TP / kv GPUs
            if tp % kv:
                refused.add("attn_qkv")
            kv_local = 1
        dense("attn_qkv", (heads // tp + 2 * kv_local) * head_dim, hidden)
        dense("attn_o", hidden, part("attn_o", heads * head_dim, tp))

    kinds = moe_layers(arch, c)
    if not all(kinds):
        inter = c["intermediate_size_mlp"] if arch == LLAMA4 else c["intermediate_size"]
        dense("mlp_gate_up", 2 * part("mlp_gate_up", inter, tp), hidden)
        dense("mlp_down", hidden, part("mlp_down", inter, tp))
    if any(kinds):
        experts = c.get("num_local_experts") or c.get("num_experts") or c["n_routed_experts"]
        topk = c["experts_per_token"] if arch == "GptOssForCausalLM" else c["num_experts_per_tok"]
        moe_inter = c["moe_intermediate_size"] if arch in QWEN_MOE | MLA else c["intermediate_size"]
        experts_tp = world // ep
        routed = {"E": experts, "topk": topk, "local_experts": -(-experts // ep), "ep": ep}
        chunk = arch in CHUNKING and ep == world > 1 and tp > 1 and dp > 1  # sequence-parallel MoE
        share = -(-m // tp)  # this TP rank's share of its DP rank's tokens
        routed_m = world * share if chunk else m * dp
        gemms["moe_router"] = Rank(share if chunk else m, experts, hidden)
        gemms["moe_w13"] = Rank(routed_m, 2 * part("moe_w13", moe_inter, experts_tp), hidden, **routed)
        gemms["moe_w2"] = Rank(routed_m, hidden, part("moe_w2", moe_inter, experts_tp), **routed)
        shared = shared_intermediate(arch, c)
        if shared and chunk:  # this rank's share of the tokens, the shared expert whole
            gemms["moe_shared_gate_up"] = Rank(share, 2 * shared, hidden)
            gemms["moe_shared_down"] = Rank(share, hidden, shared)
        elif shared:  # every token, on its own DP rank: divided by TP like a dense MLP
            dense("moe_shared_gate_up", 2 * part("moe_shared_gate_up", shared, tp), hidden)
            dense("moe_shared_down", hidden, part("moe_shared_down", shared, tp))
    padded = -(-c["vocab_size"] // VOCAB_PADDING) * VOCAB_PADDING
    dense("lm_head", part("lm_head", padded, tp), hidden)
    return gemms, refused


# ---------------------------------------------------------------- gemmbench's answer


@lru_cache(maxsize=None)
def raw(config: str) -> dict:
    """The config's JSON: a fixture's, or a mutation's (a fixture with fields changed)."""
    if config in MUTATIONS:
        base, changes = MUTATIONS[config]
        return {**raw(base), **changes}
    return json.loads((FIXTURES / f"{config}.json").read_text())


@lru_cache(maxsize=None)
def shape_set(config: str):
    if config in MUTATIONS:
        _, text = from_hf_config(raw(config), name=config)
        return load_text(config, text)
    path = FIXTURES / f"{config}.json"
    _, text = from_hf_config(path)
    return load_text(str(path), text)


def rank0(config: str, tp: int = 1, dp: int = 1, ep: int = 1, m: int = 16) -> dict:
    ps = problems(shape_set(config), ["bf16"], [m], tp=tp, ep=ep, dp=dp, layout="vllm")
    by_id = {p.gemm: p for p in ps}
    assert len(by_id) == len(ps), [p.gemm for p in ps]  # one M, one dtype: one problem per GEMM
    return by_id


def refusal(config: str, tp: int = 1, dp: int = 1, ep: int = 1) -> str:
    with pytest.raises(ShapeError) as e:
        problems(shape_set(config), ["bf16"], [16], tp=tp, ep=ep, dp=dp, layout="vllm")
    return str(e.value)


def check_against_derivation(config: str, tp: int, dp: int, ep: int) -> None:
    _, refused = derive(raw(config), tp, dp, ep, 1)
    if refused:
        msg = refusal(config, tp, dp, ep)
        assert "\n" not in msg
        assert any(re.search(rf"\b{g}\b", msg) for g in refused), (refused, msg)  # names a GEMM that fails here
        return
    for m in MS:
        want, _ = derive(raw(config), tp, dp, ep, m)
        got = rank0(config, tp, dp, ep, m)
        assert {g: Rank(p.M, p.N, p.K, p.E, p.topk, p.local_experts, p.ep) for g, p in got.items()} == want
        assert {(p.tp, p.dp, p.shared_experts) for p in got.values()} == {(tp, dp, 0)}  # vLLM folds no expert


def has_experts(config: str) -> bool:
    return "moe_w13" in derive(raw(config), 1, 1, 1, 1)[0]


def grid(configs):
    """(config, TP, DP, EP) for every TP and DP; EP 1 and, for a model with experts, EP = TP x DP."""
    return [
        pytest.param(config, tp, dp, ep, id=f"{config}-tp{tp}-dp{dp}-ep{ep}")
        for config in configs
        for tp in TPS
        for dp in DPS
        for ep in sorted({1, tp * dp} if has_experts(config) else {1})
    ]


# ---------------------------------------------------------------- the sweep


def test_every_fixture_is_swept():
    listed = re.findall(r"^\| `([^`]+)\.json`", (FIXTURES / "README.md").read_text(), flags=re.M)
    assert sorted(listed) == CONFIGS
    assert len(CONFIGS) == 21


@pytest.mark.parametrize(("config", "tp", "dp", "ep"), grid(CONFIGS))
def test_fixture_matches_engine_rules(config, tp, dp, ep):
    check_against_derivation(config, tp, dp, ep)


@pytest.mark.parametrize(("config", "tp", "dp", "ep"), grid(MUTATIONS))
def test_mutated_config_matches_engine_rules(config, tp, dp, ep):
    check_against_derivation(config, tp, dp, ep)


# ---------------------------------------------------------------- named cases

NAMED = [
    # (config, tp, dp, ep, m, gemm, expected fields of rank 0's GEMM)
    ("deepseek-v3", 8, 1, 8, 16, "moe_w13", {"M": 16, "N": 4096, "K": 7168, "E": 256, "topk": 8, "local_experts": 32}),
    ("qwen3-235b-a22b", 8, 1, 1, 16, "attn_qkv", {"N": 1280, "K": 4096}),  # (64/8 + 2 x 1 copied KV) x 128
    ("qwen3-30b-a3b", 8, 1, 1, 16, "attn_qkv", {"N": 768, "K": 2048}),  # (32/8 + 2 x 1 copied KV) x 128
    ("qwen1.5-moe-a2.7b", 8, 1, 8, 16, "moe_w13", {"E": 60, "local_experts": 8, "N": 2816}),  # ceil(60/8), whole
    ("codellama-7b", 1, 1, 1, 16, "lm_head", {"N": 32064, "K": 4096}),  # 32016 padded to a multiple of 64
    ("deepseek-v3", 1, 8, 8, 4, "moe_w13", {"M": 32, "N": 4096, "K": 7168, "local_experts": 32}),
    ("deepseek-v3", 1, 8, 8, 4, "attn_o", {"M": 4, "N": 7168, "K": 16384}),  # attention sees one DP rank's M
    ("mixtral-8x7b", 1, 8, 1, 16, "moe_w13", {"M": 128, "N": 3584, "K": 4096, "E": 8, "local_experts": 8}),
    ("mixtral-8x7b", 1, 8, 1, 16, "moe_w2", {"M": 128, "N": 4096, "K": 1792}),  # 14336 / 8 GPUs
    ("llama4-maverick", 8, 1, 1, 16, "mlp_gate_up", {"N": 4096}),  # dense layers: intermediate_size_mlp 16384
    ("llama4-maverick", 8, 1, 1, 16, "moe_shared_gate_up", {"N": 2048}),  # shared expert: intermediate_size 8192
    ("deepseek-v2-lite", 2, 1, 1, 16, "mla_q", {"N": 1536, "K": 2048}),  # q_lora_rank null: 16 x 192 / 2
    ("gpt-oss-120b", 8, 1, 8, 16, "moe_w2", {"K": 2880, "topk": 4, "local_experts": 16}),  # experts_per_token
    # sequence-parallel MoE (TP 8, DP 8, EP 64): each TP rank takes ceil(16 / 8) = 2 of its DP rank's 16 tokens
    ("deepseek-v3", 8, 8, 64, 16, "moe_shared_gate_up", {"M": 2, "N": 4096, "K": 7168}),  # whole: 2 x 2048
    ("deepseek-v3", 8, 8, 64, 16, "moe_shared_down", {"M": 2, "N": 7168, "K": 2048}),
    ("deepseek-v3", 8, 8, 64, 16, "moe_router", {"M": 2, "N": 256, "K": 7168}),
    ("deepseek-v3", 8, 8, 64, 16, "moe_w13", {"M": 128, "N": 4096, "local_experts": 4}),  # 64 ranks x 2 tokens
    ("deepseek-v3", 8, 8, 64, 1, "moe_w13", {"M": 64}),  # ceil(1 / 8) = 1 token from each of the 64 ranks
    ("deepseek-v3", 8, 8, 64, 16, "attn_o", {"M": 16, "K": 2048}),  # attention: all 16 tokens, TP as ever
    ("gpt-oss-120b", 2, 8, 16, 3, "moe_router", {"M": 2, "N": 128}),  # ceil(3 / 2)
    ("mixtral-8x7b", 2, 8, 16, 16, "moe_w13", {"M": 128}),  # mixtral.py does not chunk: M x DP
    ("deepseek-v3", 8, 8, 1, 16, "moe_router", {"M": 16}),  # experts split, not parallel: no chunking
]


@pytest.mark.parametrize(("config", "tp", "dp", "ep", "m", "gemm", "expected"), NAMED)
def test_named_case(config, tp, dp, ep, m, gemm, expected):
    got = rank0(config, tp, dp, ep, m)[gemm]
    assert {k: getattr(got, k) for k in expected} == expected
    want = derive(raw(config), tp, dp, ep, m)[0][gemm]  # the derivation reaches the same hand-worked numbers
    assert {k: getattr(want, k) for k in expected} == expected


def test_layer_kinds_decide_which_gemms_exist():
    # all-MoE models launch no dense MLP; mixed ones launch both
    assert "mlp_gate_up" not in rank0("llama4-scout") and "mlp_gate_up" in rank0("llama4-maverick")
    assert "mlp_gate_up" in rank0("deepseek-v3") and "mlp_gate_up" not in rank0("deepseek-v3-no-dense")
    assert "mlp_gate_up" not in rank0("qwen3-30b-a3b") and "mlp_gate_up" in rank0("qwen3-30b-a3b-mlp-only-0")
    assert "moe_shared_gate_up" not in rank0("qwen3-30b-a3b") and "moe_shared_gate_up" in rank0("qwen2-57b-a14b")


REFUSED = [
    # ((config, tp, dp, ep), gemmbench's one-line message)
    (("qwen2-7b", 8, 1, 1), "qwen2-7b: attn_qkv: 28 query heads do not divide by TP 8"),
    (("qwen2-57b-a14b", 8, 1, 8), "qwen2-57b-a14b: attn_qkv: 28 query heads do not divide by TP 8"),
    (
        ("deepseek-v3", 8, 1, 4),
        "deepseek-v3: vLLM runs experts split over all TP x DP = 8 GPUs (EP 1) or whole, one set a GPU (EP = TP x DP = 8); --ep 4 with --tp 8 --dp 1 is neither (--layout sglang takes any EP that divides TP x DP)",
    ),
    (
        ("deepseek-v3", 1, 8, 2),
        "deepseek-v3: vLLM runs experts split over all TP x DP = 8 GPUs (EP 1) or whole, one set a GPU (EP = TP x DP = 8); --ep 2 with --tp 1 --dp 8 is neither (--layout sglang takes any EP that divides TP x DP)",
    ),
    (
        ("deepseek-v3", 8, 1, 3),
        "deepseek-v3: --ep 3 does not divide the TP 8 x DP 1 = 8 GPUs the experts are spread over",
    ),
    (
        ("llama3.1-8b-inter14004", 8, 1, 1),
        "llama3.1-8b-inter14004: mlp_gate_up: its part mlp_gate (N 14004) does not divide by TP 8 (column-parallel)",
    ),
    (("qwen3-8b-kv12", 8, 1, 1), "qwen3-8b-kv12: attn_qkv: 12 KV heads do not divide by TP 8"),
    (
        ("qwen2-7b-kv3", 4, 1, 1),
        "qwen2-7b-kv3: attn_qkv: TP 4 is not a multiple of the 3 KV heads (each KV head is copied to TP / kv_heads GPUs)",
    ),
    (
        ("qwen3-30b-a3b-moe772", 1, 8, 1),
        "qwen3-30b-a3b-moe772: moe_w13: its part moe_gate (N 772) does not divide by TP 8 (column-parallel)",
    ),
]


@pytest.mark.parametrize(("deployment", "message"), REFUSED)
def test_refused_with_one_line(deployment, message):
    config, tp, dp, ep = deployment
    assert derive(raw(config), tp, dp, ep, 1)[1]  # the engine rules refuse it too
    assert refusal(config, tp, dp, ep) == message


def test_expert_split_refusal_lifts_with_whole_experts():
    # 772 does not divide over 8 GPUs, but with EP = TP x DP each GPU holds whole experts
    assert rank0("qwen3-30b-a3b-moe772", tp=1, dp=8, ep=8)["moe_w13"].N == 2 * 772


def test_ep_on_a_dense_model_is_refused():
    # gemmbench's own rule, not vLLM's (which ignores EP without expert layers): such flags are a mistake
    assert refusal("llama3.1-8b", 8, 1, 8) == "llama3.1-8b: --ep 8 needs expert GEMMs (E > 1), and this set has none"


MOE60 = """name: moe60
m: [1]
gemms:
  - {id: moe_w13, N: 2816, K: 2048, parallel: column, E: 60, topk: 4}
  - {id: moe_w2, N: 2048, K: 1408, parallel: row, E: 60, topk: 4}
"""


def test_sglang_refuses_experts_that_do_not_divide_over_ep():
    # SGLang's start-up check: every EP rank holds E / EP experts, so 60 experts over EP 8 (7.5 each) is refused;
    # vLLM gives the first 60 % 8 = 4 ranks one expert more, so it runs (rank 0: ceil(60 / 8) = 8 experts)
    sset = load_text("moe60", MOE60)
    with pytest.raises(ShapeError, match=r"^moe60: SGLang places the same number of experts on every GPU, and 60 "
                                         r"experts do not divide by --ep 8$"):  # fmt: skip
        problems(sset, "bf16", [1], tp=8, ep=8, layout="sglang")
    assert {p.E for p in problems(sset, "bf16", [1], tp=8, ep=8, layout="vllm")} == {60}
    assert problems(sset, "bf16", [1], tp=8, ep=4, layout="sglang")  # 60 / 4 = 15 experts a rank
    assert problems(load_text("moe64", MOE60.replace("E: 60", "E: 64")), "bf16", [1], tp=8, ep=8, layout="sglang")


def test_a_list_sweep_runs_the_combinations_the_engine_accepts():
    from test_cli import invoke

    # Llama3-70B's 64 query heads divide by TP 4 and 8, not by 6: the sweep runs 4 and 8 and names 6 in one line
    res = invoke("run", "--shapes", "llama70b-attn", "--tp", "4,6,8", "--dtype", "bf16", "--m", "1", "--dry-run",
                 "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert {c["tp"] for c in json.loads(res.stdout)["cells"]} == {4, 8}
    assert "left out 1 of the --tp/--dp/--ep combinations: TP 6 DP 1 EP 1: llama70b-attn: attn_qkv: 64 query " \
           "heads do not divide by TP 6" in " ".join(res.stderr.split())  # fmt: skip
