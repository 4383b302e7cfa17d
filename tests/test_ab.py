"""`gemmbench run --repeat N --ab BASELINE_COMMAND`: the baseline build's processes interleaved
with this build's, A B A B, into two files that `compare` tests per process.  The baseline here is a fake: a script
that logs when it ran and with what, and writes one row of the same cell (1 s a sample, so the candidate is faster)."""

import json
import stat
import sys
from datetime import datetime, timezone

import pytest
from conftest import run_row, stamp
from test_cli import ok_rows
from typer.testing import CliRunner

from gemmbench.cli import ab, app
from gemmbench.measure import device
from gemmbench.results.store import load

SHAPES = """name: ab
description: one tiny GEMM (smoke_square's shape)
m: [1]
gemms:
  - {id: g, N: 64, K: 64, parallel: none}
"""

# The fake baseline: `run --help` is this build's; `run ...` logs its argv and start and end times (UTC, µs), then
# writes the template's rows to --out.
FAKE = """#!{python}
import json, subprocess, sys
from datetime import datetime, timezone
if "--help" in sys.argv:
    sys.exit(subprocess.call([sys.executable, "-m", "gemmbench", *sys.argv[1:]]))
start = datetime.now(timezone.utc).isoformat()
from gemmbench.results import store
args = sys.argv[1:]
rows = json.load(open({template!r}))
n = sum(1 for _ in open({log!r})) if __import__("os").path.exists({log!r}) else 0
store.write_rows(args[args.index("--out") + 1], [dict(r, run_id=f"base-{{n}}") for r in rows])
with open({log!r}, "a") as f:
    f.write(json.dumps({{"argv": args, "start": start, "end": datetime.now(timezone.utc).isoformat()}}) + "\\n")
"""


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def fake_baseline(tmp_path, fail: bool = False):
    """(the fake's path, its log); fail: it prints 'boom' on stderr and exits 3 instead."""
    row = run_row(shape_set="ab", gemm="g", M=1, N=64, K=64, E=1, topk=1, tp=1, ep=1, dtype="fp16", scaling="none",
               variant="cublas_fp16", family="cublas", status="ok", timing_mode="wall", l2_state="warm",
               samples_us=[1e6] * 5, time_us_median=1e6, time_us_p20=1e6, time_us_p80=1e6, n_samples=5,
               timestamp=stamp(), config="{}", **device.provenance())  # fmt: skip
    (tmp_path / "template.json").write_text(json.dumps([row]))
    log = tmp_path / "baseline.log"
    text = FAKE.format(python=sys.executable, template=str(tmp_path / "template.json"), log=str(log))
    if fail:
        text = f"#!{sys.executable}\nimport sys\nprint('starting', file=sys.stderr)\nprint('boom', file=sys.stderr)\nsys.exit(3)\n"
    script = tmp_path / "fake-gemmbench"
    script.write_text(text)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def test_the_order_is_baseline_then_candidate_each_process():
    assert ab.order(3) == [("baseline", 0), ("candidate", 0), ("baseline", 1), ("candidate", 1),
                           ("baseline", 2), ("candidate", 2)]  # fmt: skip


def test_only_options_off_their_default_are_passed_on():
    got = ab.sweep_args([("--shapes", "s.yaml", None), ("--dtype", "fp8,bf16", "fp8,bf16"), ("--m", None, None),
                         ("--retune", True, False), ("--sanitize", False, False), ("--plugin", ["a.py", "b.py"], []),
                         ("--seed", 3, 0)])  # fmt: skip
    assert got == ["--shapes", "s.yaml", "--retune", "--plugin", "a.py", "--plugin", "b.py", "--seed", "3"]


