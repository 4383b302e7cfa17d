"""The perf gate on the CPU: verdicts from synthetic sample sets, status changes, exit codes through the CLI,
runs that must not be compared, baselines, and `run --compare-to` on the smoke set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SMOKE_RUN_ARGS, TIMESTAMP, run_row, stamp
from test_cli import bad, cpu_only, invoke, ok_rows, table_rows, text

from gemmbench.results import compare as cmp
from gemmbench.results import store

RNG = np.random.default_rng(1234)


def samples(median: float, noise: float, n: int = 30, rng=None) -> list[float]:
    """n samples around `median` with relative spread `noise` (a normal draw, clipped positive)."""
    return list(np.clip((rng or RNG).normal(median, noise * median, n), 0.1 * median, None))


# the committed baseline's stack (gemmbench/baselines/h100.parquet): every synthetic row has it unless a test changes it
STACK = {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0", "driver": "580.159.04"}


def row(
    variant="v", M=16, status="ok", s=None, gpu="NVIDIA H100 80GB HBM3", mode="cold", ts=TIMESTAMP, **extra
) -> dict:
    s = samples(100.0, 0.01) if s is None and status == "ok" else s
    extra = {**STACK, **extra}
    return run_row(
        run_id="r",
        timestamp=ts,
        shape_set="set",
        gemm="g",
        M=M,
        N=64,
        K=64,
        E=1,
        topk=1,
        tp=1,
        dtype="bf16",
        variant=variant,
        status=status,
        samples_us=s,
        time_us_median=float(np.median(s)) if s else None,
        gpu=gpu,
        timing_mode=mode,
        l2_state="cold" if mode == "cold" else "streaming",
        **extra,
    )


def write(tmp_path, name, rows) -> str:
    """The rows as <name>.parquet; rows of the default run id "r" become run `name`'s (each file is a run of its own:
    compare refuses the same run on both sides)."""
    path = tmp_path / f"{name}.parquet"
    store.write_rows(path, [dict(r, run_id=name) if r.get("run_id") == "r" else r for r in rows])
    return str(path)


# ---------------------------------------------------------------- the statistics


@pytest.mark.parametrize(
    "change,noise,want",
    [
        (1.00, 0.01, "same"),  # same distribution
        (1.03, 0.01, "same"),  # a real 3% change, under the 5% threshold
        (1.10, 0.01, "slower"),  # 10% slower with 1% noise: beyond the threshold and significant
        (0.90, 0.01, "faster"),
        (1.10, 0.30, "noisy"),  # 10% with 30% noise: the samples cannot support it
    ],
)
def test_verdict_from_samples(change, noise, want):
    # a generator of its own: drawn from the module's shared one, the samples depended on which tests ran before in
    # the same process (pytest-xdist's order), and the 30%-noise case failed in one such order
    rng = np.random.default_rng(2026)
    base = np.array(samples(100.0, 0.01 if noise < 0.1 else noise, rng=rng))
    cand = np.array(samples(100.0 * change, noise, rng=rng))
    verdict, ratio, p = cmp.verdict_for_samples(base, cand, 0.05)
    assert verdict == want, (verdict, ratio, p)
    assert ratio == pytest.approx(np.median(cand) / np.median(base))
    assert p is not None  # every timed cell is tested: the comparison adjusts all their p-values together


def test_p_values_are_adjusted_together_before_alpha():
    """Benjamini-Hochberg by hand over four timed cells, each 10 % slower: raw p 0.001, 0.006, 0.009, 0.5 become
    0.001*4/1 = 0.004, 0.006*4/2 = 0.012, 0.009*4/3 = 0.012, 0.5 (each the least of itself and those ranked after
    it).  At alpha 0.01 one is `slower`; unadjusted, three would be."""
    rows = [
        cmp.Row(f"c{i}", "v", verdict="slower", ratio=1.10, p_raw=p) for i, p in enumerate((0.001, 0.006, 0.009, 0.5))
    ]
    cmp.adjust(rows, 0.05)
    assert [r.p_value for r in rows] == pytest.approx([0.004, 0.012, 0.012, 0.5])
    assert [r.verdict for r in rows] == ["slower", "noisy", "noisy", "noisy"]
    within = cmp.Row("c", "v", ratio=1.02, p_raw=1e-9)  # within the threshold: same, whatever the p
    cmp.adjust([within], 0.05)
    assert within.verdict == "same"


def test_one_separated_cell_among_twenty_is_not_a_regression(tmp_path):
    """Identical runs but for chance: of 20 cells, one has its 5 candidate samples all above its 5 baseline ones, 20 %
    apart.  Alone its exact Mann-Whitney p is 2/C(10,5) = 0.0079 (< 0.01: `slower`); among 20 tested cells its
    adjusted p is at least 0.0079 x 20 = 0.16, so it is `noisy` and the comparison exits 0."""
    flat = [100.0, 100.5, 99.5, 100.2, 99.8]
    base = [row(f"v{i}", s=flat) for i in range(20)]
    cand = [row(f"v{i}", s=flat) for i in range(19)] + [row("v19", s=[x * 1.2 for x in flat])]
    got = {r.variant: r for r in cmp.compare(store.load(write(tmp_path, "b", base)),
                                             store.load(write(tmp_path, "c", cand)), 0.05)}  # fmt: skip
    assert got["v19"].verdict == "noisy" and got["v19"].p_raw == pytest.approx(2 / 252)
    assert got["v19"].p_value >= 0.0079 * 20 - 1e-9
    res = invoke("compare", write(tmp_path, "b2", base), write(tmp_path, "c2", cand))
    assert res.exit_code == 0, res.stderr


def test_five_separated_samples_a_side_are_slower_even_with_a_tie():
    # the CPU path's 5 samples a cell, every candidate sample above every baseline one: the exact two-sided p is
    # 2 / C(10, 5) = 2 / 252 = 0.0079 < 0.01, with or without a tie inside a side (the normal approximation SciPy
    # takes on ties gives 0.0119: "noisy", as the CI-script test flaked)
    base = np.array([1.0, 1.0, 3.0, 4.0, 5.0])  # one tie
    cand = np.array([10.0, 11.0, 12.0, 13.0, 14.0])
    verdict, _, p = cmp.verdict_for_samples(base, cand, 0.05)
    assert verdict == "slower" and p == pytest.approx(2 / 252)


def test_verdicts_for_status_changes_and_missing_cells(tmp_path):
    base = [
        row("a"),
        row("b"),
        row("c", status="wrong", s=None),
        row("d", status="error", s=None),
        row("e"),
        row("f", status="skipped", s=None),
    ]
    cand = [
        row("a", s=samples(120, 0.01)),
        row("b", status="wrong", s=None, reason="rows 0-3 wrong"),
        row("c"),
        row("d", status="error", s=None),
        row("g"),
        row("f"),
    ]
    rows = cmp.compare(store.load(write(tmp_path, "b", base)), store.load(write(tmp_path, "c", cand)), 0.05)
    got = {r.variant: r.verdict for r in rows}
    assert got == {
        "a": "slower",
        "b": "now-failing",
        "c": "fixed",
        "d": "still-failing",
        "e": "missing",
        "g": "new",
        "f": "skipped",
    }
    assert rows[0].verdict == "slower" and rows[0].ratio == pytest.approx(1.2, rel=0.02)
    assert next(r for r in rows if r.variant == "b").reason == "rows 0-3 wrong"


def test_an_impossible_row_is_failing_never_faster(tmp_path):
    """A row faster than the GPU can go (`impossible`, metrics.impossible_reason) is a failure, like wrong and error,
    however fast its samples: now-failing after ok, fixed once ok again."""
    base = [row("a"), row("b", status="impossible", s=None, reason="faster than this GPU can go")]
    cand = [row("a", status="impossible", s=samples(1, 0.01), reason="faster than this GPU can go"), row("b")]
    rows = cmp.compare(store.load(write(tmp_path, "b", base)), store.load(write(tmp_path, "c", cand)), 0.05)
    assert {r.variant: r.verdict for r in rows} == {"a": "now-failing", "b": "fixed"}


def test_latest_row_of_a_cell_wins(tmp_path):
    base = [row("a")]
    cand = [row("a", s=samples(150, 0.01), ts=stamp(hours=1)), row("a", ts=stamp(hours=2))]
    rows = cmp.compare(store.load(write(tmp_path, "b", base)), store.load(write(tmp_path, "c", cand)))
    assert [r.verdict for r in rows] == ["same"]


@pytest.mark.parametrize("text_,want", [("5%", 0.05), ("5", 0.05), ("0.05", 0.05), ("12.5%", 0.125)])
def test_threshold_parsing(text_, want):
    assert cmp.parse_threshold(text_) == pytest.approx(want)


@pytest.mark.parametrize("text_", ["five", "0%", "100%", "-3%"])
def test_bad_threshold(text_):
    with pytest.raises(cmp.CompareError, match="--threshold"):
        cmp.parse_threshold(text_)


# ---------------------------------------------------------------- the command


def test_exit_codes_and_formats(tmp_path):
    base = write(tmp_path, "base", [row("a"), row("b")])
    same = write(tmp_path, "same", [row("a"), row("b")])
    slow = write(tmp_path, "slow", [row("a", s=samples(110, 0.01)), row("b")])
    failing = write(tmp_path, "failing", [row("a"), row("b", status="error", s=None, reason="CUDA error")])
    res = invoke("compare", base, same)
    assert res.exit_code == 0, res.stderr and "2 same" in text(res.stderr)
    res = invoke("compare", base, slow)
    assert res.exit_code == 1 and "slower" in text(res.stdout) and "1 hit --fail-on" in text(res.stderr)
    assert invoke("compare", base, slow, "--fail-on", "failing").exit_code == 0
    assert invoke("compare", base, failing).exit_code == 1
    assert invoke("compare", base, failing, "--fail-on", "slower").exit_code == 0
    md = invoke("compare", base, slow, "--format", "markdown")
    assert md.stdout.startswith("### gemmbench perf: ❌ 1 regression(s)") and "| slower | set g bf16 M16" in md.stdout
    js = json.loads(invoke("compare", base, slow, "--format", "json").stdout)
    assert js["counts"] == {"slower": 1, "same": 1} and js["rows"][0]["verdict"] == "slower"
    assert invoke("compare", base, slow, "--threshold", "20%").exit_code == 0  # 10% is under a 20% threshold


def test_runs_of_different_timing_modes_are_refused_unless_force(tmp_path):
    base = write(tmp_path, "base", [row("a")])
    cand = write(tmp_path, "cand", [row("a", mode="stream")])
    line = bad(invoke("compare", base, cand))
    assert "refusing to compare" in line and "timing_mode (baseline cold, candidate stream)" in line
    assert "l2_state (baseline cold, candidate streaming)" in line and "--force" in line
    forced = invoke("compare", base, cand, "--force")
    assert forced.exit_code == 0 and "warning (--force)" in text(forced.stderr)


# each stack field the candidate changes: (test id, the candidate's row options, what the line must say it was/is);
# not the id "gpu": the keyword of the GPU tests' marker, which conftest skips without CUDA
STACK_CHANGES = [
    ("GPU model", {"gpu": "NVIDIA H200"}, "gpu (baseline NVIDIA H100 80GB HBM3, candidate NVIDIA H200)"),
    ("torch", {"torch": "2.13.0+cu130"}, "torch (baseline 2.11.0+cu130, candidate 2.13.0+cu130)"),
    ("triton", {"triton": "3.9.0"}, "triton (baseline 3.6.0, candidate 3.9.0)"),
    ("cuda", {"cuda": "12.9"}, "cuda (baseline 13.0, candidate 12.9)"),
    ("driver", {"driver": "575.57.08"}, "driver (baseline 580.159.04, candidate 575.57.08)"),
    ("driver unknown", {"driver": None}, "driver (baseline 580.159.04, candidate -)"),  # not recorded: not the same
]


@pytest.mark.parametrize("field,cand_kw,named", STACK_CHANGES, ids=[c[0] for c in STACK_CHANGES])
def test_a_stack_change_is_refused_naming_what_differs(tmp_path, field, cand_kw, named):
    base = write(tmp_path, "base", [row("a"), row("b")])
    cand = write(tmp_path, "cand", [row("a", **cand_kw), row("b", **cand_kw)])
    res = invoke("compare", base, cand, "--format", "json")
    line = bad(res)  # one line on stderr, exit 2
    assert line.startswith("error: refusing to compare across stacks: the runs differ in ")
    assert named in line and "--allow-stack-change" in line and res.stdout == ""
    # only the field that differs is named
    others = [f for f in ("gpu (", "torch (", "triton (", "cuda (", "driver (") if not named.startswith(f)]
    assert not [f for f in others if f in line]


def test_the_same_stack_compares_unmarked(tmp_path):
    """Rows with one stack (the committed baseline's) compare as before: nothing refused, nothing marked."""
    base = write(tmp_path, "base", [row("a")])
    js = json.loads(invoke("compare", base, write(tmp_path, "c", [row("a")]), "--format", "json").stdout)
    assert js["stack_change"] is None and [r["stack_changed"] for r in js["rows"]] == [False]


def test_allow_stack_change_marks_every_verdict(tmp_path):
    """Across a torch and a driver change, with --allow-stack-change: the verdicts are still computed (a 30% slower
    cell is `slower`, exit 1 under the default --fail-on), and every one of them is marked in each format, with the
    fields that differ said once."""
    kw = {"torch": "2.13.0+cu130", "driver": "575.57.08"}
    base = write(tmp_path, "base", [row("a"), row("b"), row("c")])
    cand = write(
        tmp_path, "cand", [row("a", s=samples(130, 0.01), **kw), row("b", **kw), row("c", s=samples(70, 0.01), **kw)]
    )
    args = ("compare", base, cand, "--allow-stack-change")
    what = "torch (baseline 2.11.0+cu130, candidate 2.13.0+cu130), driver (baseline 580.159.04, candidate 575.57.08)"

    js = json.loads(invoke(*args, "--format", "json").stdout)
    assert {r["variant"]: r["verdict"] for r in js["rows"]} == {"a": "slower", "b": "same", "c": "faster"}
    assert all(r["stack_changed"] for r in js["rows"]) and js["stack_change"] == f"the runs differ in {what}"

    table = invoke(*args)
    assert table.exit_code == 1  # a slower cell still fails the gate: the change is allowed, not hidden
    shown = [r[0] for r in table_rows(table.stdout)]  # `same` rows are counted, not listed
    assert shown == ["slower †", "faster †"]
    assert f"† every verdict compares two stacks: the runs differ in {what}" in " ".join(text(table.stderr).split())

    md = invoke(*args, "--format", "markdown").stdout
    assert md.startswith("### gemmbench perf: ❌ 1 regression(s) † across a stack change")
    assert "| slower † | set g bf16 M16" in md and "| faster † | set g bf16 M16" in md
    assert f"† every verdict compares two stacks: the runs differ in {what}" in md


def test_a_timing_mode_change_is_not_a_stack_change(tmp_path):
    """--allow-stack-change does not let other timing modes through, nor --force another stack."""
    base = write(tmp_path, "base", [row("a")])
    mode = write(tmp_path, "mode", [row("a", mode="stream")])
    torch_ = write(tmp_path, "torch", [row("a", torch="2.13.0")])
    assert "--force" in bad(invoke("compare", base, mode, "--allow-stack-change"))
    assert "--allow-stack-change" in bad(invoke("compare", base, torch_, "--force"))


def test_misuse_is_one_line_and_exit_2(tmp_path):
    base = write(tmp_path, "base", [row("a")])
    assert "no such file" in bad(invoke("compare", base, tmp_path / "nope.parquet"))
    assert "--fail-on" in bad(invoke("compare", base, base, "--fail-on", "sometimes"))
    assert "--format" in bad(invoke("compare", base, base, "--format", "html"))
    assert "--threshold" in bad(invoke("compare", base, base, "--threshold", "lots"))
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    assert "not a readable Parquet file" in bad(invoke("compare", base, tmp_path / "junk.parquet"))
    # a name found nowhere on the search path: the line lists the folders searched, in order
    line = bad(invoke("compare", "no-such-baseline", base))
    assert "no baseline named 'no-such-baseline' (looked in ./results/baselines, " in line
    assert "no such file" in bad(invoke("compare", tmp_path / "nope.parquet", base))  # a path is used as it is


def test_a_file_of_another_schema_is_refused(tmp_path):
    import pyarrow.parquet as pq

    base = write(tmp_path, "base", [row("a")])
    table = pq.read_table(base)
    old = table.replace_schema_metadata({b"gemmbench.run_format": b"9"})
    pq.write_table(old, tmp_path / "new.parquet")
    assert "newer gemmbench" in bad(invoke("compare", base, tmp_path / "new.parquet"))


def test_baseline_save_and_compare_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = write(tmp_path, "run", [row("a"), row("b", status="skipped", s=None, reason="no fp8 here")])
    res = invoke("baseline", "save", run, "--name", "h100")
    assert res.exit_code == 0, res.stderr
    saved = store.load(tmp_path / "results" / "baselines" / "h100.parquet")
    assert len(saved) == 2 and list(saved.variant) == ["a", "b"]
    assert np.allclose(saved.samples_us[0], store.load(run).samples_us[0])
    # the saved baseline is that very run: compared with it, refused (nothing can be learnt); with another, compared
    assert "run run is on both sides" in bad(invoke("compare", "h100", run))
    assert invoke("compare", "h100", write(tmp_path, "again", [row("a")])).exit_code == 0
    assert "--name" in bad(invoke("baseline", "save", run, "--name", "../evil"))
    assert invoke("baseline", "save", run, "--name", "only-a", "--variants", "a,x*").exit_code == 0
    assert list(store.load(tmp_path / "results" / "baselines" / "only-a.parquet").variant) == ["a"]
    assert "keeps no row" in bad(invoke("baseline", "save", run, "--name", "none", "--variants", "zz*"))


def test_run_compare_to_on_the_cpu(smoke_run, tmp_path, monkeypatch):
    """`gemmbench run --compare-to`: the smoke run against a baseline made of an earlier smoke run; a baseline
    that does not exist is refused before anything runs."""
    monkeypatch.chdir(tmp_path)
    args = SMOKE_RUN_ARGS
    ok_rows(smoke_run)  # a baseline of measured cells, not of errors
    assert invoke("baseline", "save", smoke_run, "--name", "cpu").exit_code == 0
    res = invoke(*args, "--out", tmp_path / "second.parquet", "--compare-to", "cpu", "--strict")
    assert res.exit_code in (0, 1), res.stderr  # wall-clock CPU timings may move: either verdict is honest
    ok_rows(tmp_path / "second.parquet")
    assert "### gemmbench perf:" in res.stdout and "against" in res.stdout
    assert "--compare-to" in bad(invoke(*args, "--out", tmp_path / "third.parquet", "--compare-to", "nope"))


@cpu_only
def test_run_compare_to_refuses_another_stack_before_any_work(tmp_path):
    """`run --compare-to` checks the stack before the sweep: a CPU baseline (no GPU, wall timing, this machine's
    triton, CUDA and driver) whose torch is not this one's is refused in one line, and nothing is written."""
    import torch
    import triton

    here = {"torch": "0.0.1", "triton": triton.__version__, "cuda": torch.version.cuda, "driver": None}
    base = write(tmp_path, "cpu-old-torch", [dict(row("cublas_fp16", gpu=None, mode="wall", **here), l2_state="warm")])
    out = tmp_path / "r.parquet"
    line = bad(invoke("run", "--shapes", "smoke", "--m", "1", "--dtype", "fp16", "--variants",
                      "cublas_fp16,torch_moe_loop", "--compare-to", base, "--out", out))  # fmt: skip
    assert f"this run's stack is not the baseline's: the runs differ in torch (baseline 0.0.1, candidate " \
           f"{torch.__version__})" in line and "--allow-stack-change" in line  # fmt: skip
    assert not out.exists()


CI_PERF = Path(__file__).parent.parent / "scripts" / "ci-perf.sh"


def ci_perf_env(**extra: str) -> dict:
    """This environment with the test's Python first on PATH (the script runs `python3` and `gemmbench`), plus
    `extra`."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra)


def test_ci_perf_script_confirms_a_regression_by_rerunning(tmp_path):
    """scripts/ci-perf.sh end to end on the CPU smoke set: against a baseline 10^6x slower it passes (exit 0; CPU
    wall times of one run and the next differ too much for "the same" to be a stable test); against a
    baseline whose samples are 10^6x faster every cell is slower, the flagged variants are run again (at the flagged
    M and dtypes, in three processes), and the job fails (exit 1) because the re-run confirms it.  Artifacts: the runs, both comparisons in Markdown and JSON."""
    env = ci_perf_env(
        SHAPES="smoke",
        RUN_ARGS="--variants cublas_fp16 --dtype fp16 --m 1,2 --budget 0.01",
        THRESHOLD="50%",
        PLOTS="0",  # the verdicts are what is tested here
    )
    first = invoke(
        "run",
        "--shapes",
        "smoke",
        "--variants",
        "cublas_fp16",
        "--dtype",
        "fp16",
        "--m",
        "1,2",
        "--budget",
        "0.01",
        "--out",
        tmp_path / "base.parquet",
    )
    assert first.exit_code == 0, first.stderr
    clean = store.records(store.load(tmp_path / "base.parquet"))
    store.write_rows(tmp_path / "slow.parquet", [dict(r, samples_us=[x * 1e6 for x in r["samples_us"]]) for r in clean])
    store.write_rows(tmp_path / "fast.parquet", [dict(r, samples_us=[x / 1e6 for x in r["samples_us"]]) for r in clean])

    def job(baseline: str, artifacts: str) -> subprocess.Popen:
        return subprocess.Popen(["bash", str(CI_PERF)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=dict(env, BASELINE=str(tmp_path / baseline), ARTIFACTS=artifacts))  # fmt: skip

    # both jobs at once: each is mostly waiting on its own processes' start-up
    jobs = [job("slow.parquet", "a1"), job("fast.parquet", "a2")]
    (ok_out, ok_err), (bad_out, bad_err) = (j.communicate(timeout=300) for j in jobs)
    assert jobs[0].returncode == 0, ok_out + ok_err
    assert not (tmp_path / "a1" / "retry").exists() and (tmp_path / "a1" / "compare.json").exists()
    assert jobs[1].returncode == 1, bad_out + bad_err
    art = tmp_path / "a2"
    # the re-run takes the flagged variants at the flagged M and dtypes only, in 3 processes
    assert (art / "retry.txt").read_text().split() == ["smoke", "cublas_fp16", "1,2", "fp16"]
    retry = json.loads((art / "compare-retry.json").read_text())
    rerun = store.load(art / "retry" / "smoke.parquet")
    assert retry["counts"]["slower"] == 6 and len(rerun) == 3 * 6 and set(rerun["process"]) == {0, 1, 2}, retry
    assert {r["cand_processes"] for r in retry["rows"] if r["verdict"] == "slower"} == {3}
    assert "Re-run of the flagged variants" in bad_out


def test_ci_perf_without_a_baseline_of_this_gpu_says_how_to_make_one(tmp_path):
    """No BASELINE and no baseline measured on this machine's GPU (on the CPU machine: none at all): one line naming
    the commands that make one, exit 2, and nothing run."""
    env = {k: v for k, v in ci_perf_env(ARTIFACTS="art").items() if k != "BASELINE"}
    got = subprocess.run(["bash", str(CI_PERF)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2, got.stdout + got.stderr
    line = got.stderr.strip()
    assert line.startswith("no baseline was measured on this machine (no CUDA GPU): make one") and "\n" not in line
    assert "gemmbench run --shapes llama70b-attn --m decode" in line and "gemmbench baseline save base --name" in line
    assert not (tmp_path / "art" / "runs").exists() or not any((tmp_path / "art" / "runs").iterdir())


def test_ci_perf_with_a_baseline_it_cannot_read_says_why_in_one_line(tmp_path):
    """BASELINE that names no baseline, a missing path or a file that is not Parquet: one line on stderr saying why
    (no traceback), exit 2, and nothing run."""
    (tmp_path / "notes.parquet").write_text("not Parquet")
    cases = {"no-such-name": "no baseline named 'no-such-name'", str(tmp_path / "gone.parquet"): "no such file",
             str(tmp_path / "notes.parquet"): "not a readable Parquet file"}  # fmt: skip
    for baseline, why in cases.items():
        env = ci_perf_env(BASELINE=baseline, ARTIFACTS="art")
        got = subprocess.run(["bash", str(CI_PERF)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        lines = got.stderr.strip().splitlines()
        assert got.returncode == 2 and len(lines) == 1, got.stdout + got.stderr
        assert lines[0].startswith("cannot read the baseline: ") and why in lines[0], lines
        assert not (tmp_path / "art" / "runs").exists()


def test_the_baseline_of_a_gpu_model_is_found_by_its_rows(tmp_path, monkeypatch):
    from gemmbench.results import named_baselines

    user = tmp_path / "user"
    monkeypatch.setenv("GEMMBENCH_BASELINE_DIR", str(user))
    monkeypatch.chdir(tmp_path)  # no ./results/baselines here
    user.mkdir()
    write(user, "mine-h200", [row(gpu="NVIDIA H200")])
    write(user, "mixed", [row(gpu="NVIDIA H200"), row("w", gpu="NVIDIA H100 80GB HBM3")])  # two models: never picked
    assert named_baselines.for_gpu("NVIDIA H200").name == "mine-h200"  # the user's folder comes before the shipped
    assert named_baselines.for_gpu("NVIDIA H100 80GB HBM3").name == "h100"  # the package's
    assert named_baselines.for_gpu("NVIDIA H20") is None
