"""The command line on a CPU: a real sweep end to end, crash isolation, the correctness gate, bad
inputs (exit 2, one line), listings, shape sets from configs, and an interrupted run.

Runs are few and small (each starts a worker process): module-scoped fixtures run each sweep once
and several tests assert on it.  Plugins given to the CLI are imported into this process too (the
CLI loads them before selecting variants), so globs here name variants exactly where a plugin
variant could otherwise match."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import HAS_CUDA, PINNED_SHA, PLUGINS, SMOKE_RUN_ARGS
from test_shapes import BUILTINS as BUILTIN_SETS  # one list of the built-in sets
from typer.testing import CliRunner

from gemmbench import dtypes, registry
from gemmbench.cli import app
from gemmbench.engine.worker import CPU_SAMPLES
from gemmbench.models import shape_sets
from gemmbench.results import store
from gemmbench.shapes import DECODE_M, PREFILL_M

cpu_only = pytest.mark.skipif(HAS_CUDA, reason="tests the CPU path (no CUDA GPU)")


BUILTIN_FAMILIES = {
    "cublas_bf16": "cublas",
    "cublas_fp16": "cublas",
    "cublas_fp8": "cublas",
    "cublas_fp8_rowwise": "cublas",
    "cublas_fp8_block": "cublas",
    "triton_dp_row": "triton_dp",
    "triton_dp_col": "triton_dp",
    "triton_dp_grouped": "triton_dp",
    "torch_moe_loop": "moe_ref",
    "triton_splitk_atomic": "triton_splitk",
    "triton_splitk_atomic_rowwise": "triton_splitk",
    "triton_splitk_reduce": "triton_splitk",
    "triton_splitk_reduce_rowwise": "triton_splitk",
    "torch_grouped_mm": "moe_ref",
    "moe_align": "moe_align",
    "triton_moe_row": "triton_moe",
    "triton_moe_col": "triton_moe",
    "triton_moe_grouped": "triton_moe",
    "triton_moe_splitk": "triton_moe",
    "triton_moe_persistent": "triton_moe",
    "triton_moe_permuted": "triton_moe",
    "inductor_mm": "inductor",
    "triton_persistent": "triton_persistent",
    "triton_streamk": "triton_streamk",
    "gluon_ws": "gluon",
    "gluon_persistent": "gluon",
    "gluon_pipelined": "gluon",
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# ---------------------------------------------------------------- helpers


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def text(s: str) -> str:
    return ANSI.sub("", s)


def ok_rows(*paths) -> pd.DataFrame:
    """The rows of run files (a folder: every Parquet file under it), each one `ok`: a sweep whose every cell failed
    exits 0 too, so a test that needs measured rows says so."""
    files = [f for p in map(Path, paths) for f in (sorted(p.rglob("*.parquet")) if p.is_dir() else [p])]
    assert files, paths
    rows = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    failed = rows[rows.status != "ok"]
    assert failed.empty, failed[["variant", "status", "reason"]].head().to_string()
    return rows


def gemmbench_proc(*args, timeout=300):
    """`python -m gemmbench ...` as a real separate process."""
    return subprocess.run(
        [sys.executable, "-m", "gemmbench", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def gemmbench_cmd_parts_every(part_s: float, *args) -> list:
    """The command line of `python -m gemmbench ARGS` whose run writer writes a part once its oldest row is `part_s`
    old (store.PART_S, as tests/test_store.py sets it in this process): a test that waits for a part waits that
    long, not the product's period."""
    main = (f"import runpy; from gemmbench.results import store; store.PART_S = {float(part_s)!r}; "
            "runpy.run_module('gemmbench', run_name='__main__', alter_sys=True)")  # fmt: skip
    return [sys.executable, "-c", main, *map(str, args)]


def one_error_line(exit_code, stderr, stdout, exception=None) -> str:
    """A bad input: exit code 2, exactly one non-empty stderr line 'error: ...', nothing on stdout."""
    err = text(stderr)
    assert exception is None or isinstance(exception, SystemExit), repr(exception)
    assert exit_code == 2, (exit_code, err)
    assert "Traceback" not in err and "Traceback" not in stdout
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    assert stdout == "", stdout
    return lines[0]


def bad(result) -> str:
    return one_error_line(result.exit_code, result.stderr, result.stdout, result.exception)


def table_rows(out: str) -> list[list[str]]:
    """Cells of the body rows of rich tables in `out` (continuation lines included): boxed (`│` at both edges) or
    minimal (`│` between the cells only, as run's tables for reading)."""
    return [
        [c.strip() for c in ln.strip().strip("│").split("│")]
        for ln in text(out).splitlines()
        if "│" in ln and not ln.lstrip().startswith(("┃", "┏", "┡", "└", "╻", "╺"))
    ]


