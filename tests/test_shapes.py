"""Shape sets: built-ins, YAML validation, M lists, TP division, problem expansion (HF configs: test_hf_config.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemmbench.models.shape_sets import builtin_names, load
from gemmbench.models.sharding import problems
from gemmbench.shapes import (
    DECODE_M,
    PREFILL_M,
    Problem,
    ShapeError,
    parse_m_list,
)

ALL_M = DECODE_M + PREFILL_M


def dims(shape_set):
    return [(g.name, g.N, g.K, g.parallel, g.E, g.topk) for g in shape_set.gemms]


# ---------------------------------------------------------------- built-ins

# sorted; the model sets (deepseek-v3 ... qwen3-30b-a3b) are written from configs: test_hf_config.py checks them
BUILTINS = [
    "deepseek-v3",
    "gpt-oss-120b",
    "llama3-405b",
    "llama4-maverick",
    "llama4-scout",
    "llama70b",
    "llama70b-attn",
    "llama70b-mlp",
    "mixtral-8x22b-moe",
    "mixtral-moe",
    "qwen2.5-72b",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "seed001-tkgemm",
    "smoke",
]


def test_builtin_names_sorted_and_complete():
    assert builtin_names() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_name_matches_file_and_has_description(name):
    s = load(name)
    assert s.name == name
    assert s.description
    assert Path(s.source).name == f"{name}.yaml"


def test_llama70b_attn():
    s = load("llama70b-attn")
    assert dims(s) == [("attn_qkv", 10240, 8192, "qkv", 1, 1), ("attn_o", 8192, 8192, "row", 1, 1)]
    assert s.m_values == DECODE_M == (1, 2, 4, 8, 16, 32, 64)


def test_llama70b_mlp():
    s = load("llama70b-mlp")
    assert dims(s) == [("mlp_gate_up", 57344, 8192, "column", 1, 1), ("mlp_down", 8192, 28672, "row", 1, 1)]
    assert s.m_values == ALL_M


def test_llama70b_includes_come_first():
    s = load("llama70b")
    assert dims(s) == [
        ("attn_qkv", 10240, 8192, "qkv", 1, 1),
        ("attn_o", 8192, 8192, "row", 1, 1),
        ("mlp_gate_up", 57344, 8192, "column", 1, 1),
        ("mlp_down", 8192, 28672, "row", 1, 1),
        ("lm_head", 128256, 8192, "vocab", 1, 1),
    ]
    # its own m, not the included attn set's decode-only list
    assert s.m_values == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def test_mixtral_moe():
    s = load("mixtral-moe")
    assert dims(s) == [
        ("attn_qkv", 6144, 4096, "qkv", 1, 1),
        ("attn_o", 4096, 4096, "row", 1, 1),
        ("moe_w13", 28672, 4096, "column", 8, 2),
        ("moe_w2", 4096, 14336, "row", 8, 2),
    ]
    assert [g.is_moe for g in s.gemms] == [False, False, True, True]
    assert s.m_values == ALL_M


def test_smoke():
    s = load("smoke")
    assert dims(s) == [
        ("smoke_square", 64, 64, "column", 1, 1),
        ("smoke_tails", 80, 48, "row", 1, 1),
        ("smoke_deep", 32, 160, "none", 1, 1),
        ("smoke_moe", 64, 32, "column", 4, 2),
        ("smoke_moe_odd", 48, 64, "row", 3, 2),
    ]
    assert s.m_values == (1, 33)


def test_unknown_builtin_name_lists_builtins():
    with pytest.raises(
        ShapeError, match=r"^nope: no such built-in shape set \(deepseek-v3, .*smoke\) and no such file$"
    ):
        load("nope")


# ---------------------------------------------------------------- M lists


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,16,64", (1, 16, 64)),
        ("64, 1 ,16", (1, 16, 64)),
        ("8,8,1", (1, 8)),
        ("decode", DECODE_M),
        ("prefill", PREFILL_M),
        ("all", ALL_M),
        ("ALL", ALL_M),
        ("decode,128", DECODE_M + (128,)),
        ("prefill,5,decode", (1, 2, 4, 5, 8, 16, 32, 64) + PREFILL_M),
        ("decode,prefill", ALL_M),
    ],
)
def test_parse_m_list(text, expected):
    assert parse_m_list(text) == expected


@pytest.mark.parametrize(
    "text, bad",
    [
        ("0", "0"),
        ("-4", "-4"),
        ("abc", "abc"),
        ("1,,2", ""),
        ("1.5", "1.5"),
        ("+5", "+5"),
        ("16,", ""),
        ("1_0", "1_0"),
        ("decode;128", "decode;128"),
    ],
)
def test_parse_m_list_rejects(text, bad):
    with pytest.raises(ShapeError) as e:
        parse_m_list(text)
    assert str(e.value) == f"--m: M value {bad!r} is not a positive integer or one of decode, prefill, all"


@pytest.mark.parametrize("text", ["", "   "])
def test_parse_m_list_empty(text):
    with pytest.raises(ShapeError, match=r"^--m: empty M list$"):
        parse_m_list(text)


# ---------------------------------------------------------------- tensor parallelism


def _at(name: str, **par) -> dict:
    """{gemm: (N, K)} of a built-in set on rank 0 of a deployment, M 1, bf16."""
    return {p.gemm: (p.N, p.K) for p in problems(load(name), ["bf16"], [1], **par)}


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_llama70b(tp):
    got = _at("llama70b", tp=tp)
    kv = max(8 // tp, 1)  # 8 KV heads: 8/tp a GPU, and never fewer than one
    assert got["attn_qkv"] == ((64 // tp + 2 * kv) * 128, 8192)
    assert got["attn_o"] == (8192, 8192 // tp)
    assert got["mlp_gate_up"] == (57344 // tp, 8192)
    assert got["mlp_down"] == (8192, 28672 // tp)
    assert got["lm_head"] == (128256 // tp, 8192)  # 128256 is a multiple of 64: no padding


def test_tp_replicated_and_experts():
    got = {p.gemm: p for p in problems(load("smoke"), ["fp16"], [1], tp=2)}
    assert (got["smoke_deep"].N, got["smoke_deep"].K) == (32, 160)  # replicated: whole at any TP
    mix = {p.gemm: p for p in problems(load("mixtral-moe"), ["bf16"], [1], tp=4)}
    assert (mix["moe_w13"].N, mix["moe_w13"].E, mix["moe_w13"].topk) == (28672 // 4, 8, 2)  # E and topk stay


def test_tp_indivisible_names_set_gemm_and_numbers():
    with pytest.raises(ShapeError) as e:
        problems(load("llama70b"), ["fp16"], tp=3)
    assert str(e.value) == "llama70b: attn_qkv: 64 query heads do not divide by TP 3"
    with pytest.raises(ShapeError) as e:
        problems(load("llama70b-mlp"), ["fp16"], tp=3)
    assert (
        str(e.value)
        == "llama70b-mlp: mlp_gate_up: its part mlp_gate (N 28672) does not divide by TP 3 (column-parallel)"
    )


@pytest.mark.parametrize("tp", [0, -2, True, 2.0])
def test_tp_bad_degree(tp):
    with pytest.raises(ShapeError, match=r"^--tp must be a positive integer, got "):
        problems(load("llama70b-attn"), ["fp16"], tp=tp)


# ---------------------------------------------------------------- problems()


def test_problems_order_and_count():
    s = load("smoke")
    ps = problems(s, ["bf16", "fp16"])
    assert len(ps) == 5 * 2 * 2  # 5 GEMMs x M 1, 33 x 2 dtypes
    assert [(p.gemm, p.M, p.dtype) for p in ps[:5]] == [
        ("smoke_square", 1, "bf16"),
        ("smoke_square", 1, "fp16"),
        ("smoke_square", 33, "bf16"),
        ("smoke_square", 33, "fp16"),
        ("smoke_tails", 1, "bf16"),
    ]
    assert ps[-1] == Problem(shape_set="smoke", gemm="smoke_moe_odd", M=33, N=48, K=64, dtype="fp16", tp=1, E=3, topk=2)
    assert all(p.shape_set == "smoke" for p in ps)


def test_problems_m_override_and_tp():
    s = load("mixtral-moe")
    ps = problems(s, ["fp8"], m_values=[64, 1, 64], tp=2)
    assert ps == [
        Problem("mixtral-moe", "attn_qkv", 1, 3072, 4096, "fp8", tp=2),
        Problem("mixtral-moe", "attn_qkv", 64, 3072, 4096, "fp8", tp=2),
        Problem("mixtral-moe", "attn_o", 1, 4096, 2048, "fp8", tp=2),
        Problem("mixtral-moe", "attn_o", 64, 4096, 2048, "fp8", tp=2),
        Problem("mixtral-moe", "moe_w13", 1, 14336, 4096, "fp8", tp=2, E=8, topk=2),
        Problem("mixtral-moe", "moe_w13", 64, 14336, 4096, "fp8", tp=2, E=8, topk=2),
        Problem("mixtral-moe", "moe_w2", 1, 4096, 7168, "fp8", tp=2, E=8, topk=2),
        Problem("mixtral-moe", "moe_w2", 64, 4096, 7168, "fp8", tp=2, E=8, topk=2),
    ]


def test_problems_bare_dtype_string_is_one_dtype():
    assert [p.dtype for p in problems(load("llama70b-attn"), "fp16", m_values=[1])] == ["fp16", "fp16"]


def test_problems_errors_name_the_file():
    s = load("llama70b")
    with pytest.raises(ShapeError, match=r"empty M list$"):
        problems(s, ["fp16"], m_values=[])
    with pytest.raises(ShapeError, match=r"every M must be a positive integer, got 0$"):
        problems(s, ["fp16"], m_values=[1, 0])
    with pytest.raises(ShapeError, match=r"no dtypes given$"):
        problems(s, [])


# ---------------------------------------------------------------- user files and malformed files

GOOD = """\
name: mine
description: my model
m: [3, 1, 3]
include: [llama70b-attn]
gemms:
  - id: up
    N: 96
    K: 32
    parallel: column
  - {id: experts, N: 64, K: 96, parallel: row, E: 4, topk: 1}
