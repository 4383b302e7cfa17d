"""A sweep whose source changes while it runs (a kernel edited beside a long sweep, a worker restarted after it): the
rows of workers started after the change stamp the new build, and the sweep says so in one line per new build."""

from __future__ import annotations

from test_cli import invoke, ok_rows

from gemmbench.measure import device

SWEEP = "run --shapes smoke --variants cublas_fp16 --dtype fp16 --m 1,2 --budget 0.01".split()


def test_rows_of_another_build_than_the_sweeps_are_named(tmp_path, monkeypatch):
    # the sweep (this process) began with build "started"; its worker, a fresh process, reads GEMMBENCH_GIT_SHA as a
    # worker started after an edit reads the edited checkout's build
    monkeypatch.setenv("GEMMBENCH_GIT_SHA", "edited")
    monkeypatch.setattr(device, "git_sha", lambda package=None: "started")
    out = tmp_path / "run.parquet"
    res = invoke(*SWEEP, "--out", out)
    assert res.exit_code == 0, res.stdout + res.stderr
    rows = ok_rows(out)
    assert set(rows.git_sha) == {"edited"} and len(rows) == 6  # 3 dense GEMMs x 2 M, one variant
    said = [line for line in res.stderr.splitlines() if "source changed while this sweep ran" in line]
    assert len(said) == 1, res.stderr  # one line for the one new build, not one per row
    assert "measured by build edited, the sweep began with started" in said[0]


def test_a_sweep_of_one_build_says_nothing_of_builds(tmp_path):
    res = invoke(*SWEEP, "--out", tmp_path / "run.parquet")
    assert res.exit_code == 0 and "source changed" not in res.stderr, res.stderr
