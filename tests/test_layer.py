"""`gemmbench layer` on a CPU: the layer's step sequence per model and TP, variant choice (--variants globs and
pins, --best-from), buffers, the reference check, graph blockers, the CPU timing path, the layer table, and the
command end to end on a tiny model (bad inputs: exit 2, one line).

Nothing here needs a GPU.  Models too large for the CPU are only turned into step sequences (no buffers).  The
CLI runs use cublas_* and torch_moe_loop (plain torch on a CPU), never a Triton kernel.  CPU timings are noisy:
they are only asserted positive."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import HAS_CUDA, TIMESTAMP
from conftest import run_row as filled
from typer.testing import CliRunner

from gemmbench import dtypes, registry, shapes
from gemmbench.cli import app
from gemmbench.engine import layer as L
from gemmbench.engine import layer_plan as P
from gemmbench.measure.device import detect, processor_name
from gemmbench.models import shape_sets
from gemmbench.results import side_tables, store
from gemmbench.results.store import StoreError

cpu_only = pytest.mark.skipif(HAS_CUDA, reason="tests the CPU path (no CUDA GPU)")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

TINY_YAML = """\
name: tiny-layer
m: [1, 5]
gemms:
  - {id: attn_qkv, N: 96, K: 64, parallel: qkv, heads: 4, kv_heads: 1, head_dim: 16}
  - {id: attn_o, N: 64, K: 64, parallel: row}
  - {id: moe_w13, N: 64, K: 64, parallel: column, E: 4, topk: 2}
  - {id: moe_w2, N: 64, K: 32, parallel: row, E: 4, topk: 2}
  - {id: lm_head, N: 200, K: 64, parallel: column}
"""
TINY_STEPS = ["attn_qkv", "attn_o", "routing", "moe_w13", "moe_w2"]
TINY_DIMS = {"attn_qkv": (96, 64, 1, 1), "attn_o": (64, 64, 1, 1), "moe_w13": (64, 64, 4, 2), "moe_w2": (64, 32, 4, 2)}
CPU_VARIANTS = "cublas_*,torch_moe_loop"


# ---------------------------------------------------------------- helpers


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def text(s: str) -> str:
    return ANSI.sub("", s)


def bad(res) -> str:
    """A bad input: exit 2, one 'error: ...' line on stderr, nothing on stdout, no traceback."""
    err = text(res.stderr)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, (res.exit_code, err)
    assert "Traceback" not in err and "Traceback" not in res.stdout
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    assert res.stdout == "", res.stdout
    return lines[0]


def names(steps) -> list[str]:
    return [s.name for s in steps]


def dims(steps) -> dict:
    return {s.name: (s.problem.N, s.problem.K, s.problem.E, s.problem.topk) for s in steps if s.is_gemm}


def sequence(model: str, tp: int, M: int = 1, dtype: str = "bf16"):
    """The steps of a model's layer with a dummy variant: no registry, no buffers."""
    return P.steps_for(P.layer_problems(P.resolve_model(model), M, dtype, tp), lambda p: "dummy")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.yaml"
    path.write_text(TINY_YAML)
    return path


@pytest.fixture(scope="module")
def dev():
    return detect()


# ---------------------------------------------------------------- 1. the layer's steps per model and TP