def load_rows(path) -> pd.DataFrame:
    df = store.load(path)
    assert len(df) > 0
    return df


# ---------------------------------------------------------------- a real sweep

MAIN_VARIANTS = "cublas_*,triton_dp_row,torch_moe_loop"
MAIN_DTYPES = ("fp16", "fp8")
MAIN_M = (1, 5)


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("main") / "r.parquet"
    # no --timing: the default (cold) must become wall on a CPU; --strict with every cell fine exits 0
    res = invoke(
        "run",
        "--shapes",
        "smoke",
        "--m",
        ",".join(map(str, MAIN_M)),
        "--dtype",
        ",".join(MAIN_DTYPES),
        "--variants",
        MAIN_VARIANTS,
        "--budget",
        "0.01",
        "--strict",
        "--out",
        out,
    )
    return res, out


def expected_main_cells() -> set:
    """(gemm, M, dtype, variant) of every cell: dense variants on dense GEMMs, MoE ones on MoE GEMMs,
    each only in the dtypes it lists."""
    sset = shape_sets.load("smoke")
    chosen = [
        registry.get(n)
        for n in ("cublas_bf16", "cublas_fp16", "cublas_fp8", "cublas_fp8_rowwise", "cublas_fp8_block", "triton_dp_row",
                  "torch_moe_loop")
    ]  # fmt: skip
    cells = set()
    for g in sset.gemms:
        for M in MAIN_M:
            for dt in MAIN_DTYPES:
                for v in chosen:
                    if dt in v.dtypes and v.moe == g.is_moe:
                        cells.add((g.name, M, dt, v.name))
    return cells


@cpu_only
def test_run_smoke_exit_code_and_streams(main_run):
    res, out = main_run
    err = text(res.stderr)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 0, err
    assert "No CUDA GPU: CPU path." in err
    assert "No CUDA GPU" not in res.stdout  # the banner is not part of the tables
    assert "Traceback" not in err
    df = load_rows(out)
    assert f"{len(df)} cells: " in err
    assert "wrong, impossible or failed" not in err
    # a table per GEMM on stdout, titled with its dims
    stdout = text(res.stdout)
    titles = [ln.strip() for ln in stdout.splitlines() if ln.startswith("smoke_")]
    assert titles == [
        "smoke_square  N=64 K=64",
        "smoke_tails  N=80 K=48",
        "smoke_deep  N=32 K=160",
        "smoke_moe  N=64 K=32, E=4 top2, uniform routing",
        "smoke_moe_odd  N=48 K=64, E=3 top2, uniform routing",
    ]
    # the legend once, under every table; the skipped rows as footnotes ("skipped N: variants: reason"), as many as
    # the file's skipped rows that the tables show at all (not those of another fp8 scaling: counted in one line)
    assert stdout.count("timing: wall (L2 warm)") == 1
    from gemmbench import registry

    shown = df[(df["status"] == "skipped") & ~df["reason"].map(registry.scaling_excluded)]
    noted = [int(ln.split(":")[0].split()[1]) for ln in stdout.splitlines() if ln.startswith("skipped ")]
    assert sum(noted) == len(shown) and not any("│ skipped" in ln for ln in stdout.splitlines())
    assert "TFLOPS" not in stdout and "% roofline" not in stdout  # empty or 0.0 in every CPU row: dropped
    assert len((stdout + err).splitlines()) <= 80  # stdout and stderr together


@cpu_only
def test_run_smoke_one_row_per_cell(main_run):
    _, out = main_run
    df = load_rows(out)
    expected = expected_main_cells()
    got = list(zip(df.gemm, df.M, df.dtype, df.variant, strict=False))
    assert len(got) == len(set(got)), "a cell was written twice"
    assert set(got) == expected
    # 3 dense GEMMs x 2 M x (fp16: cublas_fp16, triton_dp_row; fp8: cublas_fp8, cublas_fp8_rowwise,
    # cublas_fp8_block, triton_dp_row: the rowwise and block ones skipped at the default per-tensor scaling)
    # + 2 MoE GEMMs x 2 M x fp16 torch_moe_loop (no fp8 path, so no fp8 MoE cell)
    assert len(expected) == 3 * 2 * 6 + 2 * 2 * 1
    assert df.run_id.nunique() == 1 and "smoke" in df.run_id.iloc[0]
    assert (df.shape_set == "smoke").all() and (df.tp == 1).all()
    assert set(df.status) <= {"ok", "skipped"}, df[["variant", "status", "reason"]].to_string()
    assert (df.status == "ok").sum() > 0
    skipped = df[df.status == "skipped"]
    assert skipped.reason.notna().all() and (skipped.reason.str.len() > 0).all()
    assert skipped.time_us_median.isna().all()