def test_every_option_the_baseline_knows_is_passed_defaults_too():
    options = [("--shapes", "s.yaml", None), ("--dtype", "fp8,bf16", "fp8,bf16"), ("--m", None, None),
               ("--retune", False, False), ("--dp", "1", "1"), ("--budget", 0.5, 0.5)]  # fmt: skip
    # an older build without --dp: left out at its default; its other options passed at their defaults too, so a
    # build whose own defaults differ sweeps the same cells
    got = ab.sweep_args(options, known={"--shapes", "--dtype", "--m", "--retune", "--budget"})
    assert got == ["--shapes", "s.yaml", "--dtype", "fp8,bf16", "--budget", "0.5"]
    with pytest.raises(ab.AbError, match="^this sweep sets --dp, which the baseline build's `run` does not have$"):
        ab.sweep_args([*options[:4], ("--dp", "8", "1")], known={"--shapes", "--dtype", "--m", "--retune"})


def test_the_baseline_builds_options_come_from_its_help():
    known = ab.baseline_options([sys.executable, "-m", "gemmbench"])
    assert {"--shapes", "--dtype", "--dp", "--layout", "--cell-timeout", "--budget"} <= known


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ab", "no-such-gemmbench-xyz"], "'no-such-gemmbench-xyz' is not an executable program"),
        (["--ab", "'unclosed"], "No closing quotation"),
        (["--ab", "   "], "give the command that runs the baseline"),
        (["--ab", sys.executable, "--compare-to", "h100"], "it takes no --compare-to"),
    ],
)
def test_bad_ab_is_one_line_and_exit_2(tmp_path, args, message):
    got = invoke("run", "--shapes", "smoke", "--m", "1", "--out", tmp_path / "r.parquet", *args)
    assert got.exit_code == 2 and message in got.output and "Traceback" not in got.output
    assert not (tmp_path / "r.parquet").exists()


def test_a_failing_baseline_stops_the_run_with_its_last_line(tmp_path):
    script, _ = fake_baseline(tmp_path, fail=True)
    (tmp_path / "ab.yaml").write_text(SHAPES)
    got = invoke("run", "--shapes", tmp_path / "ab.yaml", "--variants", "cublas_fp16", "--dtype", "fp16",
                 "--out", tmp_path / "r.parquet", "--ab", script)  # fmt: skip
    assert got.exit_code == 2 and "exited 3: boom" in got.output and "Traceback" not in got.output


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory):
    """One A/B run of 2 processes a side on the CPU (two candidate workers start: the few seconds of this file)."""
    tmp = tmp_path_factory.mktemp("ab")
    script, log = fake_baseline(tmp)
    (tmp / "ab.yaml").write_text(SHAPES)
    out = tmp / "cand.parquet"
    got = invoke("run", "--shapes", tmp / "ab.yaml", "--variants", "cublas_fp16", "--dtype", "fp16", "--repeat", 2,
                 "--out", out, "--ab", script)  # fmt: skip
    return got, tmp, out, [json.loads(line) for line in log.read_text().splitlines()]


def test_ab_runs_the_baseline_with_the_same_sweep_options(ab_run):
    got, tmp, _, calls = ab_run
    assert got.exit_code == 0, got.output
    assert len(calls) == 2
    for call in calls:
        # every sweep option the baseline's `run --help` lists, as asked (timing cold: the baseline, on the CPU path
        # too, switches to wall itself), defaults included, in the request's order; then the part file it is to write
        assert call["argv"][:-1] == ["run", "--shapes", str(tmp / "ab.yaml"), "--variants", "cublas_fp16",
                                     "--dtype", "fp16", "--routing", "uniform", "--seed", "0", "--tp", "1", "--dp", "1",
                                     "--ep", "1", "--layout", "vllm", "--timing", "cold", "--inputs", "randn",
                                     "--budget", "0.5", "--out"]  # fmt: skip


def test_ab_interleaves_baseline_and_candidate_processes(ab_run):
    _, _, out, calls = ab_run
    cand = load([out])
    assert sorted(cand["process"]) == [0, 1]

    def t(text):
        return datetime.fromisoformat(text).astimezone(timezone.utc)

    made = {int(r.process): t(r.timestamp) for r in cand.itertuples()}  # row timestamps: whole seconds
    b0, b1 = ((t(c["start"]), t(c["end"])) for c in calls)
    # A0 B0 A1 B1: each candidate row was made after the baseline process before it ended, and before the next began
    assert b0[1].replace(microsecond=0) <= made[0] < b1[0] and b1[1].replace(microsecond=0) <= made[1]


