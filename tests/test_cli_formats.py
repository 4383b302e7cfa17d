"""The command line's single-choice options (Enums: choices in --help, in the shell's completion, anything else one
line and exit 2), its help text, and `--format json` on `list shapes`, `list variants` and `run` (the report's: in
test_report_formats.py).  Expected values come from the shape sets, the registry and the Parquet rows, by hand."""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys

import pandas as pd
import pytest
import typer
from conftest import PLUGINS
from test_cli import BUILTIN_FAMILIES, bad, invoke, text
from test_plots import SHIPPED, TP8
from typer.testing import CliRunner

from gemmbench.cli import app
from gemmbench.models import shape_sets
from gemmbench.results import store, tables

# ---------------------------------------------------------------- help, choices, completion


def _commands(cmd, path):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, [*path, name])


def test_help_paragraphs_are_one_line_each():
    """rich keeps a line break inside a help paragraph, so a docstring wrapped by hand prints ragged at any width."""
    ragged = []
    for path, cmd in _commands(typer.main.get_command(app), ["gemmbench"]):
        for what, help_text in [("help", cmd.help), *((p.name, getattr(p, "help", None)) for p in cmd.params)]:
            for paragraph in inspect.cleandoc(help_text or "").split("\n\n"):
                if "\n" in paragraph:
                    ragged.append(f"{' '.join(path)} {what}: {paragraph[:60]!r}")
    assert ragged == []


@pytest.mark.parametrize(
    "args, choices",
    [
        (["run"], ["<cold|stream|graph|wall|cupti>", "<table|json>"]),
        (["compare"], ["<table|markdown|json>"]),
        (["report"], ["<table|json>"]),
        (["list", "shapes"], ["<table|json>"]),
        (["list", "variants"], ["<table|json>"]),
    ],
)
def test_help_shows_the_choices(args, choices):
    res = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "160"})
    assert res.exit_code == 0
    for c in choices:
        assert c in text(res.stdout), (args, c)


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["run", "--shapes", "smoke", "--timing", "fast"],
            "--timing 'fast': choose from cold, stream, graph, wall, cupti",
        ),
        (["run", "--shapes", "smoke", "--format", "csv"], "--format 'csv': choose from table, json"),
        (["list", "shapes", "--format", "yaml"], "--format 'yaml': choose from table, json"),
        (["list", "variants", "--format", "JSON"], "--format 'JSON': choose from table, json"),  # case counts
        (["report", TP8, "--format", "html"], "--format 'html': choose from table, json"),
        (["compare", TP8, TP8, "--format", "html"], "--format 'html': choose from table, markdown, json"),
    ],
)
def test_a_bad_choice_is_one_line_and_exit_2(args, line, tmp_path):
    out = ["--out", tmp_path / "never"] if args[0] in ("run", "report") else []
    got = bad(invoke(*args, *out))  # exit 2, one line on stderr, nothing on stdout
    command = " ".join(args[:2] if args[0] == "list" else args[:1])
    assert got == f"error: {line} (see `gemmbench {command} --help`)"
    assert list(tmp_path.iterdir()) == []


def _complete(words: str) -> list[str]:
    """What bash completes after `words` (its last word being typed)."""
    env = {"_GEMMBENCH_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1)}
    res = CliRunner().invoke(app, [], prog_name="gemmbench", env=env)
    assert res.exit_code == 0, res.stderr
    return res.stdout.split()


def test_shell_completion(monkeypatch):
    # Typer finds the user's shell by walking this process's parents (shellingham); a test run under another shell
    # or none would fail for that alone: the shell is bash here, as a bash user's would be
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    res = invoke("--help")
    assert "--install-completion" in text(res.stdout) and "--show-completion" in text(res.stdout)
    assert _complete("gemmbench run --timing ") == ["cold", "stream", "graph", "wall", "cupti"]
    assert _complete("gemmbench list ") == ["shapes", "variants", "configs"]
    assert _complete("gemmbench compare a b --format m") == ["markdown"]
    assert "--format" in _complete("gemmbench report --fo")
    script = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="gemmbench")
    assert script.exit_code == 0 and "_GEMMBENCH_COMPLETE=complete_bash" in script.stdout


