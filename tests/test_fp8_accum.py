"""fp8 accumulation as a problem dimension (--fp8-accum precise,fast) on the CPU: problems multiplied for fp8 only,
skipped rows that name what a variant runs, block scales without fast, one-line errors, the rows and cell keys
that keep a fast cell apart from a precise one, Triton's promotion interval, the fast tolerance rule, and a tiny
real run that writes both contracts' rows.  Expected values are derived here, by hand, not read from the code."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_row
from test_cli import bad, cpu_only, invoke, table_rows
from test_compare import row as compare_row
from test_compare import write as write_run
from test_ranking import timed

from gemmbench import dtypes, registry
from gemmbench.configs.kernel_config import KernelConfig
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.kernels.tile_loop import fp8_promote_every
from gemmbench.measure import check
from gemmbench.measure.inputs import make_inputs
from gemmbench.models import shape_sets, sharding
from gemmbench.results import cells, shard, store, tables
from gemmbench.results import compare as cmp
from gemmbench.shapes import Problem

FP8_TOL = 1.6e-2  # the fp8 row of the tolerance table (gemmbench/dtypes.py), written out


def problem(**over) -> Problem:
    return Problem(**{"shape_set": "s", "gemm": "g", "M": 1, "N": 32, "K": 64, "dtype": "fp8", **over})


# ---------------------------------------------------------------- problems


def test_problem_default_label_and_normalisation():
    precise, fast = problem(), problem(fp8_accum="fast")
    assert precise.fp8_accum == "precise" and precise.label == "g fp8 M1 N32 K64"  # the label it had before
    assert fast.label == "g fp8 fast M1 N32 K64"
    assert problem(dtype="bf16").fp8_accum == "none"  # 16-bit: summed in fp32, no contract
    assert precise.with_(dtype="fp16").fp8_accum == "none" and precise.with_(dtype="fp16").with_(dtype="fp8") == precise
    assert problem(scaling="row", fp8_accum="fast").label == "g fp8 row fast M1 N32 K64"


def test_cells_multiply_for_fp8_only():
    sset = shape_sets.load("smoke")
    got = sharding.problems(sset, ["fp16", "fp8"], [1], fp8_accums=["precise", "fast"])
    # by hand: every GEMM once in fp16 ("none"), twice in fp8 (precise, then fast)
    want = [(g.name, d, a) for g in sset.gemms for d, a in (("fp16", "none"), ("fp8", "precise"), ("fp8", "fast"))]
    assert [(p.gemm, p.dtype, p.fp8_accum) for p in got] == want


@cpu_only
def test_dry_run_cells_multiply_for_fp8_only():
    res = invoke("run", "--shapes", "smoke", "--dtype", "fp16,fp8", "--m", "1", "--variants", "cublas_fp16,cublas_fp8",
                 "--fp8-accum", "precise,fast", "--dry-run", "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    cells = json.loads(res.stdout)["cells"]
    dense = [g.name for g in shape_sets.load("smoke").gemms if g.E == 1]  # the MoE GEMMs have no variant here
    want = {(g, d, a) for g in dense for d, a in (("fp16", "none"), ("fp8", "precise"), ("fp8", "fast"))}
    assert sorted((c["gemm"], c["dtype"], c["fp8_accum"]) for c in cells) == sorted(want)
    # cuBLAS declares both contracts: no fp8 cell of it is skipped for its contract (on the CPU: "needs a GPU")
    assert not any("declares no" in why for c in cells for why in c["skips"].values())


# ---------------------------------------------------------------- skipped rows


def test_a_variant_without_fast_is_a_skipped_row_naming_what_it_runs():
    only_precise = registry.Variant("t_precise_only", "t", ("fp8",), "test", make=lambda p, i: None)
    assert only_precise.fp8_accums == ("precise",)  # the default
    assert only_precise.declared_reason(problem()) is None
    reason = only_precise.declared_reason(problem(fp8_accum="fast"))
    assert reason == "t_precise_only declares no fast accumulation support: runs precise"
    assert registry.scaling_excluded(reason)  # counted under the tables, not printed: --fp8-accum precise runs it
    with pytest.raises(ValueError, match="turbo"):
        registry.Variant("t_bad", "t", ("fp8",), "test", make=lambda p, i: None, fp8_accums=("turbo",))


def test_block_scales_with_fast_are_skipped_for_every_variant():
    fp8_variants = [v for v in registry.all_variants() if "fp8" in v.dtypes]
    assert {"cublas_fp8", "cublas_fp8_block", "triton_dp_grouped", "triton_moe_col"} <= {v.name for v in fp8_variants}
    for scaling in ("block", "block-ue8m0"):
        for moe in (False, True):
            p = problem(scaling=scaling, fp8_accum="fast", **({"E": 4, "topk": 2} if moe else {}))
            for v in fp8_variants:
                reason = v.declared_reason(p)
                assert reason and "no fast accumulation" in reason and "128-K" in reason, (v.name, reason)
                assert not registry.scaling_excluded(reason)  # shown: no --fp8-accum or --scaling choice runs it
    assert registry.get("cublas_fp8_block").declared_reason(problem(scaling="block")) is None  # precise runs


def test_which_variants_declare_fast():
    fast = {v.name for v in registry.all_variants() if "fast" in v.fp8_accums}
    # by hand: cuBLAS per tensor and row-wise (use_fast_accum), every Triton GEMM (fp8_promote_every)
    assert {"cublas_fp8", "cublas_fp8_rowwise", "triton_dp_row", "triton_splitk_atomic", "triton_splitk_reduce_rowwise",
            "triton_persistent", "triton_streamk", "triton_moe_col", "triton_moe_splitk"} <= fast  # fmt: skip
    assert not {"cublas_fp8_block", "inductor_mm", "torch_moe_loop"} & fast


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    "args,words",
    [
        (("--dtype", "fp8", "--fp8-accum", "turbo"), "--fp8-accum 'turbo': choose from precise, fast"),
        (("--dtype", "fp8", "--fp8-accum", ""), "--fp8-accum '': choose from"),
        (("--dtype", "fp16", "--fp8-accum", "fast"), "applies to fp8 only"),
        (("--dtype", "fp8", "--variants", "inductor_mm", "--fp8-accum", "fast"), "no selected fp8 variant runs it"),
        (("--dtype", "fp8", "--scaling", "block", "--fp8-accum", "fast"), "no fast accumulation"),
    ],
)
def test_bad_fp8_accum_is_one_line_exit_2(args, words):
    assert words in bad(invoke("run", "--shapes", "smoke", *args, "--dry-run"))


def test_block_and_fast_with_a_16_bit_dtype_runs_the_16_bit_cells():
    """Only where fp8 alone is asked does block x fast leave nothing to run: with bf16 beside it, the bf16 cells run
    and the fp8 ones are skipped rows naming the reason."""
    res = invoke("run", "--shapes", "smoke", "--dtype", "fp8,bf16", "--scaling", "block", "--fp8-accum", "fast",
                 "--dry-run", "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "bf16" in res.stdout and "no fast accumulation" in res.stdout


def test_bad_fp8_accum_in_tune_and_layer():
    assert "--fp8-accum 'x'" in bad(invoke("tune", "--shapes", "smoke", "--dtype", "fp8", "--fp8-accum", "x"))
    layer = invoke("layer", "--model", "smoke", "--dtype", "fp8", "--fp8-accum", "x", "--out", "unused.parquet")
    assert "--fp8-accum 'x'" in bad(layer)


def test_tune_tunes_each_contract_asked_on_its_own():
    from gemmbench.engine.tasks import tune_task
    from gemmbench.measure import device

    sset = shape_sets.load("smoke")
    problems = sharding.problems(sset, ["fp8"], [1], fp8_accums=["fast", "precise"])
    chosen = [registry.get("triton_dp_row"), registry.get("inductor_mm")]
    jobs = tune_task.jobs(problems, chosen, device.detect())
    dense = [g.name for g in sset.gemms if g.E == 1]
    # by hand: triton_dp_row once per shape and contract (each stored in its own file); inductor_mm (precise only, and
    # not run by the interpreter) none
    expected = sorted((g, a, "triton_dp_row") for g in dense for a in ("fast", "precise"))
    assert sorted((p.gemm, p.fp8_accum, v.name) for p, v in jobs) == expected
    only_fast = tune_task.jobs(sharding.problems(sset, ["fp8"], [1], fp8_accums=["fast"]), chosen, device.detect())
    assert sorted((p.gemm, p.fp8_accum) for p, _ in only_fast) == [(g, "fast") for g in sorted(dense)]


def test_fast_configs_have_their_own_file_read_over_the_shared_one():
    """fp8 fast problems store into <name>,fp8_accum=fast.json and read it bucket by bucket over the shared file
    (precise's, which every contract reads); precise problems never read the fast file."""
    from gemmbench.configs import config_files

    fast, precise = problem(M=64, fp8_accum="fast"), problem(M=64)
    assert config_files.config_path("triton_dp_row", fast, "GPU X").name.endswith(",dtype=fp8,fp8_accum=fast.json")
    assert config_files.config_path("triton_dp_row", fast, "GPU X", shared=True) == config_files.config_path(
        "triton_dp_row", precise, "GPU X"
    )
    assert ",fp8_accum" not in config_files.config_path("triton_dp_row", problem(dtype="bf16"), "GPU X").name
    shared_64, shared_2048 = DenseConfig.tile(64, 64, 64, 4, 3), DenseConfig.tile(128, 128, 64, 8, 3)
    fast_2048 = DenseConfig.tile(128, 256, 64, 8, 3)
    config_files.save("triton_dp_row", precise, "GPU X", shared_64, 10.0, {})
    config_files.save("triton_dp_row", problem(M=2048), "GPU X", shared_2048, 20.0, {})
    config_files.save("triton_dp_row", problem(M=2048, fp8_accum="fast"), "GPU X", fast_2048, 15.0, {})
    at = lambda p: config_files.stored("triton_dp_row", p, "GPU X")[0]  # noqa: E731
    assert at(problem(M=2048, fp8_accum="fast")) == fast_2048  # its own file's bucket
    assert at(fast) == shared_64  # a bucket only the shared file has
    assert at(problem(M=2048)) == shared_2048  # precise never reads fast's
    saved = json.loads(config_files.config_path("triton_dp_row", fast, "GPU X").read_text())
    assert saved["fp8_accum"] == "fast" and list(saved["buckets"]) == ["2048"]


def test_a_gluon_fast_problem_never_runs_the_precise_contracts_config():
    """The Gluon kernel's precise configs are promoting schedules (the halves): a fast problem with only the shared
    file's bucket runs none (the run searches its fast candidates; `tune --skip-stored` tunes it), while a Triton
    variant's fast problem still reads that bucket (its tile runs unpromoted under fast)."""
    from gemmbench.configs import config_files
    from gemmbench.kernels.gluon_ws import GluonConfig

    precise, fast = problem(M=512, N=8192, K=8192), problem(M=512, N=8192, K=8192, fp8_accum="fast")
    halves = GluonConfig.tile(256, 128, 128, 4, 3, SCHEDULE="halves", PROMOTE_WAVES=2)
    config_files.save("gluon_ws", precise, "GPU X", halves, 10.0, {})
    config_files.save("triton_dp_row", precise, "GPU X", DenseConfig.tile(128, 128, 64, 8, 3), 10.0, {})
    assert config_files.stored("gluon_ws", precise, "GPU X")[0] == halves
    assert config_files.stored("gluon_ws", fast, "GPU X") is None
    assert config_files.stored("triton_dp_row", fast, "GPU X") is not None
    wide = GluonConfig.tile(128, 256, 128, 8, 3, SCHEDULE="ws")
    config_files.save("gluon_ws", fast, "GPU X", wide, 8.0, {})  # fast's own file, once tuned
    assert config_files.stored("gluon_ws", fast, "GPU X")[0] == wide
    assert config_files.stored("gluon_ws", precise, "GPU X")[0] == halves


# ---------------------------------------------------------------- rows and cell keys


def test_store_and_shard_write_the_problems_contract(tmp_path):
    v = registry.get("cublas_fp8")
    precise, fast = problem(), problem(fp8_accum="fast")
    assert cells.cell_columns(fast, v)["fp8_accum"] == "fast"
    assert cells.cell_columns(precise, v)["fp8_accum"] == "precise"
    assert cells.cell_columns(problem(dtype="bf16"), registry.get("cublas_bf16"))["fp8_accum"] == "none"
    # the key's fields in store.CELL_KEY's order, by hand: ..., dtype, scaling, fp8_accum, variant
    assert shard.cell_key(fast, v.name).endswith("|fp8|tensor|fast|cublas_fp8")
    assert shard.cell_key(precise, v.name).endswith("|fp8|tensor|precise|cublas_fp8")
    assert "fp8 fast" in shard.describe(shard.cell_key(fast, v.name))
    # a shard's cells: both contracts, each once
    parts = shard.partition([(precise, [v.name]), (fast, [v.name])], 2)
    assert sorted(p.fp8_accum for part in parts for p, _ in part) == ["fast", "precise"]
    rows = [run_row(**cells.cell_columns(p, v), run_id="r", status="skipped", reason="x") for p in (precise, fast)]
    store.write_rows(tmp_path / "r.parquet", rows)
    assert sorted(store.load(tmp_path / "r.parquet")["fp8_accum"]) == ["fast", "precise"]


def test_a_fast_and_a_precise_row_are_distinct_cells_in_compare(tmp_path):
    def fp8(us: float, accum: str) -> dict:
        return dict(compare_row("cublas_fp8", s=[us] * 30), dtype="fp8", scaling="tensor", fp8_accum=accum)

    base = [fp8(100.0, "precise"), fp8(50.0, "fast")]
    cand = [fp8(100.0, "precise"), fp8(50.0, "fast")]
    rows = cmp.compare(store.load(write_run(tmp_path, "b", base)), store.load(write_run(tmp_path, "c", cand)))
    # merged into one cell, 100 against 50 would be a change; apart, each cell is the same on both sides
    assert len(rows) == 2 and {r.verdict for r in rows} == {"same"}
    assert sorted(r.base_us for r in rows) == [50.0, 100.0]
    assert sum("fp8 fast" in r.cell for r in rows) == 1


def test_tables_rank_and_label_the_contracts_apart():
    fp8 = dict(dtype="fp8", scaling="tensor")
    precise = timed("cublas_fp8", 9.9, 10.0, 10.1, fp8_accum="precise", **fp8)
    fast = timed("cublas_fp8", 4.9, 5.0, 5.1, fp8_accum="fast", **fp8)
    other = timed("triton_dp_row", 7.9, 8.0, 8.1, fp8_accum="precise", **fp8)
    # one cell per contract: precise's winner is triton (8 < 10), fast's cuBLAS alone, though 5 is the fastest time
    assert tables.winners([precise, fast, other]) == {id(other), id(fast)}
    assert tables.speedups([precise, fast, other])[id(fast)] == pytest.approx(1.0)  # against cuBLAS fast
    summary = {(c["variant"], c["fp8_accum"]) for c in tables.summary([precise, fast, other])}
    assert summary == {("cublas_fp8", "precise"), ("cublas_fp8", "fast"), ("triton_dp_row", "precise")}
    from rich.console import Console

    console = Console(record=True, width=400, color_system=None)
    for t in tables.gemm_tables([precise, fast, other]):
        console.print(t)
    shown = {(r[1], r[2].lstrip("*≈ ")) for r in table_rows(console.export_text())}
    assert shown == {("fp8", "cublas_fp8"), ("fp8 fast", "cublas_fp8"), ("fp8", "triton_dp_row")}


# ---------------------------------------------------------------- Triton's promotion and the check


def test_fp8_promote_every_by_contract():
    fp8 = torch.empty(1, 1).to(torch.float8_e4m3fn)
    for block_k in (32, 64, 128, 256):
        config = DenseConfig.tile(16, 32, block_k, 4, 1)
        assert fp8_promote_every(fp8, config, "precise") == min(128, block_k)  # cuBLAS's precise interval
        assert fp8_promote_every(fp8, config, "fast") is None  # Triton's sm90 default: no promotion
    assert isinstance(DenseConfig.tile(16, 32, 64, 4, 1), KernelConfig)


@pytest.mark.parametrize("err", [None, 0.0, 1e-3, FP8_TOL / 2, 0.05, 0.3, float("inf"), float("nan")])
def test_fast_tolerance_rule(err):
    # the rule, written out: an unmeasured or non-finite cuBLAS error (which would admit any output) leaves fp8's
    want = FP8_TOL if err is None or err != err or err == float("inf") else max(FP8_TOL, 2 * err)
    assert dtypes.tolerance("fp8", "fast", err) == pytest.approx(want)
    assert dtypes.tolerance("fp8", "precise", err) == pytest.approx(FP8_TOL)  # precise: the table's alone
    assert dtypes.tolerance("fp8") == pytest.approx(FP8_TOL)


def test_the_check_takes_cublas_fasts_error_where_there_is_one(monkeypatch):
    p = problem(fp8_accum="fast")
    inputs = make_inputs(p, 0, "cpu")
    ref = check.reference(p, inputs)
    # the CPU: cuBLAS fast cannot run, so the fp8 tolerance, and the report says so
    tol, words, say = check.cell_tolerance(p, inputs, ref)
    assert tol == pytest.approx(FP8_TOL) and say and "fp8 tolerance" in words and "CUDA" in words
    monkeypatch.setattr(check, "cublas_fast_error", lambda *a: (0.05, ""))
    tol, words, say = check.cell_tolerance(p, inputs, ref)
    assert tol == pytest.approx(0.1) and not say and "cuBLAS fast" in words
    # precise: the table's, whatever cuBLAS fast does
    assert check.cell_tolerance(problem(), inputs, ref) == (pytest.approx(FP8_TOL), "", False)


def test_both_contracts_draw_the_same_inputs():
    from gemmbench.measure.inputs import cell_seed

    precise, fast = problem(), problem(fp8_accum="fast")
    assert cell_seed(7, precise) == cell_seed(7, fast) != cell_seed(7, problem(K=128))
    a, b = make_inputs(precise, cell_seed(7, precise), "cpu"), make_inputs(fast, cell_seed(7, fast), "cpu")
    assert torch.equal(a.a.float(), b.a.float()) and torch.equal(a.b.float(), b.b.float())


def test_a_fast_cublas_cell_checks_on_the_cpu_with_its_note():
    p = problem(fp8_accum="fast")
    res = check.check_cell(p, registry.get("cublas_fp8"), make_inputs(p, 0, "cpu")).result
    assert res.ok and res.max_rel_err <= FP8_TOL and "fp8 tolerance" in res.note


# ---------------------------------------------------------------- a tiny real run


@cpu_only
def test_a_cpu_run_writes_both_contracts(tmp_path):
    yaml_path = tmp_path / "tiny.yaml"
    yaml_path.write_text(
        "name: tiny\ndescription: one GEMM\nm: [1]\ngemms:\n  - {id: t, N: 32, K: 64, parallel: none}\n"
    )
    out = tmp_path / "r.parquet"
    res = invoke("run", "--shapes", yaml_path, "--dtype", "fp16,fp8", "--variants", "cublas_fp16,cublas_fp8,triton_dp_row",
                 "--fp8-accum", "precise,fast", "--budget", "0.01", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    df = store.load(out)
    got = sorted(zip(df.dtype, df.fp8_accum, df.variant, df.status, strict=True))
    # by hand: fp16 once per variant ("none"); fp8 once per variant and contract; all ok
    want = [("fp16", "none", v, "ok") for v in ("cublas_fp16", "triton_dp_row")]
    want += [("fp8", a, v, "ok") for v in ("cublas_fp8", "triton_dp_row") for a in ("precise", "fast")]
    assert got == sorted(want)
    fast = df[df.fp8_accum == "fast"]
    assert fast.reason.str.contains("fp8 tolerance").all()  # the CPU cannot measure cuBLAS fast: the row says so
    assert df[df.fp8_accum != "fast"].reason.isna().all()
    assert (fast.max_rel_err <= FP8_TOL).all()
    assert "fp8 fast" in res.stdout


# ---------------------------------------------------------------- on the GPU: cuBLAS fast's error sets the budget


@pytest.mark.gpu
@pytest.mark.parametrize("E", [1, 8])
def test_fast_rows_are_judged_against_cublas_fast_on_the_gpu(E):
    p = problem(M=512, N=1024, K=8192, **({"E": E, "topk": 2} if E > 1 else {}))
    fast = p.with_(fp8_accum="fast")
    inputs = make_inputs(p, 3, "cuda")
    ref = check.reference(p, inputs)
    err, why_not = check.cublas_fast_error(fast, inputs, ref)
    assert err is not None and why_not == ""
    tol, words, say = check.cell_tolerance(fast, inputs, ref)
    assert tol == pytest.approx(max(FP8_TOL, 2 * err)) and not say and "cuBLAS fast" in words
    name = "triton_moe_col" if E > 1 else "triton_dp_grouped"
    precise_res = check.check_cell(p, registry.get(name), inputs, ref=ref).result
    fast_res = check.check_cell(fast, registry.get(name), inputs, ref=ref).result
    assert precise_res.ok and fast_res.ok, (precise_res.detail, fast_res.detail)
    assert fast_res.max_rel_err <= tol and precise_res.max_rel_err <= FP8_TOL
