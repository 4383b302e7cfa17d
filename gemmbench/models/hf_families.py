"""The architecture families of Hugging Face configs: which fields each reads, and the GEMMs of its layers.

One function per family reads the fields that family's model code reads (vLLM,
vllm/model_executor/models/{llama,qwen2,qwen3,mixtral,qwen2_moe,qwen3_moe,deepseek_v2,llama4,gpt_oss}.py) and lists
the GEMMs of its layers in launch order (gemmbench/models/hf_config.py dispatches and writes the YAML).  Conventions:

  weight (N, K), out = act (M, K) @ weight^T; `parallel` is how vLLM shards the weight under tensor parallelism
  (gemmbench/models/sharding.py has the rules):
    qkv    attn_qkv (heads, kv_heads, head_dim: KV heads copied once TP passes them)
    vocab  lm_head (the vocabulary, padded to 64 before TP divides it)
    column (TP divides N): mla_q_b / mla_q, mla_kv_b, mlp_gate_up, moe_w13, moe_shared_gate_up
    row    (TP divides K): attn_o, mlp_down, moe_w2, moe_shared_down
    none   (replicated):   mla_qkv_a (q_a and kv_a fused, as vLLM and SGLang run them), mla_kv_a, moe_router
  experts: moe_w13 N = 2 * moe intermediate (gate and up fused), moe_w2 K = moe intermediate; E experts, topk each.
  parts:   the checkpoint's tensors of a fused GEMM (`--layout hf` runs them apart): gate and up, q_a and kv_a (a
           QKV's q, k and v follow from its heads); none where the checkpoint itself fuses them (gpt-oss and
           Llama 4 experts' gate_up_proj).
  layer:   set only where a model has layers of two kinds: `dense` on the MLP of its dense layers, `moe` on the
           router, experts and shared expert of its MoE layers; attention GEMMs and lm_head carry none.
  role:    `router` on the MoE router GEMM (N = E), `mlp` on a dense MLP, `shared_expert` on a shared expert.
  fold_shared: on DeepSeek-V3's experts (256 routed, 1 shared), the shared expert SGLang folds into them
           (python/sglang/srt/models/deepseek_v2.py, determine_num_fused_shared_experts).

A missing field, a size that is not a positive integer, or a field a family cannot place (an MoE field on a dense
family, top-k above the expert count, ...) is a ShapeError naming the file and the field: a set that measures the
wrong shapes is worse than none, so nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from gemmbench.models.sharding import VOCAB_PADDING, padded_vocab
from gemmbench.shapes import ShapeError, _is_int  # _is_int: shapes.py's own rule (bool is not an int), not copied

# Fields only some families read.  One that is set (not null, 0 or []) in a config whose family does not read it is an
# error: a Llama config with `num_local_experts: 8` is not a dense model, whatever its architecture says.
MODEL_FIELDS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "mlp_only_layers",
    "interleave_moe_layer_step",
    "intermediate_size_mlp",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


class Fields:
    """A config's fields, read by name; remembers what was read so that an unread MODEL_FIELDS entry can be refused."""

    def __init__(self, data: dict, src: str, arch: str, prefix: str = ""):
        self.data, self.src, self.arch, self.prefix = data, src, arch, prefix
        self.read: set[str] = set()
        self.order: list[str] = []  # the fields read that the config has, in the order first read

    def error(self, key: str, what: str) -> ShapeError:
        return ShapeError(f"{self.src}: field '{self.prefix}{key}' {what}")

    def raw(self, key: str) -> Any:
        if key not in self.read and key in self.data:
            self.order.append(key)
        self.read.add(key)
        return self.data.get(key)

    def size(self, key: str, default: int | None = None) -> int:
        """A positive integer; null or absent -> `default` (configs write "head_dim": null to mean "derive it")."""
        return self._int(key, default, 1, "a positive integer")

    def count(self, key: str, default: int | None = None) -> int:
        """A non-negative integer (0 means none); null or absent -> `default`."""
        return self._int(key, default, 0, "a non-negative integer")

    def _int(self, key: str, default: int | None, least: int, what: str) -> int:
        value = self.raw(key)
        if value is None:
            if default is None:
                raise ShapeError(f"{self.src}: missing field '{self.prefix}{key}'")
            return default
        if not _is_int(value) or value < least:
            raise self.error(key, f"must be {what}, got {value!r}")
        return value

    def layer_indices(self, key: str, n_layers: int) -> set[int]:
        """A list of layer indices, each in [0, n_layers); null or absent -> none."""
        value = self.raw(key)
        if value is None:
            return set()
        if not isinstance(value, list) or not all(_is_int(i) and 0 <= i < n_layers for i in value):
            raise self.error(key, f"must be a list of layer indices 0..{n_layers - 1}, got {value!r}")
        return set(value)

    def topk(self, key: str, experts: int, experts_key: str) -> int:
        k = self.size(key)
        if k > experts:
            raise self.error(key, f"({k}) exceeds the number of experts ('{self.prefix}{experts_key}' = {experts})")
        return k

    def refuse_unread(self) -> None:
        for key in MODEL_FIELDS:
            value = self.data.get(key)
            if key not in self.read and value is not None and value != 0 and value != []:
                raise self.error(
                    key,
                    f"= {value!r} is not read by {self.arch}: gemmbench cannot place it (is the architecture right?)",
                )