@cpu_only
def test_run_smoke_ok_rows_are_timed_and_checked(main_run):
    _, out = main_run
    df = load_rows(out)
    sset = {g.name: g for g in shape_sets.load("smoke").gemms}
    ok = df[df.status == "ok"]
    assert (ok.timing_mode == "wall").all() and (ok.l2_state == "warm").all()
    assert (ok.device == "cpu").all()
    for r in ok.itertuples():
        g = sset[r.gemm]
        assert (r.N, r.K, r.E, r.topk) == (g.N, g.K, g.E, g.topk)
        assert r.time_us_median > 0
        assert r.n_samples == CPU_SAMPLES  # the CPU path: exactly that many, whatever --budget
        samples = np.asarray(r.samples_us)
        assert len(samples) == r.n_samples and (samples > 0).all()
        assert r.time_us_median == pytest.approx(float(np.median(samples)))
        assert r.time_us_p20 <= r.time_us_median <= r.time_us_p80
        rows = r.M * r.topk if r.E > 1 else r.M
        assert r.flops == 2 * rows * r.N * r.K
        if r.E == 1:
            assert r.flops == 2 * r.M * r.N * r.K
        assert 0 <= r.max_rel_err < dtypes.get(r.dtype).tolerance, (r.variant, r.dtype, r.max_rel_err)
        assert r.tflops == pytest.approx(r.flops / (r.time_us_median * 1e6))
        assert r.bytes_min > 0 and r.gbps > 0
        assert r.variant_source == "builtin"
        if r.variant == "triton_dp_row":
            assert json.loads(r.config)["schedule"] == "row"


# ---------------------------------------------------------------- bad inputs: exit 2, one line


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "broken.yaml").write_text("name: broken\ngemms: [ {id: a, N: 64, K: 64\n")
    (d / "raises_plugin.py").write_text("raise RuntimeError('boom from the plugin')\n")
    return d


BAD_INPUTS = {
    # id: (options replacing the defaults, fragments the error line must hold)
    "unknown-shape-set": ({"--shapes": "no_such_set"}, ["no_such_set", "no such built-in shape set"]),
    "malformed-yaml": ({"--shapes": "{d}/broken.yaml"}, ["broken.yaml", "invalid YAML"]),
    "dtype-fp4": ({"--dtype": "fp4"}, ["--dtype 'fp4'", "fp16, bf16, fp8"]),
    "variants-nomatch": ({"--variants": "nomatch*"}, ["'nomatch*'", "matches no variant"]),
    "timing-bogus": ({"--timing": "bogus"}, ["--timing 'bogus'", "wall"]),
    "routing-zipf": ({"--routing": "uniform,zipf"}, ["--routing 'uniform,zipf'", "uniform, skewed, one-expert"]),
    "tp-0": ({"--tp": "0"}, ["--tp", "positive integers", "'0'"]),
    "tp-word": ({"--tp": "two"}, ["--tp", "positive integers"]),
    "tp-3-indivisible": ({"--tp": "3"}, ["smoke: smoke_square: N 64 does not divide by TP 3 (column-parallel)"]),
    "m-0": ({"--m": "0"}, ["--m", "'0'", "not a positive integer"]),
    "m-abc": ({"--m": "abc"}, ["--m", "'abc'", "not a positive integer"]),
    "plugin-missing": ({"--plugin": "{d}/no_such_plugin.py"}, ["plugin file not found", "no_such_plugin.py"]),
    "plugin-raises": (
        {"--plugin": "{d}/raises_plugin.py"},
        ["raises_plugin.py", "failed to import", "RuntimeError", "boom from the plugin"],
    ),
    # the README's main command on a machine without a GPU: refused, pointing to the CPU set
    "cpu-too-large": (
        {"--shapes": "llama70b-attn", "--m": None, "--dtype": None, "--variants": None},
        ["llama70b-attn", "too large for the CPU path", "--shapes smoke"],
    ),
    "m-empty": ({"--m": ""}, ["--m"]),
}


def run_args(d: Path, out: Path, **over) -> list[str]:
    opts = {"--shapes": "smoke", "--m": "1", "--dtype": "fp16", "--variants": "cublas_fp16", "--budget": "0.01"}
    opts.update(over)
    args = ["run"]
    for k, v in opts.items():
        if v is not None:
            args += [k, str(v).format(d=d)]
    return args + ["--out", str(out)]


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_error_line_and_exit_2(case, bad_files, tmp_path):
    over, fragments = BAD_INPUTS[case]
    if case == "cpu-too-large" and HAS_CUDA:
        pytest.skip("the refusal is for the CPU path")
    out = tmp_path / "never.parquet"
    line = bad(invoke(*run_args(bad_files, out, **over)))
    for frag in fragments:
        assert frag in line, (frag, line)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temp files either