def test_help_imports_nothing_heavy():
    """--help (now with the completion options) still imports no torch, pandas, numpy or matplotlib."""
    code = (
        "import sys\nfrom gemmbench.cli import main\nsys.argv = ['gemmbench', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'pandas', 'numpy', 'matplotlib', 'triton') if m in sys.modules), "
        "file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr.strip() == "[]", proc.stderr


# ---------------------------------------------------------------- list --format json


def test_list_shapes_json():
    res = invoke("list", "shapes", "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "gemmbench.shapes/1"
    assert [s["name"] for s in doc["sets"]] == shape_sets.builtin_names()
    for s in doc["sets"]:
        want = shape_sets.load(s["name"])
        assert s["description"] == want.description and s["m"] == list(want.m_values)
        assert [
            (g["id"], g["N"], g["K"], g["E"], g["topk"], g["parallel"], g["layer"], g["role"]) for g in s["gemms"]
        ] == [(g.name, g.N, g.K, g.E, g.topk, g.parallel, g.layer, g.role) for g in want.gemms]
    smoke = next(s for s in doc["sets"] if s["name"] == "smoke")
    assert smoke["m"] == [1, 33]  # README: the smoke set's default M
    moe = [g for g in smoke["gemms"] if g["E"] > 1]
    assert moe and all(g["topk"] >= 1 for g in moe) and all(g["E"] == 1 for g in smoke["gemms"] if g not in moe)


def test_list_variants_json():
    res = invoke("list", "variants", "--plugin", PLUGINS / "crash_plugin.py", "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "gemmbench.variants/1"
    by_name = {v["name"]: v for v in doc["variants"]}
    assert {n: by_name[n]["family"] for n in BUILTIN_FAMILIES} == BUILTIN_FAMILIES
    # exactly the built-ins are "builtin"; the plugin's variant is there too (and, in a test process, whatever other
    # tests registered, each with its own source)
    assert {n for n, v in by_name.items() if v["source"] == "builtin"} == set(
        BUILTIN_FAMILIES
    ) and "test_crash" in by_name
    # the README's variants table, by hand
    assert by_name["cublas_fp16"] | {"description": ""} == {
        "name": "cublas_fp16", "family": "cublas", "dtypes": ["fp16"], "scalings": ["tensor"],
        "fp8_accums": ["precise"], "kind": "dense", "baseline_of": ["fp16"], "tunable": False, "source": "builtin",
        "description": ""}  # fmt: skip
    assert by_name["torch_moe_loop"]["kind"] == "moe" and by_name["torch_moe_loop"]["dtypes"] == ["fp16", "bf16"]
    assert by_name["triton_dp_row"]["tunable"] and by_name["triton_dp_row"]["dtypes"] == ["fp16", "bf16", "fp8"]
    assert by_name["cublas_fp8_rowwise"]["scalings"] == ["row"]
    assert by_name["cublas_fp8_rowwise"]["fp8_accums"] == ["precise", "fast"]  # use_fast_accum=True is its fast
    assert by_name["test_crash"]["source"].endswith("crash_plugin.py")


# ---------------------------------------------------------------- the run summary

# bf16 has no scaling: its rows at "row" (the shipped baseline's --scaling tensor,row, all skipped) are cuBLAS bf16's
BASELINE = {("fp8", "tensor"): "cublas_fp8", ("fp8", "row"): "cublas_fp8_rowwise", ("bf16", "none"): "cublas_bf16",
            ("bf16", "row"): "cublas_bf16"}  # fmt: skip
CELL = ["gemm", "M", "N", "K", "tp", "ep", "dtype", "scaling", "routing"]


def expected_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Each row's speedup (its cell's cuBLAS time of the same dtype and scaling / its time, both ok) and winner (the
    fastest ok row of its cell that is not noisy), from the DataFrame of a dense run."""
    df = df.reset_index(drop=True)
    ok = df[df["status"] == "ok"]
    base = {tuple(r[c] for c in CELL): r["time_us_median"] for _, r in ok.iterrows()
            if r["variant"] == BASELINE[(r["dtype"], r["scaling"])]}  # fmt: skip
    speedup = [base.get(tuple(r[c] for c in CELL), math.nan) / r["time_us_median"] if r["status"] == "ok" else math.nan
               for _, r in df.iterrows()]  # fmt: skip
    # the tie rule (docs/RESULTS.md): a row whose p20-p80 overlaps the fastest's is tied with it; a fastest tied with
    # none wins; a noisy row ranks only where its p80 lies below every other ok row's p20 of its cell
    best, tied = set(), set()
    for _, every in ok.groupby(CELL, dropna=False):
        noisy = every["noisy"].fillna(False).astype(bool)
        clear = [
            i
            for i in every.index
            if len(every) > 1 and (every.drop(i)["time_us_p20"] > every.at[i, "time_us_p80"]).all()
        ]
        cell = every[~noisy | every.index.isin(clear)]
        if cell.empty:
            continue
        f = cell.loc[cell["time_us_median"].idxmin()]
        near = cell[(cell["time_us_p20"] <= f["time_us_p80"]) & (cell["time_us_p80"] >= f["time_us_p20"])]
        (tied.update if len(near) > 1 else best.update)(near.index)
    return df.assign(speedup=speedup, winner=[i in best for i in df.index], tied=[i in tied for i in df.index])


def _check_cells(cells: list, df: pd.DataFrame) -> None:
    want = expected_summary(df)
    assert len(cells) == len(want)
    for cell, (_, r) in zip(cells, want.iterrows(), strict=True):
        assert list(cell) == list(tables.SUMMARY_FIELDS)
        for f in ("shape_set", "gemm", "M", "N", "K", "E", "topk", "tp", "ep", "dtype", "scaling", "variant",
                  "timing_mode", "status"):  # fmt: skip
            assert cell[f] == r[f], f
        assert cell["routing"] is None and cell["reason"] == (r["reason"] if isinstance(r["reason"], str) else None)
        assert cell["baseline"] == BASELINE[(r["dtype"], r["scaling"])]
        assert (cell["winner"], cell["tied"], cell["noisy"]) == (r["winner"], r["tied"], bool(r["noisy"]))
        if r["status"] == "ok":
            assert cell["time_us_median"] == pytest.approx(r["time_us_median"])
        assert (cell["speedup"] is None) == math.isnan(r["speedup"])
        if cell["speedup"] is not None:
            assert cell["speedup"] == pytest.approx(r["speedup"])


@pytest.mark.parametrize("path", [TP8, SHIPPED], ids=["prefill-tp8", "shipped-baseline"])
def test_summary_of_a_committed_h100_run(path):
    """tables.summary on real runs: winners and speedups.  The prefill run (Llama3-70B's GEMMs at TP 8, fp8 per
    tensor and bf16) and the shipped baseline (two decode runs, fp8 per tensor and per row, bf16)."""
    df = store.load([path])
    cells = json.loads(json.dumps(tables.summary(store.records(df))))  # as print_json writes them
    _check_cells(cells, df)
    # no noisy row there: each cell with an ok row has one winner or a tie
    ok = df[df["status"] == "ok"]
    assert not ok["noisy"].any()
    winners, ties = sum(c["winner"] for c in cells), {tuple(c[k] for k in CELL) for c in cells if c["tied"]}
    assert winners + len(ties) == ok.groupby(CELL, dropna=False).ngroups
    bases = [c["speedup"] for c in cells if c["variant"] == c["baseline"] and c["status"] == "ok"]
    assert bases and set(bases) == {1.0}
    assert {c["speedup"] for c in cells if c["status"] != "ok"} == {None}


@pytest.fixture(scope="module")
def json_runs(tmp_path_factory):
    """A CPU run with --format json, then a second compared with it (--compare-to, still --format json)."""
    d = tmp_path_factory.mktemp("json")
    common = ["run", "--shapes", "smoke", "--dtype", "bf16", "--budget", "0.01", "--plugin",
              PLUGINS / "planted_slowdown.py", "--format", "json"]  # fmt: skip
    first = invoke(*common, "--m", "1,5", "--variants", "cublas_bf16,planted_slow_bf16", "--out", d / "a.parquet")
    second = invoke(*common, "--m", "1", "--variants", "cublas_bf16", "--compare-to", d / "a.parquet",
                    "--out", d / "b.parquet")  # fmt: skip
    return first, second, d


def test_run_format_json(json_runs):
    first, _, d = json_runs
    assert first.exit_code == 0, first.stderr
    doc = json.loads(first.stdout)  # stdout is the document alone: progress and banners went to stderr
    assert "CPU path" in text(first.stderr) and "cells:" in text(first.stderr)
    df = store.load([d / "a.parquet"])
    assert (doc["schema"], doc["file"], doc["interrupted"]) == ("gemmbench.run/1", str(d / "a.parquet"), False)
    assert doc["run_id"] == df["run_id"].iloc[0]
    assert doc["counts"] == df["status"].value_counts().to_dict() == {"ok": 3 * 2 * 2}  # every cell measured
    assert len(doc["cells"]) == 3 * 2 * 2  # smoke's 3 dense GEMMs x M 1, 5 x 2 variants (bf16 has no MoE variant)
    _check_cells(doc["cells"], df)


def test_run_format_json_with_a_comparison(json_runs):
    _, second, d = json_runs
    doc = json.loads(second.stdout)  # the comparison went to stderr, not into the document
    assert [c["variant"] for c in doc["cells"]] == ["cublas_bf16"] * 3
    assert doc["counts"] == {"ok": 3}  # measured cells, so the comparison compared times
    err = text(second.stderr)
    assert "### gemmbench perf:" in err
    assert second.exit_code == (1 if "regression(s)" in err else 0), err  # 1 only on a slower cell


def test_a_parsed_choice_survives_typers_enum_converter():
    """Typer (the GPU machine's, Python 3.12) converts a parsed option's value back through str(value) and a map of
    the Enum's values, and gives None where the lookup misses: with str() "TimingMode.stream", `--timing stream`
    became None and ran cold.  Every single-choice Enum's members must read as their values (gemmbench.choices)."""
    from gemmbench.cli.formats import CompareFormat, OutputFormat
    from gemmbench.configs.inference_engines import InferenceEngine
    from gemmbench.measure.timing_modes import TimingMode

    for kind in (TimingMode, OutputFormat, CompareFormat, InferenceEngine):
        by_value = {str(m.value): m for m in kind}  # what typer's generate_enum_convertor builds
        for member in kind:
            assert by_value.get(str(member)) is member, (kind, member)


@pytest.mark.parametrize("command", [("run",), ("tune",), ("layer",), ("compare",), ("list", "configs"), ()])
def test_help_shows_no_type_beside_a_flag(command):
    res = invoke(*command, "--help")
    assert res.exit_code == 0 and "--help" in res.stdout
    assert "<bool>" not in res.stdout


def test_baseline_list_and_merge_write_json_documents(tmp_path):
    listed = invoke("baseline", "list", "--format", "json")
    assert listed.exit_code == 0, listed.stderr
    doc = json.loads(listed.stdout)
    shipped = {b["name"]: b for b in doc["baselines"] if b["where"].endswith("shipped")}
    assert doc["schema"] == "gemmbench.baselines/1" and shipped["h200"]["gpu"] == "NVIDIA H200"
    # as `baseline save` reported them (h200: three processes of 364 cells)
    assert shipped["h100"]["rows"] == 728 and shipped["h200"]["rows"] == 1092
    out = tmp_path / "m.parquet"
    merged = invoke("merge", "gemmbench/baselines/h200.parquet", "--out", out, "--format", "json")
    assert merged.exit_code == 0, merged.stderr
    doc = json.loads(merged.stdout)
    assert doc == {"schema": "gemmbench.merge/1", "file": str(out), "rows": 1092,
                   "parts": ["gemmbench/baselines/h200.parquet"], "problems": []}  # fmt: skip


def test_a_hint_on_stderr_is_one_line_whatever_its_length(tmp_path):
    """A command in a hint copies whole: stderr lines are not cut at the terminal's width."""
    out = tmp_path / ("a-folder-with-a-long-name-" * 4) / "qwen2-7b.yaml"
    res = invoke("shapes", "from-config", "tests/fixtures/hf-configs/qwen2-7b.json", "--out", out)
    assert res.exit_code == 0, res.stderr
    [line] = [ln for ln in res.stderr.splitlines() if "run it with" in ln]
    assert line.endswith(f"run it with: gemmbench run --shapes {out}")
