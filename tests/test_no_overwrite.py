"""Results already written are never replaced without --force: every option that names an output, walked here, and
two runs that would write one file at the same time.  The first call writes, the second is refused in one line
(the file untouched), the third with --force replaces."""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

import pytest
from test_cli import bad, invoke

SHIPPED = "gemmbench/baselines/h100.parquet"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A run file to plot, report, merge and save: the shipped baseline's fp8 QKV cells at M 16 (what is written
    matters here, not how much)."""
    from gemmbench.results import store

    rows = store.records(store.load([SHIPPED]))
    path = tmp_path_factory.mktemp("run") / "run.parquet"
    store.write_rows(path, [r for r in rows if r["M"] == 16 and r["gemm"] == "attn_qkv" and r["dtype"] == "fp8"])
    return path


CONFIG = "tests/fixtures/hf-configs/qwen2-7b.json"


def digest(paths: list[Path]) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


# (id, the command given its output path, the files that output makes)
WRITERS = {
    "plot": (lambda r, o: ("plot", r, "--kind", "tflops", "--out", o), lambda o: sorted(o.glob("*.png"))),
    "report": (lambda r, o: ("report", r, "--out", o), lambda o: [o / "report.md", o / "report.html"]),
    "shapes-from-config": (
        lambda r, o: ("shapes", "from-config", CONFIG, "--out", o / "s.yaml"),
        lambda o: [o / "s.yaml"],
    ),
    "baseline-save": (lambda r, o: ("baseline", "save", r, "--name", "b", "--dir", o), lambda o: [o / "b.parquet"]),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_second_write_is_refused_and_force_replaces(writer, tmp_path, small_run):
    command, made = WRITERS[writer]
    first = invoke(*command(small_run, tmp_path))
    assert first.exit_code == 0, first.stderr
    files = made(tmp_path)
    assert files and all(f.is_file() for f in files)
    before = digest(files)
    line = bad(invoke(*command(small_run, tmp_path)))
    assert "exists" in line and "--force replaces it" in line
    assert digest(files) == before  # untouched
    assert invoke(*command(small_run, tmp_path), "--force").exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--shapes", "smoke"),
        ("merge", SHIPPED),
        ("layer", "--model", "llama3-70b"),
    ],
)
def test_an_existing_out_file_is_refused_before_any_work(args, tmp_path):
    out = tmp_path / "r.parquet"
    out.write_bytes(b"not even parquet")  # whatever it holds, it is the user's
    line = bad(invoke(*args, "--out", out))
    assert "exists" in line and "--force" in line
    assert out.read_bytes() == b"not even parquet"


def test_two_runs_writing_one_file_at_once_the_second_is_refused(tmp_path):
    out = tmp_path / "r.parquet"
    with open(tmp_path / ".r.parquet.lock", "a+") as held:  # as a running gemmbench holds it
        held.write("pid 4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = invoke("run", "--shapes", "smoke", "--m", "1", "--dtype", "fp16", "--out", out)
    assert res.exit_code == 2
    line = res.stderr.strip().splitlines()[-1]  # after the CPU path's banner
    assert line == f"error: --out {out}: gemmbench pid 4242 is writing it now; wait for it, or give another --out"
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("merge", SHIPPED),  # a merge into the file a run is writing would be replaced by the run's join
        ("layer", "--model", "smoke"),
    ],
)
def test_every_run_file_writer_takes_the_lock(args, tmp_path):
    out = tmp_path / "r.parquet"
    with open(tmp_path / ".r.parquet.lock", "a+") as held:  # as a running `run --out r.parquet` holds it
        held.write("pid 4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        res = invoke(*args, "--out", out)
    assert res.exit_code == 2
    line = res.stderr.strip().splitlines()[-1]
    assert line == f"error: --out {out}: gemmbench pid 4242 is writing it now; wait for it, or give another --out"
    assert not out.exists()


def test_resume_with_force_or_append_is_refused_and_deletes_nothing(smoke_run):
    out = smoke_run
    before = digest([out])
    for flag in ("--force", "--append"):
        line = bad(invoke("run", "--shapes", "smoke", "--resume", out, flag))
        assert line.startswith(f"error: --resume adds to its own file: it takes no {flag}")
    assert digest([out]) == before


def test_a_shape_set_of_a_very_long_name_makes_a_run_file(tmp_path):
    shapes = tmp_path / "long.yaml"
    shapes.write_text(f"name: {'x' * 400}\ngemms:\n  - {{id: a, N: 64, K: 64, parallel: none}}\n")
    res = invoke("run", "--shapes", shapes, "--variants", "cublas_fp16", "--dtype", "fp16", "--m", "1",
                 "--out", tmp_path / "res")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    [made] = (tmp_path / "res").glob("*.parquet")
    assert len(made.name) < 255 and "x" * 80 in made.name