@pytest.mark.parametrize("glob", ["cublas_[xyz]*", "[/x]*"])
def test_bad_input_message_is_not_rich_markup(glob, tmp_path):
    """fnmatch globs hold brackets; the error line must quote the user's glob verbatim (and never crash)."""
    line = bad(
        invoke(
            "run",
            "--shapes",
            "smoke",
            "--m",
            "1",
            "--dtype",
            "fp16",
            "--variants",
            glob,
            "--out",
            tmp_path / "never.parquet",
        )
    )
    assert f"--variants {glob!r} matches no variant" in line


def test_bad_input_in_a_real_process(tmp_path):
    """`python -m gemmbench` works, and a bad input there is one line and exit 2 as well."""
    proc = gemmbench_proc("run", "--shapes", "smoke", "--dtype", "fp4", "--out", tmp_path / "never.parquet")
    line = one_error_line(proc.returncode, proc.stderr, proc.stdout)
    assert "--dtype 'fp4'" in line
    assert not (tmp_path / "never.parquet").exists()


# ---------------------------------------------------------------- crash isolation


# two GEMMs (smoke_square's and smoke_tails' shapes): each crash ends its worker, and a worker start is seconds
CRASH_SHAPES = """name: crash
gemms:
  - {id: square, N: 64, K: 64, parallel: none}
  - {id: tails, N: 80, K: 48, parallel: none}
"""


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("crash")
    out_dir = folder / "results"  # a folder: the file is named after the run id
    (folder / "crash.yaml").write_text(CRASH_SHAPES)
    res = invoke(
        "run",
        "--shapes",
        folder / "crash.yaml",
        "--m",
        "1",
        "--dtype",
        "fp16",
        "--variants",
        "test_crash,cublas_fp16",
        "--plugin",
        PLUGINS / "crash_plugin.py",
        "--budget",
        "0.01",
        "--out",
        out_dir,
    )
    return res, out_dir


def test_crash_costs_only_its_cell(crash_run):
    res, out_dir = crash_run
    err = text(res.stderr)
    assert res.exit_code == 0, err  # not --strict: failed cells are reported, not fatal
    files = list(out_dir.glob("*.parquet"))
    assert len(files) == 1
    df = load_rows(files[0])
    assert files[0].name == f"{df.run_id.iloc[0]}.parquet"
    crash, good = df[df.variant == "test_crash"], df[df.variant == "cublas_fp16"]
    # 2 GEMMs at M = 1, fp16: a cell of each variant per GEMM
    assert len(crash) == 2 and len(good) == 2 and len(df) == 4
    assert set(zip(crash.gemm, crash.M, strict=False)) == {(g, 1) for g in ("square", "tails")}
    assert (crash.status == "error").all(), crash[["status", "reason"]].to_string()
    for reason in crash.reason:
        assert "worker died" in reason and reason.startswith("check: "), reason
        assert f"killed by signal {int(signal.SIGKILL)}" in reason, reason
    assert crash.time_us_median.isna().all() and crash.n_samples.isna().all()
    assert crash.variant_source.str.endswith("crash_plugin.py").all()
    # the sweep went on after every crash: each later cublas_fp16 cell ran in a fresh worker
    assert (good.status == "ok").all(), good[["status", "reason"]].to_string()
    assert (good.time_us_median > 0).all() and (good.n_samples >= 5).all()
    assert "2 error, 2 ok" in err
    assert "2 cell(s) wrong, impossible or failed" in err
    assert text(res.stdout).count("error: check: worker died") == 2


# ---------------------------------------------------------------- the check gates timing