"""


def write(tmp_path, text, name="set.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_user_file_loads(tmp_path):
    path = write(tmp_path, GOOD)
    s = load(path)
    assert (s.name, s.description, s.m_values, s.source) == ("mine", "my model", (1, 3), path)
    assert dims(s) == [
        ("attn_qkv", 10240, 8192, "qkv", 1, 1),
        ("attn_o", 8192, 8192, "row", 1, 1),
        ("up", 96, 32, "column", 1, 1),
        ("experts", 64, 96, "row", 4, 1),
    ]


def test_qkv_and_vocab_entries_derive_n_and_check_it(tmp_path):
    text = """name: x
gemms:
  - {id: attn_qkv, K: 4096, parallel: qkv, heads: 64, kv_heads: 4, head_dim: 128}
  - {id: lm_head, N: 32016, K: 4096, parallel: vocab, vocab: 32016}
"""
    qkv, head = load(write(tmp_path, text)).gemms
    # (64 + 2 * 4) * 128 = 9216; q, k, v are the checkpoint's three tensors
    assert (qkv.N, qkv.parts) == (9216, (("attn_q", 8192), ("attn_k", 512), ("attn_v", 512)))
    assert (head.N, head.vocab, head.pad_to) == (32016, 32016, 64)  # vLLM's padding when none is given
    wrong = text.replace("K: 4096, parallel: qkv", "N: 9000, K: 4096, parallel: qkv")
    with pytest.raises(ShapeError) as e:
        load(write(tmp_path, wrong))
    assert str(e.value).endswith("gemm 'attn_qkv': N 9000 is not (heads + 2 kv_heads) head_dim = 9216")


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{id: q, K: 8, parallel: qkv, heads: 6, kv_heads: 4, head_dim: 8}", "kv_heads (4) does not divide heads (6)"),
        ("{id: q, K: 8, parallel: qkv, heads: 4, head_dim: 8}", "kv_heads must be a positive integer, got None"),
        ("{id: v, N: 8, K: 8, parallel: row, vocab: 8}", "vocab is only for parallel: vocab, not row"),
        ("{id: w, N: 8, K: 8, parallel: column, parts: {a: 3, b: 4}}", "parts add up to N 7, not the GEMM's N 8"),
        ("{id: w, N: 8, K: 8, parallel: column, parts: {a: 8}}", "parts must map two or more tensor ids to their N"),
        (
            "{id: w, N: 8, K: 8, parallel: column, fold_shared: 1}",
            "fold_shared is for expert GEMMs (E > 1), but E is 1",
        ),
        ("{id: w, N: 8, K: 8, parallel: qkv, E: 2, topk: 1}", "heads must be a positive integer, got None"),
    ],
)
def test_kind_keys_refused_where_they_do_not_belong(tmp_path, entry, message):
    with pytest.raises(ShapeError) as e:
        load(write(tmp_path, f"name: x\ngemms:\n  - {entry}\n"))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_old_column_qkv_is_read_with_one_warning(tmp_path):
    path = write(tmp_path, "name: x\ngemms: [{id: attn_qkv, N: 6144, K: 4096, parallel: column}]\n")
    s = load(path)
    assert s.gemms[0].parallel == "column"  # read as written: N / TP, as before
    assert s.warnings == (
        f"{path}: gemm 'attn_qkv' is parallel: column; write it as parallel: qkv with heads, kv_heads and head_dim "
        "(past its KV heads TP copies them, which column cannot say)",
    )
    assert load("llama70b").warnings == ()  # the built-in sets say qkv


def test_user_file_defaults(tmp_path):
    s = load(write(tmp_path, "name: x\ngemms: [{id: a, N: 1, K: 1, parallel: none}]\n", name="x.yml"))
    assert (s.description, s.m_values) == ("", ALL_M)


def test_m_string_forms_in_yaml(tmp_path):
    s = load(write(tmp_path, "name: x\nm: decode,128\ngemms: [{id: a, N: 1, K: 1, parallel: none}]\n"))
    assert s.m_values == DECODE_M + (128,)


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent.yaml")
    with pytest.raises(ShapeError) as e:
        load(path)
    assert str(e.value) == f"{path}: cannot read: No such file or directory"


def test_directory_is_unreadable(tmp_path):
    with pytest.raises(ShapeError, match=rf"^{re.escape(str(tmp_path))}: cannot read: Is a directory$"):
        load(str(tmp_path))


def test_bad_yaml_reports_line(tmp_path):
    path = write(tmp_path, "name: x\ngemms:\n  - id: a\n    N: [1, 2\n    K: 3\n")
    with pytest.raises(ShapeError) as e:
        load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: invalid YAML at line 5: ")
    assert "\n" not in msg


def test_control_character_reports_line(tmp_path):
    path = write(tmp_path, "name: x\ngemms: []\ndescription: a\x07b\n")
    with pytest.raises(ShapeError, match=rf"^{re.escape(path)}: invalid YAML at line 3: "):
        load(path)


def test_non_utf8_file(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ShapeError, match=rf"^{re.escape(str(path))}: cannot read: "):
        load(str(path))


GEMM = "{id: g, N: 8, K: 8, parallel: row}"

# (file text, expected message after "<path>: ")
MALFORMED = [
    ("", "file is empty"),
    ("- 1\n- 2\n", "top level must be a mapping (name, gemms, ...), got list"),
    ("just text\n", "top level must be a mapping (name, gemms, ...), got str"),
    (
        f"name: x\nmodel: y\ngemms: [{GEMM}]\n",
        "unknown key 'model' (allowed: name, description, m, moe_sequence_parallel, include, gemms)",
    ),
    (
        f"name: x\nmoe_sequence_parallel: sometimes\ngemms: [{GEMM}]\n",
        "moe_sequence_parallel must be true or false, got 'sometimes'",
    ),
    (f"gemms: [{GEMM}]\n", "missing field 'name'"),
    ("name: x\n", "missing field 'gemms'"),
    (f"name: 7\ngemms: [{GEMM}]\n", "name must be a non-empty string, got 7"),
    (f"name: x\ndescription: [a]\ngemms: [{GEMM}]\n", "description must be a string, got ['a']"),
    ("name: x\ngemms: []\n", "gemms is empty"),
    ("name: x\ngemms: {id: g}\n", "gemms must be a list of mappings, got dict"),
    ("name: x\ngemms: [5]\n", "gemm #1: must be a mapping (id, N, K, parallel, ...), got 5"),
    (f"name: x\nm: []\ngemms: [{GEMM}]\n", "m: empty M list"),
    (f"name: x\nm: ''\ngemms: [{GEMM}]\n", "m: empty M list"),
    (f"name: x\nm: [1, 0]\ngemms: [{GEMM}]\n", "m: every M must be a positive integer, got 0"),
    (f"name: x\nm: [1, true]\ngemms: [{GEMM}]\n", "m: every M must be a positive integer, got True"),
    (f"name: x\nm: [2.5]\ngemms: [{GEMM}]\n", "m: every M must be a positive integer, got 2.5"),
    (
        f"name: x\nm: sometimes\ngemms: [{GEMM}]\n",
        "m: M value 'sometimes' is not a positive integer or one of decode, prefill, all",
    ),
    (
        f"name: x\nm: 16\ngemms: [{GEMM}]\n",
        "m: must be a preset (decode, prefill, all) or a list of positive integers, got 16",
    ),
    (
        f"name: x\ninclude: [nope]\ngemms: [{GEMM}]\n",
        f"include 'nope' is not a built-in set ({', '.join(BUILTINS)})",
    ),
    (f"name: x\ninclude: llama70b\ngemms: [{GEMM}]\n", "include must be a list of built-in set names, got 'llama70b'"),
    ("name: x\ngemms: [{N: 8, K: 8, parallel: row}]\n", "gemm #1: missing field 'id'"),
    ("name: x\ngemms: [{id: 3, N: 8, K: 8, parallel: row}]\n", "gemm #1: id must be a non-empty string, got 3"),
    ("name: x\ngemms: [{id: g, K: 8, parallel: row}]\n", "gemm 'g': missing field 'N'"),
    ("name: x\ngemms: [{id: g, N: 8, parallel: row}]\n", "gemm 'g': missing field 'K'"),
    ("name: x\ngemms: [{id: g, N: 8, K: 8}]\n", "gemm 'g': missing field 'parallel'"),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, bias: 1}]\n",
        "gemm 'g': unknown key 'bias' (allowed: id, N, K, parallel, E, topk, layer, role, heads, kv_heads, head_dim, vocab, pad_to, parts, fold_shared)",
    ),
    ("name: x\ngemms: [{id: g, N: -3, K: 8, parallel: row}]\n", "gemm 'g': N must be a positive integer, got -3"),
    ("name: x\ngemms: [{id: g, N: 0, K: 8, parallel: row}]\n", "gemm 'g': N must be a positive integer, got 0"),
    ("name: x\ngemms: [{id: g, N: 8, K: 8.5, parallel: row}]\n", "gemm 'g': K must be a positive integer, got 8.5"),
    ("name: x\ngemms: [{id: g, N: '8', K: 8, parallel: row}]\n", "gemm 'g': N must be a positive integer, got '8'"),
    ("name: x\ngemms: [{id: g, N: true, K: 8, parallel: row}]\n", "gemm 'g': N must be a positive integer, got True"),
    ("name: x\ngemms: [{id: g, N: 8, K: yes, parallel: row}]\n", "gemm 'g': K must be a positive integer, got True"),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: diagonal}]\n",
        "gemm 'g': parallel must be one of column, row, none, qkv, vocab, got 'diagonal'",
    ),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, E: 0, topk: 1}]\n",
        "gemm 'g': E must be a positive integer, got 0",
    ),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, E: true, topk: 1}]\n",
        "gemm 'g': E must be a positive integer, got True",
    ),
    ("name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, E: 4}]\n", "gemm 'g': topk is required when E > 1 (E is 4)"),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, topk: 2}]\n",
        "gemm 'g': topk is only for MoE gemms (E > 1), but E is 1",
    ),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, E: 1, topk: 1}]\n",
        "gemm 'g': topk is only for MoE gemms (E > 1), but E is 1",
    ),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, E: 4, topk: 5}]\n",
        "gemm 'g': topk (5) must not exceed E (4)",
    ),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row, E: 4, topk: 0}]\n",
        "gemm 'g': topk must be a positive integer, got 0",
    ),
    (
        "name: x\ngemms: [{id: g, N: 8, K: 8, parallel: row}, {id: g, N: 4, K: 4, parallel: none}]\n",
        "gemm 'g': duplicate id (already defined by gemm #1)",
    ),
    (
        "name: x\ninclude: [llama70b-attn]\ngemms: [{id: attn_o, N: 4, K: 4, parallel: none}]\n",
        "gemm 'attn_o': duplicate id (already defined by include 'llama70b-attn')",
    ),
    (
        f"name: x\ninclude: [llama70b, llama70b-mlp]\ngemms: [{GEMM}]\n",
        "gemm 'mlp_gate_up' from include 'llama70b-mlp' is already defined by include 'llama70b'",
    ),
]


@pytest.mark.parametrize("text, expected", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_file(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ShapeError) as e:
        load(path)
    assert str(e.value) == f"{path}: {expected}"


def test_nested_includes_and_cycles(tmp_path, monkeypatch):
    # a private built-in folder: the real built-ins have neither nesting two deep nor cycles
    builtins = tmp_path / "builtins"
    builtins.mkdir()
    (builtins / "a.yaml").write_text("name: a\ninclude: [b]\ngemms: [{id: ga, N: 2, K: 2, parallel: none}]\n")
    (builtins / "b.yaml").write_text("name: b\ninclude: [c]\ngemms: [{id: gb, N: 2, K: 2, parallel: none}]\n")
    (builtins / "c.yaml").write_text("name: c\ngemms: [{id: gc, N: 2, K: 2, parallel: none}]\n")
    monkeypatch.setattr("gemmbench.models.shape_sets._builtin_dir", lambda: builtins)
    assert builtin_names() == ["a", "b", "c"]
    assert [g.name for g in load("a").gemms] == ["gc", "gb", "ga"]
    (builtins / "c.yaml").write_text("name: c\ninclude: [a]\ngemms: [{id: gc, N: 2, K: 2, parallel: none}]\n")
    with pytest.raises(ShapeError) as e:
        load("a")
    assert str(e.value) == f"{builtins / 'c.yaml'}: include cycle a -> b -> c -> a"
    path = write(tmp_path, "name: u\ninclude: [b]\ngemms: [{id: gu, N: 2, K: 2, parallel: none}]\n")
    with pytest.raises(ShapeError, match=r"include cycle b -> c -> a -> b$"):
        load(path)


def test_mixtral_8x22b_moe():
    s = load("mixtral-8x22b-moe")
    assert dims(s) == [
        ("attn_qkv", 8192, 6144, "qkv", 1, 1),
        ("attn_o", 6144, 6144, "row", 1, 1),
        ("moe_w13", 32768, 6144, "column", 8, 2),
        ("moe_w2", 6144, 16384, "row", 8, 2),
    ]
    assert s.m_values == ALL_M
    w13, w2 = (p for p in problems(s, ["bf16"], [4], tp=8) if p.is_moe)
    assert (w13.N, w13.K, w2.N, w2.K) == (4096, 6144, 6144, 2048)  # TP divides the intermediate size


def test_routing_applies_to_moe_problems_only():
    s = load("mixtral-moe")
    ps = problems(s, ["bf16"], [4], routing="skewed")
    assert [p.routing for p in ps] == ["uniform", "uniform", "skewed", "skewed"]
    assert ps[2].label.endswith("skewed") and "skewed" not in ps[0].label
