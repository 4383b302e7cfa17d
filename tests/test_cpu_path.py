"""The CPU path (no CUDA GPU): a cell takes exactly worker.CPU_SAMPLES samples after one warm-up call, whatever
--budget says (so that the smoke run takes under a minute), and every row names the host's processor, so that a CPU
run's figures are titled "CPU (<processor>)" (older files, without the column, read "CPU")."""

from __future__ import annotations

import os

os.environ["MPLBACKEND"] = "Agg"  # before anything imports matplotlib: no GUI backend in a test

import re
from pathlib import Path

import pytest
from conftest import HAS_CUDA
from test_cli import invoke, text
from test_plots import prepared, title

from gemmbench.engine.worker import CPU_SAMPLES
from gemmbench.measure import device
from gemmbench.plot import figures as plots
from gemmbench.results import run_schema, store

cpu_only = pytest.mark.skipif(HAS_CUDA, reason="tests the CPU path (no CUDA GPU)")

# A variant whose every call sleeps 2 ms and logs itself: Timer._wall takes one call per sample when a call lasts
# >= 1 ms (its first call measures one, and samples of >= ~1 ms need max(1, int(1e-3 / 2e-3)) = 1 call each).
SLEEPY_PLUGIN = """
import time

import torch

from gemmbench.registry import Launch, Variant, register

LOG = {log!r}


def _make(problem, inputs):
    a, bt = inputs.a, inputs.b.t()

    def fn():
        with open(LOG, "a") as f:
            f.write(f"{{problem.gemm}}\\n")
        time.sleep(0.002)
        return torch.mm(a, bt)

    return Launch(fn=fn)


register(Variant("test_sleepy", "test", ("fp16",), "sleeps 2 ms a call", _make, source=__file__))
"""


@pytest.fixture(scope="module")
def sleepy_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("sleepy")
    log = d / "calls.log"
    plugin = d / "sleepy_plugin.py"
    plugin.write_text(SLEEPY_PLUGIN.format(log=str(log)))
    out = d / "r.parquet"
    # --budget 30: the GPU rule would sample each cell until 30 s were spent or its median were known to 0.5%
    res = invoke("run", "--shapes", "smoke", "--m", "1", "--dtype", "fp16", "--variants", "test_sleepy,cublas_fp16",
                 "--plugin", plugin, "--budget", "30", "--out", out)  # fmt: skip
    assert res.exit_code == 0, text(res.stderr)
    return store.load(out), log.read_text().split()


@cpu_only
def test_a_cpu_cell_takes_exactly_cpu_samples_after_one_warm_up_call(sleepy_run):
    df, calls = sleepy_run
    assert len(df) == 6 and (df.status == "ok").all(), df[["variant", "status", "reason"]].to_string()
    assert (df.n_samples == CPU_SAMPLES).all() and df.samples_us.map(len).eq(CPU_SAMPLES).all()
    assert df.kernels.isna().all()  # no kernel activity records on a CPU: the column stays empty
    # per dense smoke GEMM: 1 call by the check, 1 by the wall sampler before its samples (the warm-up, which also
    # decides the calls per sample: 1, see SLEEPY_PLUGIN), then CPU_SAMPLES samples of 1 call, then the referee's 1
    # call on fresh inputs (on a CPU it times no second one: gemmbench.measure.referee)
    assert {g: calls.count(g) for g in set(calls)} == dict.fromkeys(df.gemm.unique(), 1 + 1 + CPU_SAMPLES + 1)


def model_name_by_hand(text: str) -> str:
    """The first "model name" line's value of a /proc/cpuinfo text, or ""."""
    m = re.search(r"^model name\s*:\s*(.+?)\s*$", text, re.MULTILINE)
    return m.group(1) if m else ""


def test_processor_name_reads_cpuinfo_model_name(tmp_path, monkeypatch):
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
    )
    assert device.processor_name(str(x86)) == "AMD EPYC 9654 96-Core Processor"
    # aarch64 Linux names no model: platform.processor() then, and "" when that is empty too
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n")
    monkeypatch.setattr(device.platform, "processor", lambda: "")
    assert device.processor_name(str(arm)) == ""
    monkeypatch.setattr(device.platform, "processor", lambda: "arm")
    assert device.processor_name(str(tmp_path / "none")) == "arm"  # no such file: the fallback
    device.processor_name.cache_clear()


@cpu_only
def test_cpu_rows_name_the_processor_and_their_figures_say_it(sleepy_run):
    df, _ = sleepy_run
    cpuinfo = Path("/proc/cpuinfo")
    want = model_name_by_hand(cpuinfo.read_text()) if cpuinfo.exists() else None
    if want is not None:  # Linux: the row holds /proc/cpuinfo's model name
        assert (df.cpu == want).all(), df.cpu.unique()
    want = df.cpu.iloc[0]
    assert (df.device == "cpu").all() and df.gpu.isna().all()
    rows = prepared(None, df=df, gpu="cpu")
    drawn = plots.figures("speedup", rows)
    assert drawn
    for d in drawn:
        # style.subtitle: "<device> · <date> · <timing>"; an unknown processor ("") reads "CPU"
        device_part = f"CPU ({want})" if want else "CPU"
        assert f"\n{device_part} · " in title(d.figure), title(d.figure)


@cpu_only
def test_a_run_without_the_processor_is_titled_cpu(sleepy_run, tmp_path):
    """A row whose `cpu` is null (a plugin's, a host whose processor is unknown): a CPU run's figures say "CPU"."""
    df, _ = sleepy_run
    store.write_rows(tmp_path / "nocpu.parquet", [dict(r, cpu=None) for r in store.records(df)])
    old = store.load(tmp_path / "nocpu.parquet")
    assert old.cpu.isna().all() and len(old) == len(df)
    for d in plots.figures("speedup", prepared(None, df=old, gpu="cpu")):
        assert "\nCPU · " in title(d.figure) and "CPU (" not in title(d.figure), title(d.figure)


@cpu_only
def test_a_cpu_run_has_empty_telemetry_columns(sleepy_run):
    """No GPU, no NVML reading (telemetry.probe has no UUID to open): the run works and the columns are null."""
    df, _ = sleepy_run
    assert (df["status"] == "ok").all() and df[list(run_schema.TELEMETRY_COLUMNS)].isna().all().all()