def test_ab_writes_one_baseline_file_of_numbered_processes_and_compares(ab_run):
    got, _, out, _ = ab_run
    base = load([ab.baseline_path(out)])
    assert ab.baseline_path(out).name == "cand-baseline.parquet"
    # the two parts, as processes 0 and 1 of one run (compare keeps a cell's latest run: it must be one)
    assert sorted(base["process"]) == [0, 1] and set(base["run_id"]) == {"base-0"}
    assert "2 baseline rows of 2 processes" in got.output
    # the comparison ran: 1 s a sample against the CPU's microseconds is faster; 2 processes a side: pooled samples
    assert "faster" in got.output and "within-process" in got.output


def test_an_interrupted_ab_run_keeps_the_baseline_processes_that_ended(tmp_path, monkeypatch):
    """Ctrl-C (or `timeout -s INT`) during the second baseline process: the first baseline process's rows are joined
    into the baseline file and the first candidate process's rows stay in the run file; exit 130, one line.  (On the
    H100 an A/B run stopped this way had lost its four finished baseline processes.)"""
    script, _ = fake_baseline(tmp_path)
    (tmp_path / "ab.yaml").write_text(SHAPES)
    real, calls = ab.run_baseline, []

    def second_is_interrupted(command, args, out):
        calls.append(out)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(command, args, out)

    monkeypatch.setattr(ab, "run_baseline", second_is_interrupted)
    out = tmp_path / "cand.parquet"
    got = invoke("run", "--shapes", tmp_path / "ab.yaml", "--variants", "cublas_fp16", "--dtype", "fp16",
                 "--repeat", 3, "--out", out, "--ab", script)  # fmt: skip
    assert got.exit_code == 130 and "interrupted" in got.output and "Traceback" not in got.output
    assert "1 baseline rows of 1 processes" in got.output
    assert sorted(load([ab.baseline_path(out)])["process"]) == [0] and sorted(load([out])["process"]) == [0]
    ok_rows(out)  # the candidate process that ended measured its cell


# A slow fake baseline that behaves as gemmbench on a signal: its rows are written as parts while it runs, and on
# SIGTERM it joins them into its --out file and exits 130.
SLOW = """#!{python}
import json, signal, subprocess, sys, time
if "--help" in sys.argv:
    sys.exit(subprocess.call([sys.executable, "-m", "gemmbench", *sys.argv[1:]]))
from gemmbench.results import store
args = sys.argv[1:]
writer = store.RunWriter(args[args.index("--out") + 1])
def stop(signum, frame):
    writer.close()
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
for r in json.load(open({template!r})):
    writer.append(dict(r, run_id="base-0"))
writer.flush()
open({ready!r}, "w").close()
time.sleep(600)
"""


def test_sigterm_during_a_baseline_process_keeps_its_finished_rows(tmp_path):
    """SIGTERM to `run --ab` while its baseline process runs: the baseline is stopped the same way, saves its rows,
    and they are joined into <out>-baseline.parquet; then `run` dies by the signal, as every command does."""
    import signal
    import subprocess
    import time

    fake_baseline(tmp_path)  # writes the template
    script = tmp_path / "slow-gemmbench"
    script.write_text(SLOW.format(python=sys.executable, template=str(tmp_path / "template.json"),
                                  ready=str(tmp_path / "ready")))  # fmt: skip
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "ab.yaml").write_text(SHAPES)
    out = tmp_path / "cand.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gemmbench", "run", "--shapes", str(tmp_path / "ab.yaml"), "--variants", "cublas_fp16",
         "--dtype", "fp16", "--repeat", "2", "--out", str(out), "--ab", str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "ready").exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "1 baseline rows of 1 processes" in stderr
    assert load([ab.baseline_path(out)])["run_id"].tolist() == ["base-0"]