WRONG_PLUGIN = """
import torch

from gemmbench.registry import Launch, Variant, register

LOG = {log!r}


def _log(name, what, problem):
    with open(LOG, "a") as f:
        f.write(f"{{name}} {{what}} {{problem.gemm}} {{problem.M}}\\n")


def _make_wrong(problem, inputs):
    _log("test_wrong", "make", problem)
    a, bt = inputs.a, inputs.b.t()

    def fn():
        _log("test_wrong", "launch", problem)
        return torch.mm(a, bt) * 1.5  # right shape and dtype, wrong values

    return Launch(fn=fn)


def _make_unwritten(problem, inputs):
    _log("test_unwritten", "make", problem)
    a, bt = inputs.a, inputs.b.t()
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=a.device)

    def fn():
        _log("test_unwritten", "launch", problem)
        out[:1] = torch.mm(a[:1], bt)  # only the first row; the rest keeps whatever was there
        return out

    return Launch(fn=fn, out=out)


def _make_right(problem, inputs):
    _log("test_right", "make", problem)
    a, bt = inputs.a, inputs.b.t()
    out = torch.empty((problem.M, problem.N), dtype=inputs.out_dtype, device=a.device)

    def fn():
        _log("test_right", "launch", problem)
        return torch.mm(a, bt, out=out)

    return Launch(fn=fn, out=out)


for _name, _make in (("test_wrong", _make_wrong), ("test_unwritten", _make_unwritten), ("test_right", _make_right)):
    register(Variant(_name, "test", ("fp16",), "CLI test variant", _make, source=__file__))
"""


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("wrong")
    log = d / "launches.log"
    plugin = d / "wrong_plugin.py"
    plugin.write_text(WRONG_PLUGIN.format(log=str(log)))
    out = d / "w.parquet"
    # M=5: test_unwritten writes row 0 only, so at M=1 it would be (rightly) correct
    res = invoke(
        "run",
        "--shapes",
        "smoke",
        "--m",
        "5",
        "--dtype",
        "fp16",
        "--variants",
        "test_wrong,test_unwritten,test_right,cublas_fp16",
        "--plugin",
        plugin,
        "--budget",
        "0.01",
        "--strict",
        "--out",
        out,
    )
    launches = {}
    for ln in log.read_text().splitlines():
        name, what, gemm, M = ln.split()
        launches.setdefault((name, what, gemm, int(M)), 0)
        launches[(name, what, gemm, int(M))] += 1
    return res, out, launches


DENSE = ("smoke_square", "smoke_tails", "smoke_deep")


def test_wrong_results_are_never_timed(wrong_run):
    res, out, launches = wrong_run
    df = load_rows(out)
    assert len(df) == 3 * 4  # 3 dense GEMMs x 4 variants at M=5
    for name in ("test_wrong", "test_unwritten"):
        rows = df[df.variant == name]
        assert len(rows) == 3 and set(rows.gemm) == set(DENSE)
        assert (rows.status == "wrong").all(), rows[["status", "reason"]].to_string()
        assert rows.time_us_median.isna().all()
        assert rows.n_samples.isna().all()
        assert rows.samples_us.isna().all()
        assert rows.tflops.isna().all() and rows.gbps.isna().all()
        assert (rows.max_rel_err > dtypes.FP16.tolerance).all()
        assert rows.reason.str.contains("off by more than").all()
        # checked exactly once per cell (one make, one launch) and never again: no warm-up, no samples
        for g in DENSE:
            assert launches.get((name, "make", g, 5)) == 1, (name, g, launches)
            assert launches.get((name, "launch", g, 5)) == 1, (name, g, launches)
    wrong = df[df.variant == "test_wrong"]
    assert wrong.max_rel_err.between(0.4, 0.6).all(), wrong.max_rel_err.tolist()  # x1.5: off by 50% of max|ref|
    unwritten = df[df.variant == "test_unwritten"]
    assert unwritten.reason.str.contains("non-finite").all(), unwritten.reason.tolist()
    assert np.isinf(unwritten.max_rel_err).all()
    # the comparison is real: a correct plugin variant in the same run passes and is then timed
    right = df[df.variant == "test_right"]
    assert (right.status == "ok").all() and (right.n_samples >= 5).all()
    for g in DENSE:
        # check + the wall sampler's first call (the warm-up) + CPU_SAMPLES samples of >= 1 call each
        assert launches[("test_right", "launch", g, 5)] >= 1 + 1 + CPU_SAMPLES
    assert (df[df.variant == "cublas_fp16"].status == "ok").all()
    stdout = text(res.stdout)
    assert stdout.count("wrong: ") == 6


def test_strict_exits_1_when_a_cell_is_wrong(wrong_run):
    res, out, _ = wrong_run
    err = text(res.stderr)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 1, err
    assert "6 cell(s) wrong, impossible or failed" in err
    assert "Traceback" not in err
    # the tables and the file are complete before the exit
    assert len(store.load(out)) == 12
    assert "smoke_deep  N=32 K=160" in text(res.stdout)


# ---------------------------------------------------------------- listings


def test_list_shapes_lists_every_builtin_set_with_its_gemms():
    res = invoke("list", "shapes")
    assert res.exit_code == 0, res.stderr
    listed: dict[str, list] = {}
    current = None
    for cells in table_rows(res.stdout):
        if cells[0]:
            current = cells[0]
        if cells[1]:
            listed.setdefault(current, []).append((cells[1], int(cells[2]), int(cells[3])))
    assert list(listed) == BUILTIN_SETS
    for name in BUILTIN_SETS:
        assert listed[name] == [(g.name, g.N, g.K) for g in shape_sets.load(name).gemms], name


def _variant_rows(out: str) -> dict[str, list]:
    return {cells[0]: cells for cells in table_rows(out) if cells[0]}