@pytest.mark.parametrize("tp", [1, 8])
def test_llama3_70b_steps(tp):
    steps = sequence("llama3-70b", tp)
    assert names(steps) == ["attn_qkv", "attn_o", "mlp_gate_up", "mlp_down"]  # no routing, no lm_head
    assert all(s.is_gemm and s.variant == "dummy" for s in steps)
    assert dims(steps) == {
        "attn_qkv": (10240 // tp, 8192, 1, 1),
        "attn_o": (8192, 8192 // tp, 1, 1),
        "mlp_gate_up": (57344 // tp, 8192, 1, 1),
        "mlp_down": (8192, 28672 // tp, 1, 1),
    }
    assert {(s.problem.tp, s.problem.M, s.problem.dtype) for s in steps} == {(tp, 1, "bf16")}


MIXTRAL = {
    "mixtral-8x7b": {
        "attn_qkv": (6144, 4096),
        "attn_o": (4096, 4096),
        "moe_w13": (28672, 4096),
        "moe_w2": (4096, 14336),
    },
    "mixtral-8x22b": {
        "attn_qkv": (8192, 6144),
        "attn_o": (6144, 6144),
        "moe_w13": (32768, 6144),
        "moe_w2": (6144, 16384),
    },
}


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("model", list(MIXTRAL))
def test_mixtral_steps(model, tp):
    steps = sequence(model, tp, M=16)
    assert names(steps) == ["attn_qkv", "attn_o", "routing", "moe_w13", "moe_w2"]
    routing = steps[2]
    assert not routing.is_gemm and routing.problem is None and routing.variant is None
    full = MIXTRAL[model]
    col = {"attn_qkv", "moe_w13"}  # column-parallel: TP divides N; the others divide K
    want = {g: ((N // tp, K) if g in col else (N, K // tp)) for g, (N, K) in full.items()}
    assert {g: d[:2] for g, d in dims(steps).items()} == want
    assert dims(steps)["moe_w13"][2:] == (8, 2) and dims(steps)["moe_w2"][2:] == (8, 2)
    assert dims(steps)["attn_qkv"][2:] == (1, 1)


def test_routing_comes_right_before_the_first_moe_gemm_only():
    sset = shape_sets.load_text(
        "x.yaml",
        "name: x\ngemms:\n"
        "  - {id: moe_a, N: 64, K: 64, parallel: none, E: 4, topk: 2}\n"
        "  - {id: dense, N: 64, K: 64, parallel: none}\n"
        "  - {id: moe_b, N: 64, K: 64, parallel: none, E: 4, topk: 2}\n",
    )
    steps = P.steps_for(P.layer_problems(sset, 1, "fp16", 1), lambda p: "v")
    assert names(steps) == ["routing", "moe_a", "dense", "moe_b"]


def test_layer_problems_drop_lm_head_and_refuse_a_set_of_only_lm_head():
    sset = P.resolve_model("llama70b")  # a built-in shape set name works as --model too
    assert "lm_head" in [g.name for g in sset.gemms]
    assert [p.gemm for p in P.layer_problems(sset, 4, "fp16", 1)] == ["attn_qkv", "attn_o", "mlp_gate_up", "mlp_down"]
    only = shape_sets.load_text("head.yaml", "name: head\ngemms:\n  - {id: lm_head, N: 64, K: 64, parallel: column}\n")
    with pytest.raises(P.LayerError, match="lm_head"):
        P.layer_problems(only, 1, "fp16", 1)


def test_tiny_model_steps_from_yaml(tiny):
    steps = sequence(str(tiny), 1, M=5, dtype="fp16")
    assert names(steps) == TINY_STEPS
    assert dims(steps) == TINY_DIMS


HF_LLAMA = {
    "_name_or_path": "someorg/Tiny-Llama",
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "head_dim": None,
}
HF_MIXTRAL = dict(
    HF_LLAMA, _name_or_path="someorg/Tiny-Mixtral", model_type="mixtral", num_local_experts=4, num_experts_per_tok=2
)


@pytest.mark.parametrize("tp", [1, 2])
def test_hf_config_json_dense(tmp_path, tp):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(HF_LLAMA))
    sset = P.resolve_model(str(cfg))
    assert sset.name == "tiny-llama"
    steps = P.steps_for(P.layer_problems(sset, 1, "bf16", tp), lambda p: "v")
    assert names(steps) == ["attn_qkv", "attn_o", "mlp_gate_up", "mlp_down"]
    # head dim 64 / 4 = 16; qkv (4 + 2 * 2) * 16 = 128; gate_up 2 * 128
    assert dims(steps) == {
        "attn_qkv": (128 // tp, 64, 1, 1),
        "attn_o": (64, 64 // tp, 1, 1),
        "mlp_gate_up": (256 // tp, 64, 1, 1),
        "mlp_down": (64, 128 // tp, 1, 1),
    }


def test_hf_config_json_moe(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(HF_MIXTRAL))
    steps = P.steps_for(P.layer_problems(P.resolve_model(str(cfg)), 3, "fp16", 1), lambda p: "v")
    assert names(steps) == ["attn_qkv", "attn_o", "routing", "moe_w13", "moe_w2"]
    assert dims(steps)["moe_w13"] == (256, 64, 4, 2) and dims(steps)["moe_w2"] == (64, 128, 4, 2)


def test_unknown_model_is_a_layer_error():
    with pytest.raises(P.LayerError) as exc:
        P.resolve_model("llama3-7000b")
    msg = str(exc.value)
    assert "llama3-7000b" in msg and "mixtral-8x7b" in msg and "\n" not in msg


def test_missing_model_file_is_a_shape_error(tmp_path):
    with pytest.raises(shapes.ShapeError, match="cannot read"):
        P.resolve_model(str(tmp_path / "nope.yaml"))
    with pytest.raises(shapes.ShapeError, match="cannot read"):
        P.resolve_model(str(tmp_path / "config.json"))


def test_tp_that_does_not_divide_is_one_line():
    with pytest.raises(shapes.ShapeError) as exc:
        sequence("llama3-70b", 3)
    msg = str(exc.value)
    assert msg == "llama70b: attn_qkv: 64 query heads do not divide by TP 3"


# ---------------------------------------------------------------- 2. --variants: globs and pins


def tiny_problems(tiny, M=1, dtype="fp16", tp=1):
    return P.layer_problems(P.resolve_model(str(tiny)), M, dtype, tp)


def plan(tiny, spec, dev, **kw) -> dict:
    return {s.name: s.variant for s in P.steps_for(tiny_problems(tiny, **kw), P.chooser(spec, dev))}


def test_chooser_glob_picks_the_dtype_that_runs(tiny, dev):
    assert plan(tiny, "cublas_*,torch_moe_loop", dev, dtype="bf16") == {
        "attn_qkv": "cublas_bf16",
        "attn_o": "cublas_bf16",
        "routing": None,
        "moe_w13": "torch_moe_loop",
        "moe_w2": "torch_moe_loop",
    }
    assert plan(tiny, "cublas_*,torch_moe_loop", dev, dtype="fp16")["attn_qkv"] == "cublas_fp16"


def test_chooser_tries_globs_in_order(tiny, dev):
    assert plan(tiny, "triton_dp_col,cublas_*,torch_moe_loop", dev)["attn_qkv"] == "triton_dp_col"
    assert plan(tiny, "cublas_*,triton_dp_col,torch_moe_loop", dev)["attn_qkv"] == "cublas_fp16"


def test_chooser_pin_overrides_globs(tiny, dev):
    got = plan(tiny, "cublas_*,attn_o=triton_dp_row,torch_moe_loop,moe_w2=torch_grouped_mm", dev)
    assert got == {
        "attn_qkv": "cublas_fp16",
        "attn_o": "triton_dp_row",
        "routing": None,
        "moe_w13": "torch_moe_loop",
        "moe_w2": "torch_grouped_mm",
    }


@pytest.mark.parametrize(
    "model, dtype, spec",
    [
        ("mixtral-8x7b", "bf16", "cublas_*,torch_moe_loop"),
        ("mixtral-8x22b", "fp16", "cublas_*,torch_moe_loop"),
        ("tiny", "fp16", P.DEFAULT_VARIANTS),
    ],
)
def test_moe_gemms_get_an_moe_variant(dev, tiny, model, dtype, spec):
    sset = P.resolve_model(str(tiny) if model == "tiny" else model)
    steps = P.steps_for(P.layer_problems(sset, 16, dtype, 8 if model != "tiny" else 1), P.chooser(spec, dev))
    for s in steps:
        if not s.is_gemm:
            continue
        v = registry.get(s.variant)
        assert v.gemm and v.moe == s.problem.is_moe, (s.name, s.variant)
        assert v.unsupported_reason(s.problem, dev) is None
    got = {s.name: s.variant for s in steps}
    assert got["attn_o"] == f"cublas_{dtype}"
    if spec == P.DEFAULT_VARIANTS:
        assert got["moe_w13"] == got["moe_w2"] == "triton_moe_col"  # runs under the interpreter at this size
    else:
        assert got["moe_w13"] == got["moe_w2"] == "torch_moe_loop"


@cpu_only
def test_chooser_error_gives_the_reason_of_a_variant_of_the_right_kind(dev):
    # on a CPU, triton_moe_col cannot run bf16 (the interpreter's bf16 tl.dot is wrong)
    choose = P.chooser(P.DEFAULT_VARIANTS, dev)
    with pytest.raises(P.LayerError) as exc:
        P.steps_for(P.layer_problems(P.resolve_model("mixtral-8x7b"), 16, "bf16", 8), choose)
    assert "moe_w13" in str(exc.value)
    msg = str(exc.value)
    assert "does not run MoE GEMMs" not in msg and "interpreter" in msg, msg


def test_chooser_unknown_variant(dev):
    with pytest.raises(registry.RegistryError, match="no_such_variant"):
        P.chooser("cublas_*,attn_o=no_such_variant", dev)
    with pytest.raises(registry.RegistryError, match="no_such_"):
        P.chooser("no_such_*", dev)
    with pytest.raises(P.LayerError, match="empty"):
        P.chooser(" , ", dev)


def test_chooser_glob_that_runs_nothing_names_the_gemm(tiny, dev):
    choose = P.chooser("cublas_*", dev)
    problems = tiny_problems(tiny)
    with pytest.raises(P.LayerError) as exc:
        P.steps_for(problems, choose)
    msg = str(exc.value)
    assert msg.startswith("moe_w13 fp16 M1 N64 K64 E4 top2: no variant of --variants 'cublas_*' runs it here")
    assert "pin one with moe_w13=VARIANT" in msg and "\n" not in msg


def test_chooser_pin_that_cannot_run_the_gemm(tiny, dev):
    choose = P.chooser("cublas_*,torch_moe_loop,attn_o=cublas_bf16", dev)
    with pytest.raises(P.LayerError, match=r"attn_o=cublas_bf16: .*no fp16 path"):
        P.steps_for(tiny_problems(tiny, dtype="fp16"), choose)


def test_chooser_pin_of_an_unknown_gemm_is_an_error(tiny, dev):
    with pytest.raises((P.LayerError, registry.RegistryError)):
        P.chooser("cublas_*,torch_moe_loop,atn_o=triton_dp_row", dev, P.layer_gemms(P.resolve_model(str(tiny))))


def test_chooser_pin_with_spaces(tiny, dev):
    assert plan(tiny, "cublas_*, torch_moe_loop, attn_o = triton_dp_row", dev)["attn_o"] == "triton_dp_row"


def test_chooser_pin_of_a_non_gemm_variant_is_refused(tiny, dev):
    with pytest.raises((P.LayerError, registry.RegistryError)):
        P.steps_for(tiny_problems(tiny), P.chooser("cublas_*,torch_moe_loop,moe_w13=moe_align", dev))


# ---------------------------------------------------------------- 3. --best-from


def run_row(gemm, M, variant, t, *, N=96, K=64, E=1, topk=1, dtype="fp16", status="ok", mode="cold"):
    return filled(
        run_id="r1",
        shape_set="tiny-layer",
        gemm=gemm,
        M=M,
        N=N,
        K=K,
        E=E,
        topk=topk,
        tp=1,
        dtype=dtype,
        variant=variant,
        status=status,
        time_us_median=t if status != "skipped" else None,
        timing_mode=mode,
        routing="uniform" if E > 1 else None,
    )


def best_rows() -> list[dict]:
    q = dict(N=96, K=64)
    w13 = dict(N=64, K=64, E=4, topk=2)
    return [
        # attn_qkv: M=1 triton_dp_row fastest cold; M=16 cublas_fp16 fastest cold
        run_row("attn_qkv", 1, "cublas_fp16", 10.0, **q),
        run_row("attn_qkv", 1, "cublas_fp16", 12.0, **q),
        run_row("attn_qkv", 1, "triton_dp_row", 8.0, **q),
        run_row("attn_qkv", 16, "cublas_fp16", 20.0, **q),
        run_row("attn_qkv", 16, "triton_dp_row", 30.0, **q),
        # faster but to be ignored: a stream row (cold rows exist), a wrong row, a skipped row, a variant that is not
        # registered (a plugin not loaded now), an fp8 row, rows of another N, E or topk
        run_row("attn_qkv", 1, "cublas_fp16", 1.0, mode="stream", **q),
        run_row("attn_qkv", 16, "triton_dp_row", 1.0, mode="stream", **q),
        run_row("attn_qkv", 1, "cublas_fp16", 0.5, status="wrong", **q),
        run_row("attn_qkv", 16, "triton_dp_row", 0.5, status="wrong", **q),
        run_row("attn_qkv", 16, "cublas_fp16", None, status="skipped", **q),
        run_row("attn_qkv", 1, "gone_plugin_variant", 0.1, **q),
        run_row("attn_qkv", 1, "cublas_fp8", 0.1, dtype="fp8", **q),
        run_row("attn_qkv", 1, "triton_dp_col", 0.1, N=128, K=64),
        run_row("attn_qkv", 1, "triton_dp_col", 0.1, N=96, K=64, E=4, topk=1),
        run_row("moe_w13", 1, "triton_moe_row", 0.1, N=64, K=64, E=4, topk=1),
        # MoE: moe_align is no GEMM (faster, ignored)
        run_row("moe_w13", 1, "torch_moe_loop", 50.0, **w13),
        run_row("moe_w13", 1, "torch_grouped_mm", 60.0, **w13),
        run_row("moe_w13", 1, "moe_align", 1.0, **w13),
        run_row("moe_w13", 16, "torch_moe_loop", 90.0, **w13),
        run_row("moe_w13", 16, "torch_grouped_mm", 70.0, **w13),
    ]


@pytest.fixture(scope="module")
def best_runs(tmp_path_factory):
    """best_rows as a real run file, loaded back the way --best-from loads it."""
    path = tmp_path_factory.mktemp("best") / "run.parquet"
    store.write_rows(path, best_rows())
    return store.load([path])


def pick(runs, dev, tiny, gemm, M):
    choose, notes = P.best_chooser(runs, dev)
    p = next(p for p in tiny_problems(tiny, M=M) if p.gemm == gemm)
    return choose(p), notes[p.label]


def test_best_chooser_fastest_cold_ok_variant(best_runs, dev, tiny):
    name, note = pick(best_runs, dev, tiny, "attn_qkv", 1)
    assert name == "triton_dp_row"
    assert note.startswith("triton_dp_row 8.0 µs at M=1") and "nearest" not in note
    name, note = pick(best_runs, dev, tiny, "attn_qkv", 16)
    assert name == "cublas_fp16" and note.startswith("cublas_fp16 20.0 µs at M=16")
    assert pick(best_runs, dev, tiny, "moe_w13", 1)[0] == "torch_moe_loop"
    assert pick(best_runs, dev, tiny, "moe_w13", 16)[0] == "torch_grouped_mm"


def test_best_chooser_median_of_repeated_rows(dev, tiny):
    rows = [run_row("attn_qkv", 1, "cublas_fp16", t) for t in (5.0, 100.0, 6.0)]  # median 6
    rows += [run_row("attn_qkv", 1, "triton_dp_row", t) for t in (7.0, 7.0)]  # median 7, mean would lose
    name, note = pick(pd.DataFrame(rows), dev, tiny, "attn_qkv", 1)
    assert name == "cublas_fp16" and note.startswith("cublas_fp16 6.0 µs")


@pytest.mark.parametrize(
    "M, want_m, want",
    [
        (4, 1, "triton_dp_row"),  # log2 distance 2 to both: the smaller M
        (2, 1, "triton_dp_row"),
        (8, 16, "cublas_fp16"),
        (64, 16, "cublas_fp16"),
    ],
)
def test_best_chooser_nearest_m_in_log2(best_runs, dev, tiny, M, want_m, want):
    name, note = pick(best_runs, dev, tiny, "attn_qkv", M)
    assert name == want
    assert f"at M={want_m} (nearest to M={M})" in note


def test_best_chooser_without_cold_rows_uses_the_others(dev, tiny):
    rows = [r for r in best_rows() if r["timing_mode"] != "cold"]  # only the stream rows are left (ok ones)
    rows.append(run_row("attn_qkv", 1, "triton_dp_row", 3.0, mode="stream"))
    name, note = pick(pd.DataFrame(rows), dev, tiny, "attn_qkv", 1)
    assert name == "cublas_fp16" and note.startswith("cublas_fp16 1.0 µs")


def test_best_chooser_gemm_absent_is_a_layer_error(best_runs, dev, tiny):
    choose, _ = P.best_chooser(best_runs, dev)
    p = next(p for p in tiny_problems(tiny) if p.gemm == "attn_o")
    with pytest.raises(P.LayerError) as exc:
        choose(p)
    assert "attn_o" in str(exc.value) and "N=64 K=64" in str(exc.value)
    bf16 = next(p for p in tiny_problems(tiny, dtype="bf16") if p.gemm == "attn_qkv")
    with pytest.raises(P.LayerError, match="attn_qkv"):  # rows of fp16 only
        choose(bf16)


def test_best_chooser_only_unusable_rows_is_a_layer_error(dev, tiny):
    rows = [
        run_row("attn_qkv", 1, "gone_plugin_variant", 1.0),
        run_row("attn_qkv", 1, "cublas_fp16", 1.0, status="wrong"),
    ]
    choose, _ = P.best_chooser(pd.DataFrame(rows), dev)
    with pytest.raises(P.LayerError, match="attn_qkv"):
        choose(tiny_problems(tiny)[0])


# ---------------------------------------------------------------- buffers, check, graph blockers, timing


@pytest.fixture(scope="module")
def tiny_steps(tiny, dev):
    return P.steps_for(tiny_problems(tiny, M=5), P.chooser(CPU_VARIANTS, dev))


@pytest.fixture(scope="module")
def built(tiny_steps):
    return L.build(tiny_steps, 0, "cpu")


def test_build_and_check_on_cpu(tiny_steps, built):
    assert [b.step for b in built] == list(tiny_steps)
    routing = built[2]
    assert isinstance(routing.fn, L.Routing)
    ids = routing.fn()
    assert ids.shape == (5, 2) and int(ids.min()) >= 0 and int(ids.max()) < 4
    for b in built[3:]:  # the expert GEMMs read the layer's routing, not routings of their own
        assert b.inputs.topk_ids is routing.fn.ids and b.inputs.topk_weights is routing.fn.weights
    checks = L.check(built)
    assert [c["step"] for c in checks] == ["attn_qkv", "attn_o", "moe_w13", "moe_w2"]
    for c in checks:
        assert c["ok"], c
        assert 0 <= c["max_rel_err"] < dtypes.FP16.tolerance
    out = built[0].fn()
    assert tuple(out.shape) == (5, 96) and out.dtype == torch.float16


def test_layer_copies_have_distinct_weights(tiny_steps, built):
    other = L.build(tiny_steps, 7919, "cpu")
    assert not torch.equal(built[0].inputs.b, other[0].inputs.b)
    assert built[0].inputs.b.shape == other[0].inputs.b.shape


def test_graph_blockers_name_the_host_syncing_variant(built, tiny, dev):
    blockers = L.graph_blockers(built)
    assert len(blockers) == 2, blockers
    assert "torch_moe_loop" in blockers[0] and "moe_w13" in blockers[0]
    assert "torch_moe_loop" in blockers[1] and "moe_w2" in blockers[1]
    dense = L.build(P.steps_for([p for p in tiny_problems(tiny) if not p.is_moe], P.chooser("cublas_*", dev)), 0, "cpu")
    assert L.graph_blockers(dense) == []


@cpu_only
def test_measure_on_cpu_skips_graph_mode(built):
    m = L.measure([built], 0.02, "test")
    assert m.graph is None and m.graph_max_rel_err is None
    assert m.graph_reason == "no CUDA GPU: graph mode skipped"
    assert len(m.kernel_samples) == len(built)
    assert all(len(s) > 0 and min(s) > 0 for s in m.kernel_samples)
    assert len(m.eager) >= 10 and min(m.eager) > 0


def test_rows_for_a_failed_layer(tiny_steps):
    meta = dict(run_id="x", model="tiny", shape_set="tiny-layer", tp=1, dtype="fp16", M=5, layers=1)
    rows = L.rows_for(meta, tiny_steps, [], None, "error", "RuntimeError: boom")
    assert [r["part"] for r in rows] == ["layer"] + ["step"] * 5
    assert all(
        r["family"] == "layer" and r["layer_schema"] == side_tables.LAYER_SCHEMA and r["status"] == "error"
        for r in rows
    )
    assert rows[0]["reason"] == "RuntimeError: boom" and rows[0]["steps"] == 5
    assert "kernel_us" not in rows[0] and "eager_us" not in rows[0]
    assert [r["gemm"] for r in rows[1:]] == TINY_STEPS and [r["step"] for r in rows[1:]] == list(range(5))


# ---------------------------------------------------------------- 4. the command end to end (CPU)


@pytest.fixture(scope="module")
def main_layer(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("layer") / "sub" / "x.parquet"  # the folder does not exist yet
    res = invoke(
        "layer",
        "--model",
        tiny,
        "--dtype",
        "fp16",
        "--m",
        "1,5",
        "--variants",
        CPU_VARIANTS,
        "--budget",
        "0.05",
        "--out",
        out,
    )
    return res, out


@cpu_only
def test_layer_cli_exit_and_streams(main_layer):
    res, out = main_layer
    err = text(res.stderr)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 0, err
    assert "Traceback" not in err
    assert "No CUDA GPU: CPU path." in err
    assert f"Results: {out}" in err.replace("\n", "")
    stdout = text(res.stdout)
    assert "tiny-layer layer, tp 1, fp16" in stdout
    assert "cublas_fp16+torch_moe_loop" in stdout
    assert "kernel time per step" in stdout


@cpu_only
def test_layer_cli_rows(main_layer, tiny):
    _, out = main_layer
    df = side_tables.load_layer_tables([out])
    assert (df["family"] == "layer").all() and (df["layer_schema"] == side_tables.LAYER_SCHEMA).all()
    assert df["run_id"].nunique() == 1 and "tiny-layer" in df["run_id"].iloc[0]
    assert (df["shape_set"] == "tiny-layer").all() and (df["model"] == str(tiny)).all()
    assert (df["tp"] == 1).all() and (df["dtype"] == "fp16").all() and (df["layers"] == 1).all()
    assert (df["status"] == "ok").all(), df[["part", "gemm", "status"]]
    assert (df["device"] == "cpu").all() and (df["timing_mode"] == "wall").all()
    assert (df["cpu"] == processor_name()).all()  # the provenance column survives the layer table's column list
    layer_rows = df[df["part"] == "layer"]
    step_rows = df[df["part"] == "step"]
    assert sorted(layer_rows["M"]) == [1, 5]
    assert len(step_rows) == 2 * 5 and len(df) == 2 * 6
    assert "lm_head" not in set(df["gemm"])
    for _M, g in step_rows.groupby("M"):
        g = g.sort_values("step")
        assert list(g["gemm"]) == TINY_STEPS
        assert list(g["step"].astype(int)) == list(range(5))
        assert list(g["variant"]) == ["cublas_fp16", "cublas_fp16", "torch", "torch_moe_loop", "torch_moe_loop"]
        for r in g.itertuples():
            assert r.kernel_us > 0 and r.kernel_us_p20 <= r.kernel_us <= r.kernel_us_p80
            assert len(r.samples_us) > 0
            if r.gemm == "routing":
                assert pd.isna(r.N) and pd.isna(r.max_rel_err)
            else:
                assert (int(r.N), int(r.K), int(r.E), int(r.topk)) == TINY_DIMS[r.gemm]
                assert 0 <= r.max_rel_err < dtypes.FP16.tolerance


@cpu_only
def test_layer_cli_layer_row(main_layer):
    _, out = main_layer
    df = side_tables.load_layer_tables([out])
    steps = df[df["part"] == "step"]
    for r in df[df["part"] == "layer"].itertuples():
        assert r.gemm == "layer" and r.variant == "cublas_fp16+torch_moe_loop" and int(r.steps) == 5
        assert json.loads(r.plan) == {
            "attn_qkv": "cublas_fp16",
            "attn_o": "cublas_fp16",
            "routing": "torch",
            "moe_w13": "torch_moe_loop",
            "moe_w2": "torch_moe_loop",
        }
        assert r.eager_us > 0 and r.kernel_us > 0
        assert len(r.eager_samples) >= 10 and r.eager_us == pytest.approx(float(np.median(r.eager_samples)))
        # the sum and the gap are definitions, not timing relations
        assert r.kernel_us == pytest.approx(steps[steps["M"] == r.M]["kernel_us"].sum())
        assert r.gap_us == pytest.approx((r.eager_us - r.kernel_us) / 5)
        assert r.graph_reason == "no CUDA GPU: graph mode skipped"
        assert pd.isna(r.graph_max_rel_err)
        assert 0 <= r.max_rel_err < dtypes.FP16.tolerance
        assert r.l2_state == "cold at layer start"
    for col in ("graph_us", "graph_samples", "graph_gap_us", "graph_speedup"):
        assert col in df.columns and df[col].isna().all(), col  # every column always there, null on a CPU


# ---------------------------------------------------------------- 5. bad inputs: exit 2, one line


def layer_args(tiny, out, **over):
    opts = {"--model": str(tiny), "--dtype": "fp16", "--m": "1", "--variants": CPU_VARIANTS, "--budget": "0.02"}
    opts.update(over)
    args = ["layer"]
    for k, v in opts.items():
        if v is not None:
            args += [k, str(v)]
    return args + ["--out", str(out)]


@pytest.fixture(scope="module")
def not_a_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("notrun")
    (d / "notes.parquet").write_text("this is not parquet\n")
    return d / "notes.parquet"


BAD = {
    "unknown-model": ({"--model": "llama3-7000b"}, ["llama3-7000b", "llama3-70b"]),
    "missing-yaml": ({"--model": "{d}/no_such.yaml"}, ["no_such.yaml", "cannot read"]),
    "tp-indivisible": ({"--model": "llama3-70b", "--tp": "3"}, ["attn_qkv", "64 query heads do not divide by TP 3"]),
    "tp-indivisible-tiny": ({"--tp": "5"}, ["attn_qkv", "4 query heads do not divide by TP 5"]),
    "variants-and-best-from": ({"--best-from": "{nr}"}, ["--variants", "--best-from"]),
    "layers-0": ({"--layers": "0"}, ["--layers", "0"]),
    "budget-0": ({"--budget": "0"}, ["--budget"]),
    "budget-nan": ({"--budget": "nan"}, ["--budget"]),
    "variants-unknown": ({"--variants": "nope_*"}, ["nope_*", "matches no variant"]),
    "variants-pin-unknown": ({"--variants": "cublas_*,torch_moe_loop,attn_o=nope"}, ["unknown variant 'nope'"]),
    "variants-run-nothing": ({"--variants": "cublas_*"}, ["moe_w13", "moe_w13=VARIANT"]),
    "best-from-not-parquet": ({"--variants": None, "--best-from": "{nr}"}, ["notes.parquet", "not a readable"]),
    "best-from-missing": ({"--variants": None, "--best-from": "{d}/gone.parquet"}, ["gone.parquet", "no such file"]),
    "dtype-fp4": ({"--dtype": "fp4"}, ["--dtype", "fp4"]),
    "m-0": ({"--m": "0"}, ["--m", "'0'"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_error_line_and_exit_2(case, tiny, not_a_run, tmp_path):
    over, fragments = BAD[case]
    over = {k: (v.format(d=tmp_path, nr=not_a_run) if v else v) for k, v in over.items()}
    out = tmp_path / "never" / "x.parquet"
    line = bad(invoke(*layer_args(tiny, out, **over)))
    for frag in fragments:
        assert frag in line, (frag, line)
    assert not out.exists()


@cpu_only
def test_best_from_a_layer_table_is_one_error_line(main_layer, tiny, tmp_path):
    _, layer_file = main_layer
    line = bad(invoke(*layer_args(tiny, tmp_path / "x.parquet", **{"--variants": None, "--best-from": layer_file})))
    assert str(layer_file) in line and "a layer table, not a run file" in line


@cpu_only
def test_cpu_refuses_a_model_too_large(tmp_path):
    line = bad(invoke("layer", "--model", "llama3-70b", "--m", "1", "--out", tmp_path / "x.parquet"))
    assert "too large for the CPU path" in line


@cpu_only
def test_best_from_end_to_end(tiny, tmp_path):
    """A tiny run file: per GEMM the fastest cold ok variant that runs here becomes the layer's plan."""
    q, o = dict(N=96, K=64), dict(N=64, K=64)
    w13, w2 = dict(N=64, K=64, E=4, topk=2), dict(N=64, K=32, E=4, topk=2)
    rows = [
        run_row("attn_qkv", 1, "cublas_fp16", 5.0, **q),
        run_row("attn_qkv", 1, "triton_dp_row", 9.0, **q),
        run_row("attn_qkv", 1, "triton_dp_row", 1.0, status="wrong", **q),
        run_row("attn_o", 16, "cublas_fp16", 5.0, **o),
        run_row("attn_o", 16, "triton_dp_row", 9.0, **o),
        run_row("moe_w13", 1, "torch_moe_loop", 5.0, **w13),
        run_row("moe_w13", 1, "torch_grouped_mm", 9.0, **w13),
        run_row("moe_w13", 1, "torch_grouped_mm", 1.0, mode="stream", **w13),
        run_row("moe_w2", 1, "torch_moe_loop", 5.0, **w2),
        run_row("moe_w2", 1, "moe_align", 1.0, **w2),
    ]
    run_file = tmp_path / "run.parquet"
    store.write_rows(run_file, rows)
    out = tmp_path / "layer.parquet"
    res = invoke(
        "layer",
        "--model",
        tiny,
        "--dtype",
        "fp16",
        "--m",
        "2",
        "--best-from",
        run_file,
        "--budget",
        "0.02",
        "--out",
        out,
    )
    err = text(res.stderr).replace("\n", " ")
    assert res.exit_code == 0, err
    assert "Traceback" not in err
    assert re.search(r"--best-from attn_qkv fp16 M2 N96 K64: cublas_fp16 5\.0 µs at M=1 \(nearest to M=2\)", err), err
    assert re.search(r"--best-from attn_o fp16 M2 N64 K64: cublas_fp16 5\.0 µs at M=16 \(nearest to M=2\)", err), err
    df = side_tables.load_layer_tables([out])
    lay = df[df["part"] == "layer"]
    assert len(lay) == 1 and lay["status"].iloc[0] == "ok"
    assert json.loads(lay["plan"].iloc[0]) == {
        "attn_qkv": "cublas_fp16",
        "attn_o": "cublas_fp16",
        "routing": "torch",
        "moe_w13": "torch_moe_loop",
        "moe_w2": "torch_moe_loop",
    }
    assert lay["eager_us"].iloc[0] > 0


# ---------------------------------------------------------------- 6. the layer table


def test_write_load_round_trip_and_folder(tmp_path, tiny_steps):
    meta = dict(run_id="a", model="tiny", shape_set="tiny-layer", tp=1, dtype="fp16", M=1, layers=1)
    side_tables.write_layer_table(tmp_path / "a.parquet", L.rows_for(meta, tiny_steps, [], None, "error", "x"))
    side_tables.write_layer_table(
        tmp_path / "b.parquet", L.rows_for(dict(meta, run_id="b"), tiny_steps, [], None, "error", "y")
    )
    one = side_tables.load_layer_tables([tmp_path / "a.parquet"])
    assert len(one) == 6 and set(one["run_id"]) == {"a"}
    both = side_tables.load_layer_tables([tmp_path])  # a folder: its .parquet files
    assert len(both) == 12 and set(both["run_id"]) == {"a", "b"}


def test_load_refuses_a_run_file(tmp_path):
    path = tmp_path / "run.parquet"
    store.write_rows(path, [run_row("attn_qkv", 1, "cublas_fp16", 5.0)])
    with pytest.raises(StoreError) as exc:
        side_tables.load_layer_tables([path])
    msg = str(exc.value)
    assert str(path) in msg and "not a layer table" in msg and "\n" not in msg


def test_load_refuses_junk_and_other_versions(tmp_path, not_a_run, tiny_steps):
    with pytest.raises(StoreError, match="not a readable Parquet file"):
        side_tables.load_layer_tables([not_a_run])
    with pytest.raises(StoreError, match="no such file"):
        side_tables.load_layer_tables([tmp_path / "gone.parquet"])
    rows = L.rows_for(dict(run_id="a", M=1), tiny_steps, [], None, "error", "x")
    for r in rows:
        r["layer_schema"] = side_tables.LAYER_SCHEMA + 1
    side_tables.write_layer_table(tmp_path / "new.parquet", rows)
    with pytest.raises(StoreError, match="another gemmbench version"):
        side_tables.load_layer_tables([tmp_path / "new.parquet"])


def test_load_takes_one_path(tmp_path, tiny_steps):
    side_tables.write_layer_table(
        tmp_path / "a.parquet", L.rows_for(dict(run_id="a", M=1), tiny_steps, [], None, "error", "x")
    )
    assert len(side_tables.load_layer_tables(str(tmp_path / "a.parquet"))) == 6


# ---------------------------------------------------------------- measure() stops once its medians are known


class _SteadyTimer:
    """Stands in for gemmbench.measure.timing.Timer: steady samples at once, and what measure() asked of it."""

    asked: list = []

    def __init__(self, mode, **kwargs):
        self.mode, self.kwargs = mode, kwargs

    def measure(self, fns, graph_safe=True):
        return [2.0] * 10

    def prepare_host(self, fn, *, evict, per_sample=1, cell=None):
        _SteadyTimer.asked.append((self.mode, evict, per_sample, cell))
        return cell

    def run(self, prepared):
        return {k: [5.0] * 10 for k in prepared}


def test_measure_samples_the_layer_through_the_one_timer(monkeypatch, built):
    """Eager (and graph) layer samples come from timing.Timer's host sampler under its stopping rule; layer.py has
    no sampling loop of its own."""
    import gemmbench.measure.timing

    monkeypatch.setattr(gemmbench.measure.timing, "Timer", _SteadyTimer)
    _SteadyTimer.asked = []
    m = L.measure([built, built], 0.3, "steady")
    assert m.graph is None  # torch_moe_loop blocks the graph (and there is no GPU here)
    assert m.eager == [5.0] * 10 and all(s == [2.0] * 10 for s in m.kernel_samples)
    assert _SteadyTimer.asked == [("wall", False, 2, "eager layer steady")]  # per layer: two copies per launch


def test_best_chooser_prefers_cold_rows_per_gemm_and_uniform_routing(dev, tiny):
    """Cold rows win where a GEMM has them; a GEMM measured only in stream mode still gets its pick; rows of
    another routing (skewed, one-expert) never decide the layer's, which routes by softmax top-k."""
    w13 = dict(N=64, K=64, E=4, topk=2)
    rows = [
        run_row("attn_qkv", 1, "cublas_fp16", 10.0),
        run_row("attn_qkv", 1, "triton_dp_row", 5.0, mode="stream"),
        run_row("attn_o", 1, "cublas_fp16", 7.0, N=64, mode="stream"),
        run_row("moe_w13", 1, "torch_moe_loop", 50.0, **w13),
        dict(run_row("moe_w13", 1, "torch_grouped_mm", 1.0, **w13), routing="one-expert"),
    ]
    choose, _ = P.best_chooser(pd.DataFrame(rows), dev)
    got = {p.gemm: choose(p) for p in tiny_problems(tiny, M=1) if p.gemm != "moe_w2"}
    assert got == {"attn_qkv": "cublas_fp16", "attn_o": "cublas_fp16", "moe_w13": "torch_moe_loop"}


# ---------------------------------------------------------------- 7. gemmbench plot --kind layer


@cpu_only
def test_plot_kind_layer_draws_kernels_and_gaps(main_layer, tmp_path):
    """The stacked bars: per plan an eager bar of kernels plus gaps; on a CPU no graph bar, and the footnote says
    why.  Drawn from the layer table the command wrote; a run-file kind on a layer table is refused."""
    from gemmbench.plot import data as plotdata
    from gemmbench.plot import layer as plots_layer

    _, out = main_layer
    res = invoke("plot", out, "--kind", "layer", "--out", tmp_path / "figs")
    assert res.exit_code == 0, text(res.stderr)
    assert (tmp_path / "figs" / "layer-tiny-layer-tp1-fp16.png").stat().st_size > 0
    (drawn,) = plots_layer.figures(plotdata.read([out]).layers)
    gids = {a.get_gid() for a in drawn.figure.findobj() if a.get_gid()}
    plan = side_tables.load_layer_tables(out).query("part == 'layer'")["variant"].iloc[0]
    assert {f"kernels:{plan}:eager", f"gaps:{plan}:eager"} <= gids
    assert not any(g.endswith(":graph") for g in gids)
    foot = next(a for a in drawn.figure.findobj() if a.get_gid() == "footnote").get_text()
    assert "no graph time" in foot and "graph mode skipped" in foot
    line = bad(invoke("plot", out, "--kind", "speedup", "--out", tmp_path / "figs"))
    assert "layer tables" in line


@cpu_only
@pytest.mark.parametrize("moe", ["torch_grouped_mm", "torch_moe_loop"])
def test_a_set_whose_moe_gemms_differ_in_experts_gets_one_routing_each(tmp_path, moe):
    """The smoke set's MoE GEMMs have E 4 and E 3: each is routed over its own experts (a routing step each), so
    no expert index runs past the other's weights and every GEMM checks right."""
    out = tmp_path / "l.parquet"
    res = invoke("layer", "--model", "smoke", "--m", "1,5", "--variants", f"cublas_*,{moe}", "--budget", "0.01",
                 "--out", out)  # fmt: skip
    assert res.exit_code == 0, text(res.stderr)
    df = side_tables.load_layer_tables([out])
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["gemm", "reason"]].to_string()
    steps = list(df[(df["part"] == "step") & (df["M"] == 1)]["gemm"])
    assert (
        steps.index("routing")
        < steps.index("smoke_moe")
        < steps.index("routing_E3_top2")
        < steps.index("smoke_moe_odd")
    )


@cpu_only
def test_layer_smoke_runs_on_the_cpu_with_its_defaults(smoke_layer_json):
    res, out = smoke_layer_json  # `layer --model smoke --m 1 --budget 0.01`: default variants and dtype
    assert res.exit_code == 0, text(res.stderr)
    table = side_tables.load_layer_tables([out])
    top = table.query("part == 'layer'")
    assert list(top["dtype"]) == ["fp16"] and (top["status"] == "ok").all()
    # a 16-bit layer is unscaled with no fp8 contract, in its own rows and each step's, as its run rows are
    assert set(table["scaling"]) == {"none"} and set(table["fp8_accum"]) == {"none"}


# ---------------------------------------------------------------- 8. a gap below zero is noise, shown as N/A

# Five steps of 100 µs each alone: a kernel sum of 500 µs.  Eager 400 µs per layer: gap (400 - 500) / 5 = -20 µs a
# step, below zero (seen on the CPU: -5226.6 µs); eager 600 µs: +20.  Graph 450 µs: (450 - 500) / 5 = -10.
KERNELS = [[100.0] * 5] * 5
GAP_META = dict(run_id="gaps", timestamp=TIMESTAMP, model="tiny", shape_set="tiny-layer", tp=1,
                dtype="fp16", layers=1, device="cpu", gpu=None, cpu="Test CPU")  # fmt: skip


def gap_rows(tiny_steps, M: int, eager: float, graph=None) -> list:
    m = L.Measured(KERNELS, [eager] * 5, graph=None if graph is None else [graph] * 5, kernel_modes=["wall"] * 5,
                   graph_reason=None if graph else "no CUDA GPU: graph mode skipped")  # fmt: skip
    return L.rows_for(dict(GAP_META, M=M), tiny_steps, [], m, "ok", None)


def test_a_gap_below_zero_is_kept_and_marked(tiny_steps):
    below = gap_rows(tiny_steps, 1, 400.0)[0]
    assert below["kernel_us"] == 500.0 and below["gap_us"] == pytest.approx(-20.0)  # the measured number stays
    assert below["gap_note"] == "eager < kernel sum: timing noise"
    above = gap_rows(tiny_steps, 5, 600.0)[0]
    assert above["gap_us"] == pytest.approx(20.0) and above["gap_note"] is None
    graph = gap_rows(tiny_steps, 5, 600.0, graph=450.0)[0]
    assert graph["graph_gap_us"] == pytest.approx(-10.0) and graph["gap_note"] == "graph < kernel sum: timing noise"
    both = gap_rows(tiny_steps, 5, 400.0, graph=450.0)[0]
    assert both["gap_note"] == "eager < kernel sum: timing noise; graph < kernel sum: timing noise"


def layer_table(printed: str) -> dict:
    """{M: [cells]} of the first table `gemmbench layer` prints (the layer rows), wrapped cells joined."""
    rows: dict = {}
    for ln in text(printed).split("kernel time per step")[0].splitlines():
        if not ln.startswith("│"):
            continue
        cells = [c.strip() for c in ln.strip().strip("│").split("│")]
        if cells[0]:
            rows[cells[0]] = cells
        else:  # a continuation line of the row above
            last = rows[list(rows)[-1]]
            rows[list(rows)[-1]] = [f"{a} {b}".strip() for a, b in zip(last, cells, strict=True)]
    return rows


def test_the_layer_table_shows_na_for_a_gap_below_zero_and_says_why(tiny_steps):
    from gemmbench.cli import common
    from gemmbench.cli import layer as cli_layer

    rows = gap_rows(tiny_steps, 1, 400.0) + gap_rows(tiny_steps, 5, 600.0)
    with common.out.capture() as cap:
        cli_layer._print(rows)
    table = layer_table(cap.get())
    # columns: M, variants, kernels, eager, graph, gap eager, gap graph, graph speedup, status
    assert table["1"][2:6] == ["500.0", "400.0", "", "N/A"]
    assert table["1"][8] == "ok; no graph: no CUDA GPU: graph mode skipped; eager < kernel sum: timing noise"
    assert table["5"][2:6] == ["500.0", "600.0", "", "20.0"]
    assert table["5"][8] == "ok; no graph: no CUDA GPU: graph mode skipped"
    assert "-20.0" not in cap.get()


def test_the_layer_plot_draws_no_gap_and_writes_na_below_zero(tiny_steps):
    from gemmbench.plot import layer as plots_layer

    rows = gap_rows(tiny_steps, 1, 400.0) + gap_rows(tiny_steps, 5, 600.0)
    (drawn,) = plots_layer.figures(pd.DataFrame(rows))
    fig = drawn.figure
    plan = rows[0]["variant"]
    labels = {a.get_gid(): a.get_text() for a in fig.findobj() if (a.get_gid() or "").startswith("value:")}
    assert labels == {f"value:{plan}:eager:1": " 400, gap N/A", f"value:{plan}:eager:5": " 600"}
    gaps = [a.get_height() for a in fig.findobj() if a.get_gid() == f"gaps:{plan}:eager"]
    assert gaps == [0.0, pytest.approx(100.0)]  # M=1: 400 - 500 drawn as no gap; M=5: 600 - 500
    foot = " ".join(next(a for a in fig.findobj() if a.get_gid() == "footnote").get_text().split())
    assert f"{plan}, eager: gap N/A at M = 1 (eager < kernel sum: timing noise)" in foot
    assert "CPU (Test CPU)" in fig._suptitle.get_text()


def test_layer_tables_from_before_the_accumulation_contracts_read_as_precise():
    """The committed layer tables predate the `fp8_accum` column: their fp8 rows ran precise (every fp8 row did then)
    and 16-bit rows have none, so they group with today's rows instead of beside them."""
    from pathlib import Path

    from gemmbench.results.side_tables import load_layer_tables

    root = Path(__file__).parent.parent / "benchmarks" / "data" / "layer"
    df = load_layer_tables([root / "llama70b.parquet", root / "mixtral.parquet"])
    assert set(zip(df["dtype"], df["fp8_accum"], strict=True)) == {("fp8", "precise"), ("bf16", "none")}


def test_a_step_whose_variant_fails_takes_the_next_of_variants(tmp_path):
    """test_refuse raises at make() on N 64 (smoke_square), as cuBLAS's block-scaled fp8 refuses some K at run time:
    that step runs the next variant of --variants (cuBLAS), the others keep test_refuse, and the row says why."""
    from pathlib import Path

    from test_cli import invoke

    from gemmbench.results.side_tables import load_layer_tables

    plugin = Path(__file__).parent / "plugins" / "refuse_plugin.py"
    out = tmp_path / "l.parquet"
    res = invoke("layer", "--model", "smoke", "--m", "1", "--variants", "test_refuse,cublas_*,torch_moe_loop",
                 "--plugin", plugin, "--budget", "0.01", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    steps = load_layer_tables([out]).query("part == 'step'").set_index("gemm")
    assert (steps.loc["smoke_square", "variant"], steps.loc["smoke_tails", "variant"]) == ("cublas_fp16", "test_refuse")
    why = steps.loc["smoke_square", "fallback"]
    assert (
        why.startswith("test_refuse: RuntimeError: Invalid scaling configuration for N 64")
        and "refuse_plugin.py:" in why
    )
    assert steps["fallback"].drop("smoke_square").isna().all()
    assert "M 1 smoke_square: cublas_fp16 ran, after test_refuse: RuntimeError" in " ".join(res.stderr.split())
    # with no variant left after it, the layer is the error it always was
    res = invoke("layer", "--model", "smoke", "--m", "1", "--variants", "smoke_square=test_refuse,cublas_*,torch_moe_loop",
                 "--plugin", plugin, "--budget", "0.01", "--out", tmp_path / "m.parquet")  # fmt: skip
    layer = load_layer_tables([tmp_path / "m.parquet"]).query("part == 'layer'").iloc[0]
    assert layer["status"] == "error" and "Invalid scaling configuration for N 64" in layer["reason"]
    # a fallback that ends its worker: the layer's error names the fallback, not the variant that failed before it
    res = invoke("layer", "--model", "smoke", "--m", "1", "--variants", "test_refuse,test_dies,cublas_*,torch_moe_loop",
                 "--plugin", plugin, "--budget", "0.01", "--out", tmp_path / "d.parquet")  # fmt: skip
    layer = load_layer_tables([tmp_path / "d.parquet"]).query("part == 'layer'").iloc[0]
    assert layer["status"] == "error"
    assert layer["reason"].startswith(
        "check, smoke_square on test_dies after test_refuse failed: worker died (exit code 3"
    )