@dataclass(frozen=True)
class Spec:
    """One GEMM of the set, with the arithmetic that gives its sizes (written beside it in the YAML)."""

    id: str
    N: int
    K: int
    parallel: str
    why: str = ""
    E: int = 1
    topk: int = 1
    layer: str = ""
    role: str = ""
    extra: tuple[tuple[str, Any], ...] = ()  # the keys of its kind, in YAML order: heads ..., vocab ..., parts

    def as_yaml(self) -> dict:
        entry: dict[str, Any] = {"id": self.id, "N": self.N, "K": self.K, "parallel": self.parallel}
        entry.update(self.extra)
        if self.E > 1:
            entry.update(E=self.E, topk=self.topk)
        if self.layer:
            entry["layer"] = self.layer
        if self.role:
            entry["role"] = self.role
        return entry

    def with_(self, **keys: Any) -> "Spec":
        """The same GEMM with more keys of its kind (appended to `extra`)."""
        return replace(self, extra=self.extra + tuple(keys.items()))


@dataclass
class Model:
    """What a family function returns: GEMMs in launch order and a one-line summary of the structure."""

    gemms: list[Spec]
    summary: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- building blocks


def _gqa(f: Fields) -> tuple[int, list[Spec], str]:
    """Grouped-query attention (vLLM QKVParallelLinear + RowParallelLinear): hidden size, GEMMs, summary."""
    hidden, heads = f.size("hidden_size"), f.size("num_attention_heads")
    kv_heads = f.size("num_key_value_heads", heads)  # absent: multi-head attention, one KV head per query head
    if heads % kv_heads:
        raise f.error("num_key_value_heads", f"({kv_heads}) does not divide num_attention_heads ({heads})")
    if f.raw("head_dim") is None and hidden % heads:
        raise f.error(
            "hidden_size", f"({hidden}) is not divisible by num_attention_heads ({heads}) and no head_dim is given"
        )
    head_dim = f.size("head_dim", hidden // heads)
    qkv = Spec(
        "attn_qkv", (heads + 2 * kv_heads) * head_dim, hidden, "qkv", f"({heads} + 2 * {kv_heads}) heads * {head_dim}"
    )
    gemms = [
        qkv.with_(heads=heads, kv_heads=kv_heads, head_dim=head_dim),
        Spec("attn_o", hidden, heads * head_dim, "row", f"K = {heads} heads * {head_dim}"),
    ]
    return hidden, gemms, f"{heads} query heads, {kv_heads} KV heads, head dim {head_dim}"


def _mlp(prefix: str, hidden: int, inter: int, why: str, role: str = "mlp") -> list[Spec]:
    """A gated MLP (vLLM MergedColumnParallelLinear gate_up + RowParallelLinear down); the checkpoint keeps gate and
    up apart."""
    gate_up = Spec(f"{prefix}_gate_up", 2 * inter, hidden, "column", f"gate and up fused: 2 * {why}", role=role)
    return [
        gate_up.with_(parts={f"{prefix}_gate": inter, f"{prefix}_up": inter}),
        Spec(f"{prefix}_down", hidden, inter, "row", f"K = {why}", role=role),
    ]


def _experts(hidden: int, inter: int, experts: int, topk: int, fused_in_checkpoint: bool = False) -> list[Spec]:
    """The router (replicated, N = experts) and the routed experts (vLLM FusedMoE: w13 fused, w2).  The checkpoint
    keeps each expert's gate and up apart, unless `fused_in_checkpoint` (one gate_up_proj tensor)."""
    w13 = Spec("moe_w13", 2 * inter, hidden, "column", f"gate and up fused: 2 * {inter}", experts, topk)
    return [
        Spec("moe_router", experts, hidden, "none", f"N = {experts} experts", role="router"),
        w13 if fused_in_checkpoint else w13.with_(parts={"moe_gate": inter, "moe_up": inter}),
        Spec("moe_w2", hidden, inter, "row", f"K = {inter}", experts, topk),
    ]


def _lm_head(f: Fields, hidden: int) -> Spec:
    vocab = f.size("vocab_size")
    padded = padded_vocab(vocab)
    why = f"N = vocab {vocab}" + (f", run as {padded} (padded to {VOCAB_PADDING})" if padded != vocab else "")
    return Spec("lm_head", vocab, hidden, "vocab", why).with_(vocab=vocab, pad_to=VOCAB_PADDING)


def _layered(kinds: list[str], attention: list[Spec], dense: list[Spec], moe: list[Spec]) -> Model:
    """A model whose layers are `kinds` ("dense" | "moe", one per layer): the attention GEMMs (every layer), the dense
    MLP where a layer is dense, the MoE block where one is MoE; `layer` is set only where both kinds occur."""
    n_dense, n_moe = kinds.count("dense"), kinds.count("moe")
    mixed = bool(n_dense and n_moe)
    gemms = list(attention)
    gemms += [replace(g, layer="dense" if mixed else "") for g in dense] if n_dense else []
    gemms += [replace(g, layer="moe" if mixed else "") for g in moe] if n_moe else []
    if mixed:
        structure = f"{len(kinds)} layers: {n_dense} dense, {n_moe} MoE"
    else:
        structure = f"{len(kinds)} layers, all {'MoE' if n_moe else 'dense'}"
    return Model(gemms, [structure])


def _n_layers(f: Fields) -> int:
    return f.size("num_hidden_layers")


def _uniform(f: Fields, kind: str) -> str:
    """The structure of a model whose layers are all alike: num_hidden_layers only describes it, so it may be absent."""
    if f.raw("num_hidden_layers") is None:
        return f"every layer {kind}"
    return f"{_n_layers(f)} layers, all {kind}"


def _dense_mlp(f: Fields, hidden: int, key: str = "intermediate_size") -> list[Spec]:
    inter = f.size(key)
    return _mlp("mlp", hidden, inter, str(inter))


# ---------------------------------------------------------------- families


def _dense(f: Fields) -> Model:
    """Llama, Mistral, Qwen2, Qwen3 (vllm llama.py, qwen2.py, qwen3.py): GQA attention, one gated MLP per layer."""
    hidden, attention, heads = _gqa(f)
    inter = f.size("intermediate_size")
    gemms = attention + _mlp("mlp", hidden, inter, str(inter)) + [_lm_head(f, hidden)]
    return Model(gemms, [_uniform(f, "dense"), heads, f"intermediate {inter}", f"hidden {hidden}"])


def _mixtral(f: Fields) -> Model:
    """Mixtral (vllm mixtral.py): every layer MoE; `intermediate_size` is each expert's."""
    hidden, attention, heads = _gqa(f)
    experts = f.size("num_local_experts")
    topk = f.topk("num_experts_per_tok", experts, "num_local_experts")
    inter = f.size("intermediate_size")
    gemms = attention + _experts(hidden, inter, experts, topk) + [_lm_head(f, hidden)]
    experts_line = f"{experts} experts top-{topk} of intermediate {inter}"
    return Model(gemms, [_uniform(f, "MoE"), heads, experts_line, f"hidden {hidden}"])


def _qwen_moe(f: Fields, shared_expert: bool) -> Model:
    """Qwen2-MoE and Qwen3-MoE (vllm qwen2_moe.py, qwen3_moe.py): layer i is MoE unless it is in `mlp_only_layers`
    or (i + 1) is not a multiple of `decoder_sparse_step`; dense layers use `intermediate_size`.  Qwen2-MoE adds a
    shared expert of `shared_expert_intermediate_size` (0 or absent: none) and its gate, Linear(hidden, 1), a dot
    product per token that is left out."""
    hidden, attention, heads = _gqa(f)
    n = _n_layers(f)
    experts = f.size("num_experts")
    topk = f.topk("num_experts_per_tok", experts, "num_experts")
    moe_inter = f.size("moe_intermediate_size")
    step = f.size("decoder_sparse_step", 1)  # vLLM and transformers default it to 1: every layer
    dense_only = f.layer_indices("mlp_only_layers", n)
    kinds = ["moe" if i not in dense_only and (i + 1) % step == 0 else "dense" for i in range(n)]
    dense = _dense_mlp(f, hidden) if "dense" in kinds else []
    moe = _experts(hidden, moe_inter, experts, topk)
    shared = f.count("shared_expert_intermediate_size", 0) if shared_expert else 0
    if shared:
        moe += _mlp("moe_shared", hidden, shared, f"{shared} (shared expert)", "shared_expert")
    model = _layered(kinds, attention, dense, moe)
    model.gemms.append(_lm_head(f, hidden))
    expert_line = f"{experts} experts top-{topk} of intermediate {moe_inter}" + (
        f", shared expert {shared}" if shared else ""
    )
    model.summary += [heads, expert_line, f"hidden {hidden}"]
    return model


def _deepseek(f: Fields) -> Model:
    """DeepSeek-V2 / V3 (vllm deepseek_v2.py): multi-head latent attention; layer i is MoE when
    i >= first_k_dense_replace and i % moe_layer_freq == 0, else a dense MLP of `intermediate_size`."""
    hidden, heads = f.size("hidden_size"), f.size("num_attention_heads")
    n = _n_layers(f)
    if "q_lora_rank" not in f.data:  # null is meaningful (V2-Lite: queries not compressed); absent is not
        raise ShapeError(f"{f.src}: missing field 'q_lora_rank' (null where queries are not compressed)")
    q_lora = None if f.raw("q_lora_rank") is None else f.size("q_lora_rank")
    kv_lora, nope, rope, v = (f.size(k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    qk = f"{heads} heads * ({nope} nope + {rope} rope)"
    kv_a = Spec("mla_kv_a", kv_lora + rope, hidden, "none", f"kv_lora_rank {kv_lora} + {rope} rope")
    if q_lora is None:
        attention = [Spec("mla_q", heads * (nope + rope), hidden, "column", qk), kv_a]
    else:  # vLLM and SGLang run q_a and kv_a as one replicated GEMM (fused_qkv_a_proj)
        qkv_a = Spec("mla_qkv_a", q_lora + kv_lora + rope, hidden, "none",
                     f"q_a and kv_a fused: q_lora_rank {q_lora} + kv_lora_rank {kv_lora} + {rope} rope")  # fmt: skip
        attention = [
            qkv_a.with_(parts={"mla_q_a": q_lora, "mla_kv_a": kv_lora + rope}),
            Spec("mla_q_b", heads * (nope + rope), q_lora, "column", qk),
        ]
    attention += [
        Spec("mla_kv_b", heads * (nope + v), kv_lora, "column", f"{heads} heads * ({nope} nope + {v} v)"),
        Spec("attn_o", hidden, heads * v, "row", f"K = {heads} heads * {v} v"),
    ]
    experts = f.size("n_routed_experts")
    topk = f.topk("num_experts_per_tok", experts, "n_routed_experts")
    moe_inter = f.size("moe_intermediate_size")
    first_dense = f.count("first_k_dense_replace")
    freq = f.size("moe_layer_freq", 1)  # vLLM: getattr(config, "moe_layer_freq", 1)
    kinds = ["moe" if i >= first_dense and i % freq == 0 else "dense" for i in range(n)]
    dense = _dense_mlp(f, hidden) if "dense" in kinds else []
    moe = _experts(hidden, moe_inter, experts, topk)
    shared = f.count("n_shared_experts", 0)  # null or 0: no shared expert
    if shared:
        moe += _mlp("moe_shared", hidden, shared * moe_inter, f"{shared} shared * {moe_inter}", "shared_expert")
    if f.arch == "DeepseekV3ForCausalLM" and experts == 256 and shared == 1:  # SGLang's condition, word for word
        moe = [g.with_(fold_shared=1) if g.E > 1 else g for g in moe]
    model = _layered(kinds, attention, dense, moe)
    model.gemms.append(_lm_head(f, hidden))
    q = f"q_lora {q_lora}" if q_lora else "queries not compressed"
    mla = f"MLA: {heads} heads, {q}, kv_lora {kv_lora}, qk {nope} nope + {rope} rope, v {v}"
    expert_line = f"{experts} experts top-{topk} of intermediate {moe_inter}" + (f", {shared} shared" if shared else "")
    model.summary += [mla, expert_line, f"hidden {hidden}"]
    return model


def _llama4(f: Fields) -> Model:
    """Llama 4 (vllm llama4.py): layer i is MoE when (i + 1) % interleave_moe_layer_step == 0: a router, routed
    experts and a shared expert, all of `intermediate_size`; the other layers are a dense MLP of
    `intermediate_size_mlp`."""
    hidden, attention, heads = _gqa(f)
    n = _n_layers(f)
    experts = f.size("num_local_experts")
    topk = f.topk("num_experts_per_tok", experts, "num_local_experts")
    inter = f.size("intermediate_size")
    step = f.size("interleave_moe_layer_step")
    kinds = ["moe" if (i + 1) % step == 0 else "dense" for i in range(n)]
    f.raw("intermediate_size_mlp")  # read even where no layer is dense: Scout's config carries it, unused
    dense = _dense_mlp(f, hidden, "intermediate_size_mlp") if "dense" in kinds else []
    moe = _experts(hidden, inter, experts, topk, fused_in_checkpoint=True)
    moe += _mlp("moe_shared", hidden, inter, f"{inter} (shared expert)", "shared_expert")
    model = _layered(kinds, attention, dense, moe)
    model.gemms.append(_lm_head(f, hidden))
    model.summary += [
        heads,
        f"{experts} experts top-{topk} of intermediate {inter}, shared expert {inter}",
        f"hidden {hidden}",
    ]
    return model


def _gpt_oss(f: Fields) -> Model:
    """gpt-oss (vllm gpt_oss.py): every layer MoE, a replicated router; `intermediate_size` is each expert's."""
    hidden, attention, heads = _gqa(f)
    experts = f.size("num_local_experts")
    keys = [k for k in ("experts_per_token", "num_experts_per_tok") if f.raw(k) is not None]
    if not keys:
        raise ShapeError(f"{f.src}: missing field 'experts_per_token' (or 'num_experts_per_tok')")
    topk = f.topk(keys[0], experts, "num_local_experts")
    if len(keys) == 2 and f.raw(keys[1]) != topk:
        raise f.error(keys[1], f"({f.raw(keys[1])!r}) differs from experts_per_token ({topk})")
    inter = f.size("intermediate_size")
    gemms = attention + _experts(hidden, inter, experts, topk, fused_in_checkpoint=True) + [_lm_head(f, hidden)]
    experts_line = f"{experts} experts top-{topk} of intermediate {inter}"
    return Model(gemms, [_uniform(f, "MoE"), heads, experts_line, f"hidden {hidden}"])


# The families whose vLLM model code chunks a DP rank's tokens across TP in its MoE blocks when vLLM runs them
# sequence-parallel (gemmbench.models.sharding), as vllm-project/vllm's files read: deepseek_v2.py (002d607, b863fe5),
# qwen3_moe.py (2e0831b), llama4.py (0303cbd), gpt_oss.py (a6b6cfa); mixtral.py (f0e2695) and qwen2_moe.py (8bbabf0)
# do not chunk
MOE_SEQUENCE_PARALLEL = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM",
                                   "Llama4ForConditionalGeneration", "Llama4ForCausalLM", "GptOssForCausalLM"})  # fmt: skip

FAMILIES: dict[str, Callable[[Fields], Model]] = {
    "LlamaForCausalLM": _dense,
    "MistralForCausalLM": _dense,
    "Qwen2ForCausalLM": _dense,
    "Qwen3ForCausalLM": _dense,
    "MixtralForCausalLM": _mixtral,
    "Qwen2MoeForCausalLM": lambda f: _qwen_moe(f, shared_expert=True),
    "Qwen3MoeForCausalLM": lambda f: _qwen_moe(f, shared_expert=False),
    "DeepseekV2ForCausalLM": _deepseek,
    "DeepseekV3ForCausalLM": _deepseek,
    "Llama4ForConditionalGeneration": _llama4,  # its fields sit under text_config
    "Llama4ForCausalLM": _llama4,  # a text-only Llama 4 config: the same fields at the top level
    "GptOssForCausalLM": _gpt_oss,
}
# where a config has no `architectures` (older or hand-written ones), its model_type names the family
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "llama4": "Llama4ForConditionalGeneration",
    "llama4_text": "Llama4ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
}