def test_list_variants_in_a_fresh_process_shows_exactly_the_builtins():
    proc = gemmbench_proc("list", "variants", timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = _variant_rows(proc.stdout)
    assert {name: cells[1] for name, cells in rows.items()} == BUILTIN_FAMILIES
    assert rows["cublas_fp16"][2:4] == ["fp16", "dense"]
    assert rows["triton_dp_row"][2:4] == ["fp16,bf16,fp8", "dense"]
    assert rows["torch_moe_loop"][2:4] == ["fp16,bf16", "MoE"]
    assert "[plugin" not in proc.stdout


def test_list_variants_with_a_plugin():
    res = invoke("list", "variants", "--plugin", PLUGINS / "crash_plugin.py")
    assert res.exit_code == 0, res.stderr
    rows = _variant_rows(res.stdout)
    assert set(BUILTIN_FAMILIES) <= set(rows)
    assert rows["test_crash"][1:4] == ["test", "fp16,fp8,bf16", "dense"]


def test_list_variants_names_the_plugin_a_variant_came_from():
    """list_variants appends ' [plugin <source>]' to a plugin variant's description."""
    res = invoke("list", "variants", "--plugin", PLUGINS / "crash_plugin.py")
    assert res.exit_code == 0, res.stderr
    out = " ".join(text(res.stdout).split())
    assert "[plugin " in out and "crash_plugin.py" in out, res.stdout


def test_list_variants_bad_plugin_is_one_error_line(tmp_path):
    line = bad(invoke("list", "variants", "--plugin", tmp_path / "absent.py"))
    assert "plugin file not found" in line and "absent.py" in line


# ---------------------------------------------------------------- shapes from-config

LLAMA_CONFIG = {
    "_name_or_path": "meta-llama/Llama-3.1-8B",
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "head_dim": None,
}
LLAMA_GEMMS = [
    ("attn_qkv", 6144, 4096, "qkv"),
    ("attn_o", 4096, 4096, "row"),
    ("mlp_gate_up", 28672, 4096, "column"),
    ("mlp_down", 4096, 14336, "row"),
    ("lm_head", 128256, 4096, "vocab"),
]


@cpu_only
def test_shapes_from_config_writes_a_loadable_set_the_cpu_path_refuses(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_CONFIG))
    out = tmp_path / "sets" / "s.yaml"
    res = invoke("shapes", "from-config", cfg, "--out", out)
    assert res.exit_code == 0, res.stderr
    assert "llama-3.1-8b" in text(res.stderr)
    assert out.is_file() and res.stdout == ""
    s = shape_sets.load(str(out))
    assert s.name == "llama-3.1-8b"
    assert [(g.name, g.N, g.K, g.parallel) for g in s.gemms] == LLAMA_GEMMS
    assert all(not g.is_moe for g in s.gemms)
    assert s.m_values == DECODE_M + PREFILL_M
    run_out = tmp_path / "never.parquet"
    line = bad(invoke("run", "--shapes", out, "--dtype", "fp16", "--out", run_out))
    assert "llama-3.1-8b is too large for the CPU path" in line and "--shapes smoke" in line
    assert not run_out.exists()


def test_shapes_from_config_to_stdout_with_a_name(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_CONFIG))
    res = invoke("shapes", "from-config", cfg, "--name", "my8b")
    assert res.exit_code == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    assert doc["name"] == "my8b"
    assert [(g["id"], g["N"], g["K"], g["parallel"]) for g in doc["gemms"]] == LLAMA_GEMMS


def test_shapes_from_config_bad_files(tmp_path):
    line = bad(invoke("shapes", "from-config", tmp_path / "missing.json", "--out", tmp_path / "s.yaml"))
    assert "missing.json" in line and "cannot read" in line
    assert not (tmp_path / "s.yaml").exists()
    (tmp_path / "notjson.json").write_text("{hidden_size: 1")
    line = bad(invoke("shapes", "from-config", tmp_path / "notjson.json"))
    assert "notjson.json" in line and "not JSON" in line
    (tmp_path / "partial.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}))
    line = bad(invoke("shapes", "from-config", tmp_path / "partial.json"))
    assert "missing field 'num_attention_heads'" in line


# ---------------------------------------------------------------- an interrupted run


def _children(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d))
    return kids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:  # a short-lived child (e.g. git) that has gone already
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_interrupted_run_keeps_its_rows(tmp_path):
    out = tmp_path / "i.parquet"
    # smoke's dense GEMMs, then one whose test_hang kernel never returns: the sweep is stopped while it hangs, after
    # the writer has written the finished rows (every PART_S seconds, set to 1 s here)
    shapes = tmp_path / "s.yaml"
    shapes.write_text("name: s\nm: [1, 5]\ngemms:\n  - {id: a, N: 64, K: 64, parallel: none}\n"
                      "  - {id: b, N: 80, K: 48, parallel: none}\n  - {id: hang, N: 32, K: 32, parallel: none}\n")  # fmt: skip
    plugin = Path(__file__).parent / "plugins" / "hang_plugin.py"
    proc = subprocess.Popen(
        gemmbench_cmd_parts_every(1, "run", "--shapes", shapes, "--dtype", "fp16", "--variants",
                                  "cublas_fp16,triton_dp_row,test_hang", "--plugin", plugin, "--budget", "0.01",
                                  "--out", out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal gives it: a test suite started in the background of a script (`pytest &`) ignores
        # SIGINT, the child would inherit that and run to the end (seen: exit 0 after the whole sweep)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        rows = 0
        while rows < 12:  # a and b: 2 M x 3 variants each (test_hang skipped there)
            assert proc.poll() is None, f"the run ended before it could be interrupted: {proc.communicate()}"
            assert time.monotonic() < deadline, "the finished rows were not written in 180 s"
            try:
                rows = len(store.load(out))  # the file's parts while the sweep runs
            except store.StoreError:
                pass
            time.sleep(0.2)
        has_proc = Path("/proc/self/stat").exists()
        workers = [k for k in _children(proc.pid) if "gemmbench.engine.worker" in _cmdline(k)] if has_proc else []
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = text(stderr)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    m = re.search(r"error: interrupted: (\d+) finished rows in (\S+)", err)
    assert m, err
    assert Path(m.group(2)) == out
    df = store.load(out)
    assert len(df) == int(m.group(1)) == 12  # it really stopped early: 18 cells in all
    assert "a  N=64 K=64" in text(stdout)  # the finished rows' tables come before the line
    assert df.status.notna().all() and set(df.status) <= {"ok", "skipped"}
    assert df.variant.notna().all() and df.gemm.notna().all() and (df.dtype == "fp16").all()
    ok = df[df.status == "ok"]
    assert (ok.time_us_median > 0).all() and (ok.n_samples >= 5).all()
    if not has_proc:
        return
    # the worker the sweep started is gone too
    assert len(workers) == 1
    deadline = time.monotonic() + 15
    while _alive(workers[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(workers[0])


def test_resume_runs_only_the_cells_a_run_file_lacks(smoke_run, tmp_path, monkeypatch, request):
    """An interrupted run's file (here: the first two GEMMs of the sweep) is finished by --resume: the missing cells
    run, the kept rows stay as they were, every cell ends once, under the file's own run id."""
    # the build is part of what makes a row done (resume_key), and this process caches it (device.git_sha): pin it
    # (to the build of smoke_run's rows), so that another test's cached value, or a checkout whose "-dirty" flips while
    # the suite runs, cannot make the kept rows another build's than the workers' (as after tests/test_ab.py)
    monkeypatch.setenv("GEMMBENCH_GIT_SHA", PINNED_SHA)
    from gemmbench.measure import device

    device.git_sha.cache_clear()
    request.addfinalizer(device.git_sha.cache_clear)  # the pinned value does not outlive the test
    out, args = smoke_run, SMOKE_RUN_ARGS
    ok_rows(out)
    full = store.load(out)
    partial = full[full.gemm != "smoke_deep"]
    store.write_rows(out, store.records(partial), store.file_metadata(out))  # as if killed: the sweep's metadata kept
    res = invoke(*args, "--resume", out)
    assert res.exit_code == 0, text(res.stderr)
    assert "--resume: 2 rows kept, 1 cells to run" in text(res.stderr)
    df = ok_rows(out)
    assert sorted(df.gemm) == sorted(full.gemm) and df.run_id.nunique() == 1
    assert df[df.gemm != "smoke_deep"].timestamp.tolist() == partial.timestamp.tolist()
    again = invoke(*args, "--resume", out)
    assert again.exit_code == 0 and "every cell is already in" in text(again.stderr)

    # another sweep's file is never resumed into: other M, other budget, a file without the sweep's fingerprint
    def refused(*more) -> str:  # the last line (select_cells warns first that no selected variant runs the MoE GEMMs)
        res = invoke(*more)
        assert res.exit_code == 2 and "Traceback" not in res.stderr
        return text(res.stderr).strip().splitlines()[-1]

    kept = out.read_bytes()
    line = refused(*args[:-1], "0.02", "--resume", out)
    assert line.endswith("its --budget was 0.01, this run's is 0.02; a resumed file holds one sweep: start a new run")
    line = refused(*args[:5], "--m", "1,2", *args[7:], "--resume", out)
    assert "it is another sweep (3 cells of 'smoke' there, 6 of 'smoke' here" in line
    assert out.read_bytes() == kept
    assert refused(*args, "--resume", out, "--out", tmp_path / "b.parquet") == (
        "error: --resume writes into the file it resumes: give --resume or --out, not both")  # fmt: skip
    store.write_rows(out, store.records(partial))  # no metadata: written by an older gemmbench, or by hand
    assert "without a sweep fingerprint" in refused(*args, "--resume", out)


def test_an_existing_out_file_is_never_replaced_silently(smoke_run):
    out, args = smoke_run, SMOKE_RUN_ARGS
    ok_rows(out)
    before = out.read_bytes()
    line = bad(invoke(*args, "--out", out))
    assert "exists; --append adds this sweep's rows to it, --force replaces it" in line
    assert out.read_bytes() == before
    assert "--append or --force, not both" in bad(invoke(*args, "--out", out, "--append", "--force"))
    assert invoke(*args, "--out", out, "--append").exit_code == 0
    appended = ok_rows(out)
    assert len(appended) == 6 and appended.run_id.nunique() == 2
    assert invoke(*args, "--out", out, "--force").exit_code == 0
    assert len(store.load(out)) == 3


def test_baseline_save_over_an_existing_name_needs_force(smoke_run, tmp_path):
    run = smoke_run
    ok_rows(run)
    save = ("baseline", "save", run, "--name", "b", "--dir", tmp_path / "bl")
    assert invoke(*save).exit_code == 0
    before = (tmp_path / "bl" / "b.parquet").read_bytes()
    assert "exists" in bad(invoke(*save)) and (tmp_path / "bl" / "b.parquet").read_bytes() == before
    assert invoke(*save, "--force").exit_code == 0
    # a folder of runs is read with its subfolders; two runs with no cell in common compare nothing: exit 2
    (tmp_path / "deep" / "er").mkdir(parents=True)
    other = tmp_path / "deep" / "er" / "other.parquet"
    assert invoke("run", "--shapes", "smoke", "--dtype", "fp8", "--m", "1", "--variants", "cublas_fp8",
                  "--budget", "0.01", "--out", other).exit_code == 0  # fmt: skip
    ok_rows(other)
    assert "nothing compared" in bad(invoke("compare", run, tmp_path / "deep"))
    assert invoke("compare", run, tmp_path / "deep", "--allow-empty").exit_code == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (("run", "--shapes", "smoke", "--budget", "abc"), "Invalid value for '--budget'"),
        (("run",), "Missing option '--shapes'"),
        (("run", "--shapes", "smoke", "--no-such-option"), "No such option: --no-such-option"),
        (("layer", "--model", "llama3-70b"), "or try --model smoke"),
    ],
)
def test_usage_errors_are_one_line(args, message):
    line = bad(invoke(*args))
    assert message in line, line
    if args[0] == "run" and len(args) < 4:
        assert "(see `gemmbench run --help`)" in line


@cpu_only
def test_options_are_refused_before_any_work(tmp_path):
    """A baseline this run could not be compared with, and an --out that cannot be written, are refused before a
    cell runs (one line, nothing written)."""
    baseline = Path(__file__).parent.parent / "gemmbench" / "baselines" / "h100.parquet"
    line = bad(invoke("run", "--shapes", "smoke", "--compare-to", baseline, "--out", tmp_path / "r.parquet"))
    assert "this run is on the CPU path" in line and not (tmp_path / "r.parquet").exists()
    assert "cannot write in /proc" in bad(invoke("run", "--shapes", "smoke", "--out", "/proc/x.parquet"))


def test_a_parquet_file_gemmbench_did_not_write_says_so(tmp_path):
    import pandas as pd

    foreign = tmp_path / "foreign.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(foreign)
    with pytest.raises(store.StoreError, match="not a gemmbench run file"):
        store.load([foreign])


@pytest.mark.parametrize(
    "body,says",
    [
        ("import sys\nsys.exit(0)\n", "called sys.exit(0) while importing"),
        ("import sys\nsys.exit('bye')\n", "called sys.exit('bye') while importing"),
        ("import time\ntime.sleep(600)\n", "still importing after 1 s"),
    ],
)
def test_a_plugin_that_exits_or_hangs_at_import_is_its_own_one_line_error(tmp_path, monkeypatch, body, says):
    from gemmbench import registry

    monkeypatch.setattr(registry, "PLUGIN_IMPORT_S", 1)
    plugin = tmp_path / "ends.py"
    plugin.write_text(body)
    res = invoke("run", "--shapes", "smoke", "--plugin", plugin, "--m", "1", "--dtype", "fp16", "--dry-run")
    assert res.exit_code == 2
    line = bad(res)
    assert "ends.py" in line and says in line
