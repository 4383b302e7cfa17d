"""`gemmbench profile` on a CPU: NVTX range names, the ncu and nsys command lines, an H100 ncu CSV read back
into columns, the cell profiler driven by a fake `run` (no real ncu, nsys or child process), profile tables
and their join with a run, an nsys SQLite export made by hand, and the command's bad inputs."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sqlite3
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import HAS_CUDA, TIMESTAMP, run_row, stamp
from typer.testing import CliRunner

from gemmbench import registry
from gemmbench.cli import app
from gemmbench.measure import nvtx_ranges
from gemmbench.measure.inputs import cell_seed
from gemmbench.profile import ncu, ncu_reader, nsys
from gemmbench.profile import sweep as profile
from gemmbench.results import metrics, side_tables, store
from gemmbench.shapes import Problem

FIXTURE = Path(__file__).parent / "fixtures" / "ncu-raw-h100-autounits.csv"
GEMM_KERNEL = "nvjet_sm90_tst_64x16_64x16_2x1_v_bz_TNT"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# the fixture's GEMM: cuBLAS bf16, M=16 N=8192 K=8192
DENSE = Problem("llama70b-attn", "attn_o", 16, 8192, 8192, "bf16")
MOE = Problem("mixtral-moe", "moe_w13", 16, 1024, 512, "bf16", E=8, topk=2, routing="uniform")


def fixture_text() -> str:
    return FIXTURE.read_text()


def fixture_kernels() -> list[dict]:
    return ncu.parse_raw_csv(fixture_text())


# ---------------------------------------------------------------- nvtx_ranges


def test_range_names_have_no_slash_or_at():
    p = Problem("s", "attn/qkv@x", 16, 64, 64, "bf16")
    cell = nvtx_ranges.cell_name("cublas_bf16", p)
    assert "/" not in cell and "@" not in cell
    assert cell == "cublas_bf16 attn_qkv_x bf16 M16 N64 K64"
    for phase in nvtx_ranges.PHASES:
        name = nvtx_ranges.range_name(phase, cell)
        assert name == f"{phase} {cell}" and "/" not in name and "@" not in name
    # the filter has exactly the one '@' (domain) and the one trailing '/' (push/pop)
    f = nvtx_ranges.ncu_include(nvtx_ranges.range_name("profile", cell))
    assert f.count("@") == 1 and f.count("/") == 1 and f.endswith("/")


@pytest.mark.parametrize("phase", ["timed", "", "Profile", "check "])
def test_unknown_phase_is_an_error(phase):
    with pytest.raises(ValueError, match="unknown phase"):
        nvtx_ranges.range_name(phase, "v p")


def test_ncu_include_with_and_without_domain():
    assert nvtx_ranges.ncu_include("profile v p") == "gemmbench@profile v p/"
    assert nvtx_ranges.ncu_include("profile v p", "gemmbench") == "gemmbench@profile v p/"
    assert nvtx_ranges.ncu_include("profile v p", None) == "profile v p/"


def test_annotate_with_the_nvtx_package():
    has_nvtx = importlib.util.find_spec("nvtx") is not None  # installed here (not on the GPU image)
    assert (nvtx_ranges._backend() or ("none",))[0] == ("nvtx" if has_nvtx else "torch" if HAS_CUDA else "none")
    assert nvtx_ranges.domain_in_use() == ("gemmbench" if has_nvtx or not HAS_CUDA else None)
    ran = []
    with nvtx_ranges.annotate("profile v p"):
        ran.append(1)
    with nvtx_ranges.annotate(None):
        ran.append(2)
    assert ran == [1, 2]
    with pytest.raises(KeyError):  # an error inside the block goes through
        with nvtx_ranges.annotate("profile v p"):
            raise KeyError("x")


class _FakeNvtx:
    def __init__(self):
        self.calls = []

    def push_range(self, message, domain):
        self.calls.append(("push", message, domain))

    def pop_range(self, domain):
        self.calls.append(("pop", domain))

    def range_push(self, name):
        self.calls.append(("push", name))

    def range_pop(self):
        self.calls.append(("pop",))


@pytest.mark.parametrize("kind", ["nvtx", "torch"])
def test_annotate_pushes_and_pops_once(monkeypatch, kind):
    fake = _FakeNvtx()
    monkeypatch.setattr(nvtx_ranges, "_backend", lambda: (kind, fake))
    with pytest.raises(RuntimeError):
        with nvtx_ranges.annotate("time v p"):
            fake.calls.append("body")
            raise RuntimeError("boom")
    if kind == "nvtx":
        assert fake.calls == [("push", "time v p", "gemmbench"), "body", ("pop", "gemmbench")]
        assert nvtx_ranges.domain_in_use() == "gemmbench"
    else:
        assert fake.calls == [("push", "time v p"), "body", ("pop",)]
        assert nvtx_ranges.domain_in_use() is None
    fake.calls.clear()
    with nvtx_ranges.annotate(None):
        fake.calls.append("body")
    assert fake.calls == ["body"]  # no range for None


# ---------------------------------------------------------------- ncu command lines

TARGET = ["/usr/bin/python3", "-m", "gemmbench.engine.worker", "--timing", "cold"]


def _after(cmd, flag):
    return cmd[cmd.index(flag) + 1]


@pytest.mark.parametrize("domain, expected", [("gemmbench", "gemmbench@profile v p/"), (None, "profile v p/")])
def test_ncu_profile_command(domain, expected):
    report = Path("/out/run 1/cell.ncu-rep")
    cmd = ncu.profile_command("/opt/ncu", report, "profile v p", domain, TARGET)
    assert cmd[0] == "/opt/ncu"
    assert cmd[-len(TARGET) :] == TARGET
    head = cmd[: -len(TARGET)]
    assert _after(head, "--clock-control") == "none"
    assert _after(head, "--cache-control") == "all"
    assert "--nvtx" in head and _after(head, "--nvtx-include") == expected
    assert _after(head, "--export") == str(report)
    assert "--set" not in head
    metrics_ = _after(head, "--metrics").split(",")
    expected_metrics = [*ncu.METRICS.values(), *ncu.FLOP_METRICS]
    assert sorted(metrics_) == sorted(expected_metrics)  # each exactly once
    assert len(metrics_) == len(set(metrics_))
    joined = " ".join(cmd)
    assert "--clock-control base" not in joined
    assert not any(x in head for x in ("base", "--lock-clocks", "--clock-control=base")), head
    assert head.count("--clock-control") == 1


def test_ncu_profile_command_extra_metrics_and_full_set():
    extra = ["lts__t_bytes.sum", "dram__bytes_read.sum", "lts__t_bytes.sum", "l1tex__data_pipe_lsu_wavefronts.sum"]
    cmd = ncu.profile_command("ncu", Path("r.ncu-rep"), "profile v p", "gemmbench", TARGET, extra, full_set=True)
    metrics_ = _after(cmd, "--metrics").split(",")
    base = [*ncu.METRICS.values(), *ncu.FLOP_METRICS]
    assert metrics_[: len(base)] == base
    assert metrics_[len(base) :] == ["lts__t_bytes.sum", "l1tex__data_pipe_lsu_wavefronts.sum"]  # appended, once
    assert metrics_.count("dram__bytes_read.sum") == 1
    assert _after(cmd, "--set") == "full"
    assert cmd.index("--set") < len(cmd) - len(TARGET)
    assert cmd[-len(TARGET) :] == TARGET
    assert _after(cmd, "--clock-control") == "none"


def test_ncu_import_command():
    cmd = ncu.import_command("ncu", Path("/a b/r.ncu-rep"))
    assert cmd[0] == "ncu" and _after(cmd, "--import") == "/a b/r.ncu-rep"
    assert "--csv" in cmd and _after(cmd, "--page") == "raw" and _after(cmd, "--print-units") == "base"


# ---------------------------------------------------------------- ncu CSV


def test_parse_fixture_kernels_and_units():
    ks = fixture_kernels()
    assert len(ks) == 2
    assert ks[0]["kernel"] == GEMM_KERNEL and ks[0]["id"] == 0
    assert ks[1]["kernel"].startswith("void at::reduce_kernel<512, 1,") and ks[1]["id"] == 1
    k = ks[0]
    assert k["dram__bytes_read.sum"] == pytest.approx(134_513_152, rel=1e-12)  # "134.513152" Mbyte
    assert k["dram__bytes_write.sum"] == pytest.approx(2_363_904, rel=1e-12)  # "2.363904" Mbyte
    assert k["gpu__time_duration.sum"] == pytest.approx(50_208, rel=1e-12)  # "50.208000" us
    assert ks[1]["gpu__time_duration.sum"] == pytest.approx(6_848, rel=1e-12)
    assert k["dram__bytes.sum.peak_sustained"] == pytest.approx(1280, rel=1e-12)  # "1.280000" Kbyte/cycle
    assert k["dram__bytes.avg.peak_sustained"] == pytest.approx(32, rel=1e-12)  # "32.000000" byte/cycle
    assert k["dram__cycles_elapsed.avg.per_second"] == pytest.approx(2.617208e9, rel=1e-12)  # Ghz
    assert k["launch__shared_mem_per_block_dynamic"] == pytest.approx(180_692, rel=1e-12)  # Kbyte/block
    assert k["launch__registers_per_thread"] == 168  # register/thread: no prefix
    assert k["sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"] == 2_147_483_648  # "2,147,483,648"
    assert k["device__attribute_max_gpu_frequency_khz"] == 1_980_000  # "1,980,000", no unit
    assert k["lts__t_sector_hit_rate.pct"] == pytest.approx(8.443056)  # %
    assert k["device__attribute_confidential_computing_mode"] is None  # "No-CC" is not a number
    assert "Kernel Name" not in k and "Block Size" not in k  # only metric columns besides kernel and id


def test_parse_base_units_after_prof_lines():
    text = (
        "==PROF== Connected to process 4242 (/usr/bin/python3)\n"
        "==PROF== Disconnected from process 4242\n"
        '"ID","Kernel Name","dram__bytes_read.sum","gpu__time_duration.sum","launch__grid_size","sm__throughput.avg.pct_of_peak_sustained_elapsed"\n'
        '"","","byte","nsecond","","%"\n'
        '"0","gemv_kernel(float*)","1,048,576","12,345","1,024","55.5"\n'
        '"1","second","2048","7","","n/a"\n'
    )
    ks = ncu.parse_raw_csv(text)
    assert [k["id"] for k in ks] == [0, 1]
    assert ks[0]["kernel"] == "gemv_kernel(float*)" and ks[1]["kernel"] == "second"
    assert ks[0]["dram__bytes_read.sum"] == 1_048_576 and ks[0]["gpu__time_duration.sum"] == 12_345
    assert ks[0]["launch__grid_size"] == 1024 and ks[0]["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 55.5
    assert ks[1]["dram__bytes_read.sum"] == 2048 and ks[1]["gpu__time_duration.sum"] == 7
    assert ks[1]["launch__grid_size"] is None and ks[1]["sm__throughput.avg.pct_of_peak_sustained_elapsed"] is None


@pytest.mark.parametrize(
    "unit, value, expected",
    [
        ("msecond", "1.5", 1.5e6),
        ("ms", "2", 2e6),
        ("usecond", "3", 3e3),
        ("second", "1", 1e9),
        ("Gbyte", "1.5", 1.5e9),
        ("Tbyte/s", "2", 2e12),
        ("Kinst", "4", 4e3),
        ("Msector", "1", 1e6),
        ("cycle", "1,000", 1000.0),
        ("%", "12.5", 12.5),
        ("", "7", 7.0),
    ],
)
def test_units_to_base(unit, value, expected):
    text = f'"ID","Kernel Name","x__y.sum"\n"","","{unit}"\n"0","k","{value}"\n'
    assert ncu.parse_raw_csv(text)[0]["x__y.sum"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n",
        '"Kernel Name","gpu__time_duration.sum"\n"","ns"\n"k","1"\n',
        '"ID","Kernel Name"\n',  # a header and nothing else
    ],
)
def test_csv_without_kernel_table_is_an_error(text):
    with pytest.raises(ncu.NcuError, match="no 'ID' header"):
        ncu.parse_raw_csv(text)


# ---------------------------------------------------------------- ncu columns


def _dense_model() -> ncu.Model:
    return ncu.Model(metrics.flops(DENSE), metrics.bytes_min(DENSE))


def test_cell_rows_on_the_fixture():
    ks = fixture_kernels()
    model = _dense_model()
    assert model.flops == 2 * 16 * 8192 * 8192
    rows = ncu.cell_rows(ks, model)
    assert len(rows) == 3
    gemm, reduce_, total = rows
    assert gemm["ncu_kernel"] == GEMM_KERNEL and gemm["ncu_kernel_id"] == 0 and gemm["ncu_kernels"] == 1
    assert reduce_["ncu_kernel_id"] == 1 and reduce_["ncu_kernels"] == 1
    assert total["ncu_kernel"] == ncu.SUM_KERNEL and total["ncu_kernels"] == 2 and total["ncu_kernel_id"] is None

    ns = 50_208 + 6_848
    assert total["ncu_duration_ns"] == pytest.approx(ns)
    assert total["ncu_duration_us"] == pytest.approx(ns / 1e3)
    read = 134_513_152 + 327_680
    write = 2_363_904 + 0
    assert total["ncu_dram_read_bytes"] == pytest.approx(read)
    assert total["ncu_dram_write_bytes"] == pytest.approx(write)
    gbps = (read + write) / ns
    assert total["ncu_dram_gbps"] == pytest.approx(gbps)
    assert gemm["ncu_dram_gbps"] == pytest.approx((134_513_152 + 2_363_904) / 50_208)
    peak = 1280 * 2.617208e9 / 1e9  # the larger of the two kernels' peaks
    assert gemm["ncu_dram_peak_gbps"] == pytest.approx(peak)
    assert reduce_["ncu_dram_peak_gbps"] == pytest.approx(1280 * 2.598131)
    assert total["ncu_dram_peak_gbps"] == pytest.approx(peak)
    assert total["ncu_dram_pct_peak"] == pytest.approx(gbps / peak * 100)
    assert gemm["ncu_dram_pct_peak"] == pytest.approx(81.378458)  # per kernel: ncu's own
    assert total["ncu_dram_traffic_ratio"] == pytest.approx((read + write) / model.bytes_min)
    assert gemm["ncu_dram_traffic_ratio"] == pytest.approx((134_513_152 + 2_363_904) / model.bytes_min)
    assert gemm["ncu_tensor_flops"] == 2 * 16 * 8192 * 8192
    assert gemm["ncu_tensor_flops_ratio"] == pytest.approx(1.0)
    assert reduce_["ncu_tensor_flops_ratio"] == 0
    assert total["ncu_tensor_flops_ratio"] == pytest.approx(1.0)
    # no sector counts in this export: hit rates are weighted by duration
    l2 = (8.443056 * 50_208 + 79.374600 * 6_848) / ns
    assert total["ncu_l2_hit_pct"] == pytest.approx(l2)
    assert total["ncu_occupancy_pct"] == pytest.approx((14.108812 * 50_208 + 25.341331 * 6_848) / ns)
    assert total["ncu_registers"] == 168 and reduce_["ncu_registers"] == 32
    assert gemm["ncu_smem_bytes"] == pytest.approx(180_692 + 0)
    assert reduce_["ncu_smem_bytes"] == pytest.approx(2_048 + 16)
    assert total["ncu_smem_bytes"] == pytest.approx(180_692)
    assert total["ncu_global_load_inst"] == 512 + 513 and total["ncu_tma_load_inst"] == 32768
    assert gemm["ncu_grid_size"] == 128 and gemm["ncu_block_size"] == 384
    assert total["ncu_grid_size"] is None and total["ncu_block_size"] is None


def test_cell_rows_give_the_sm_clock_each_kernel_ran_at():
    """ncu_sm_mhz: the SM clock under ncu (its launches may start on a GPU idled between passes), per kernel and,
    for the cell, weighted by duration; missing where the export has no such metric (older reports)."""
    ks = fixture_kernels()
    assert ncu.cell_rows(ks, _dense_model())[-1]["ncu_sm_mhz"] is None
    ks[0]["sm__cycles_elapsed.avg.per_second"], ks[1]["sm__cycles_elapsed.avg.per_second"] = 1.755e9, 1.2e9
    gemm, reduce_, total = ncu.cell_rows(ks, _dense_model())
    assert gemm["ncu_sm_mhz"] == pytest.approx(1755) and reduce_["ncu_sm_mhz"] == pytest.approx(1200)
    assert total["ncu_sm_mhz"] == pytest.approx((1755 * 50_208 + 1200 * 6_848) / (50_208 + 6_848))


def test_cell_rows_weight_hit_rates_by_sectors():
    ks = fixture_kernels()
    ks[0]["lts__t_sectors.sum"], ks[1]["lts__t_sectors.sum"] = 4_000_000.0, 1_000_000.0
    total = ncu.cell_rows(ks, _dense_model())[-1]
    assert total["ncu_l2_sectors"] == 5_000_000
    assert total["ncu_l2_hit_pct"] == pytest.approx((8.443056 * 4 + 79.3746 * 1) / 5)


def test_a_full_set_report_says_why_warps_waited_and_how_evenly_the_sms_were_busy():
    """The H200 export of `--set full` (the Gluon kernel, block scales, M 1024 N 7168 K 18432), its cells read by
    hand: 19 stall reasons in cycles per issued instruction summing to 12.12 ("selected", the issuing cycle, counted
    in the interval but never named a reason); SM active cycles 570,633.66 mean against 678,585 at the busiest."""
    [kernel] = ncu.parse_raw_csv((Path(__file__).parent / "fixtures" / "ncu-raw-h200-fullset.csv").read_text())
    row, total = ncu.cell_rows([kernel], ncu.Model(None, None))
    waits = [4.99, 0.02, 0.20, 0.00, 0.10, 0.01, 0, 4.65, 0.04, 0, 0.00, 0.00, 0.04, 0.24, 1.00, 0.01, 0, 0, 0.82]
    assert row["ncu_issue_cycles"] == pytest.approx(sum(waits)) and sum(waits) == pytest.approx(12.12)
    assert row["ncu_stall_top"] == "barrier 5.0, long_scoreboard 4.7, wait 0.8"
    assert row["ncu_sm_balance"] == pytest.approx(570_633.66 / 678_585)
    assert total["ncu_stall_top"] == row["ncu_stall_top"]  # one kernel: the cell's are its own
    assert total["ncu_issue_cycles"] == pytest.approx(12.12) and total["ncu_sm_balance"] == pytest.approx(
        0.840917, 1e-6
    )
    # the default metrics hold neither: empty, not zero
    assert {ncu.cell_rows(fixture_kernels(), _dense_model())[-1][c] for c in
            ("ncu_issue_cycles", "ncu_stall_top", "ncu_sm_balance")} == {None}  # fmt: skip


def test_a_cells_stall_reasons_are_its_longest_kernels():
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio".format
    gemm = {"id": 0, "kernel": "gemm", "gpu__time_duration.sum": 3000.0, stall("barrier"): 6.0, stall("wait"): 2.0}
    reduce_ = {"id": 1, "kernel": "reduce", "gpu__time_duration.sum": 1000.0, stall("long_scoreboard"): 10.0}
    *_, total = ncu.cell_rows([reduce_, gemm], ncu.Model(None, None))
    assert total["ncu_stall_top"] == "barrier 6.0, wait 2.0"
    assert total["ncu_issue_cycles"] == pytest.approx((8.0 * 3000 + 10.0 * 1000) / 4000)  # weighted by duration


def test_cell_rows_without_model_or_counters():
    rows = ncu.cell_rows([{"id": 0, "kernel": "k", "gpu__time_duration.sum": 1000.0}], ncu.Model(None, None))
    total = rows[-1]
    assert total["ncu_kernels"] == 1 and total["ncu_duration_ns"] == 1000
    assert total["ncu_dram_gbps"] is None and total["ncu_dram_traffic_ratio"] is None
    assert total["ncu_tensor_flops_ratio"] is None and total["ncu_dram_pct_peak"] is None


# ---------------------------------------------------------------- ncu failures and tools


def test_explain_failure():
    perm = (
        "==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
        "access NVIDIA GPU Performance Counters on the target device 0.\n"
    )
    why = ncu.explain_failure(perm, "profile v p")
    assert "NVreg_RestrictProfilingToAdminUsers" in why and "\n" not in why
    why = ncu.explain_failure("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n", "profile v p")
    assert "'profile v p'" in why
    assert ncu.explain_failure("ok line\n==ERROR== something\n", "r") == "ncu: something"
    assert ncu.explain_failure("==PROF== Connected to process 1\n==PROF== Disconnected from process 1\n", "r") is None
    assert ncu.explain_failure("", "r") is None


def _no_tools(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder
    monkeypatch.setattr("os.access", lambda *a, **k: False)


def test_find_ncu_missing(monkeypatch, tmp_path):
    _no_tools(monkeypatch, tmp_path)
    with pytest.raises(ncu.NcuError) as e:
        ncu.find_ncu()
    assert "Nsight Compute" in str(e.value) and "CUDA toolkit" in str(e.value) and "PATH" in str(e.value)


def test_find_nsys_missing(monkeypatch, tmp_path):
    _no_tools(monkeypatch, tmp_path)
    with pytest.raises(nsys.NsysError) as e:
        nsys.find_nsys()
    assert "Nsight Systems" in str(e.value) and "CUDA toolkit" in str(e.value) and "PATH" in str(e.value)


def test_find_tools_on_the_path(monkeypatch, tmp_path):
    for tool in ("ncu", "nsys"):
        exe = tmp_path / tool
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu.find_ncu() == str(tmp_path / "ncu")
    assert nsys.find_nsys() == str(tmp_path / "nsys")


# ---------------------------------------------------------------- CellProfiler with a fake run


class FakeTools:
    """Stands in for the profilers: subprocess.run for ncu's import and nsys's export, and the engine's worker start
    (`start`) for a worker under ncu or nsys, from what each test asks for."""

    def __init__(
        self,
        outcome=None,
        ncu_output="==PROF== Connected to process 1\n",
        code=0,
        write_report=True,
        import_text=None,
        import_code=0,
        timeout=False,
        nsys_range=True,
    ):
        self.outcome, self.ncu_output, self.code = outcome, ncu_output, code
        self.write_report, self.import_text, self.import_code = write_report, import_text, import_code
        self.timeout, self.nsys_range = timeout, nsys_range
        self.calls, self.tasks = [], []

    def __call__(self, cmd, capture_output=None, text=None, timeout=None):
        assert capture_output and text and timeout and timeout > 0
        self.calls.append(list(cmd))
        if "--import" in cmd:
            return subprocess.CompletedProcess(cmd, self.import_code, self.import_text or "", "")
        assert cmd[1:2] == ["export"], cmd  # nsys export: the report must be where nsys wrote it
        rep, out = Path(cmd[-1]), Path(_after(cmd, "--output"))
        if not rep.exists():
            return subprocess.CompletedProcess(cmd, 1, "", f"ERROR: {rep} does not exist")
        make_nsys_db(out, self.range_name if self.nsys_range else "other")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def start(self, opts, gpu, prefix=()):
        self.calls.append(list(prefix))
        return _FakeWorker(self, list(prefix))


class _FakeWorker:
    """A worker under a profiler: writes the report the profiler would, answers the profile task."""

    def __init__(self, tools: FakeTools, prefix: list):
        self.tools, self.prefix, self.events = tools, prefix, []
        self.proc = SimpleNamespace(stdin=SimpleNamespace(close=lambda: None))

    def send(self, task):
        t = self.tools
        t.tasks.append(task)
        problem = Problem(**task["problem"])
        [variant] = task["items"]
        t.range_name = nvtx_ranges.range_name("profile", nvtx_ranges.cell_name(variant, problem))
        self.events = [{"ev": "begin", "item": variant, "phase": "check"}]
        self.events += [{"ev": "result", "item": variant, "rows": [t.outcome]}, {"ev": "done"}] if t.outcome else [None]
        if "--export" in self.prefix and t.write_report:
            Path(_after(self.prefix, "--export")).write_bytes(b"NCU report")
        if self.prefix[1:2] == ["profile"]:  # nsys adds .nsys-rep to --output
            Path(_after(self.prefix, "--output") + ".nsys-rep").write_bytes(b"nsys report")

    def next_event(self, timeout=None):
        assert timeout and timeout > 0
        if self.tools.timeout:
            raise TimeoutError
        return self.events.pop(0)

    def output(self):
        return self.tools.ncu_output

    def wait(self):
        return self.tools.code

    def death_reason(self):
        from gemmbench.engine.worker_process import exit_hint

        return f"worker died ({exit_hint(self.output(), self.wait())})"

    def close(self):
        pass

    def kill(self):
        pass


def ok_outcome(experts_hit=None, config=None):
    return {
        "status": "ok",
        "reason": None,
        "max_rel_err": 0.001,
        "config": config or {"algo": "cublas"},
        "experts_hit": experts_hit,
        "range": "r",
        "domain": "gemmbench",
    }


@pytest.fixture
def profiler(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/fake/bin/ncu")
    monkeypatch.setattr(nsys, "find_nsys", lambda: "/fake/bin/nsys")
    # the CSV path, even where Nsight Compute's ncu_report module is importable (tests/test_ncu_reader.py: that path)
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: None)

    def make(fake, **opts):
        o = profile.ProfileOptions(out_dir=tmp_path / "profiles", run_id="run 1", **opts)
        return profile.CellProfiler(o, run=fake, start=fake.start)

    return make


def test_profiler_success(profiler, tmp_path):
    fake = FakeTools(outcome=ok_outcome(), import_text=fixture_text())
    p = profiler(fake, extra_metrics=["lts__t_bytes.sum"], timeout_s=77)
    rows = p.cell(DENSE, registry.get("cublas_bf16"))
    assert len(rows) == 3
    assert [r["status"] for r in rows] == ["ok"] * 3 and all(r["reason"] is None for r in rows)
    assert [r["ncu_kernel"] for r in rows] == [GEMM_KERNEL, rows[1]["ncu_kernel"], ncu.SUM_KERNEL]
    total = rows[-1]
    assert total["ncu_kernels"] == 2
    report = Path(total["ncu_report"])
    assert report.name.endswith(".ncu-rep") and " " not in report.name
    assert report.parent == tmp_path / "profiles" / "run 1" and report.exists()
    assert {r["ncu_report"] for r in rows} == {str(report)}
    assert total["gemm"] == "attn_o" and total["M"] == 16 and total["variant"] == "cublas_bf16"
    assert total["routing"] is None and total["run_id"] == "run 1"
    assert total["profile_schema"] == side_tables.PROFILE_SCHEMA
    assert total["config"] == json.dumps({"algo": "cublas"}) and total["max_rel_err"] == 0.001
    assert total["bytes_min"] == metrics.bytes_min(DENSE) and total["flops"] == metrics.flops(DENSE)
    assert total["ncu_tensor_flops_ratio"] == pytest.approx(1.0)
    assert total["ncu_dram_traffic_ratio"] == pytest.approx((134_840_832 + 2_363_904) / metrics.bytes_min(DENSE))
    name = "profile cublas_bf16 attn_o bf16 M16 N8192 K8192"
    assert total["nvtx_range"] == name
    # two commands: ncu around a worker of the engine, then the import of its report
    assert len(fake.calls) == 2
    prof_cmd, import_cmd = fake.calls
    assert prof_cmd[0] == "/fake/bin/ncu" and _after(prof_cmd, "--export") == str(report)
    assert _after(prof_cmd, "--nvtx-include") == f"gemmbench@{name}/"
    assert _after(prof_cmd, "--clock-control") == "none"
    assert "lts__t_bytes.sum" in _after(prof_cmd, "--metrics").split(",")
    [task] = fake.tasks  # the worker's profile task: the cell, its inputs drawn as `run` draws them
    assert task["task"] == "profile" and task["items"] == ["cublas_bf16"]
    assert Problem(**task["problem"]) == DENSE and task["seed"] == cell_seed(0, DENSE)
    assert import_cmd == ncu.import_command("/fake/bin/ncu", report)


def test_profiler_moe_bytes_use_experts_hit(profiler):
    fake = FakeTools(outcome=ok_outcome(experts_hit=3, config={"BLOCK_M": 16}), import_text=fixture_text())
    rows = profiler(fake).cell(MOE, registry.get("triton_moe_row"))
    total = rows[-1]
    assert total["status"] == "ok" and total["routing"] == "uniform" and total["E"] == 8 and total["topk"] == 2
    expected = metrics.bytes_min(MOE, 3)
    assert expected != metrics.bytes_min(MOE, 8)
    assert total["bytes_min"] == expected
    assert total["ncu_dram_traffic_ratio"] == pytest.approx((134_840_832 + 2_363_904) / expected)
    assert total["ncu_tensor_flops_ratio"] == pytest.approx(2**31 / (2 * 16 * 2 * 1024 * 512))
    assert "E8 top2" in total["nvtx_range"] and total["config"] == '{"BLOCK_M": 16}'


def test_profiler_dotted_gemm_ids_get_their_own_reports(profiler):
    """A GEMM id may contain '.' (YAML ids are free text): each cell keeps its own report."""
    reports = []
    for m in (16, 32):
        fake = FakeTools(outcome=ok_outcome(), import_text=fixture_text())
        rows = profiler(fake).cell(Problem("s", "layers.0.mlp", m, 64, 64, "bf16"), registry.get("cublas_bf16"))
        assert rows[-1]["status"] == "ok", rows[-1]["reason"]
        reports.append(Path(rows[-1]["ncu_report"]))
    assert reports[0] != reports[1]
    assert all(r.name.endswith(f"M{m}_N64_K64.ncu-rep") for r, m in zip(reports, (16, 32), strict=False))


def test_profiler_wrong_cell_is_not_profiled(profiler):
    outcome = dict(ok_outcome(), status="wrong", reason="max rel err 0.5 > 0.02", max_rel_err=0.5)
    fake = FakeTools(outcome=outcome, write_report=False)
    rows = profiler(fake).cell(DENSE, registry.get("cublas_bf16"))
    assert len(rows) == 1
    r = rows[0]
    assert r["status"] == "wrong" and r["reason"] == "max rel err 0.5 > 0.02" and r["max_rel_err"] == 0.5
    assert r["config"] == json.dumps({"algo": "cublas"})
    assert "ncu_kernel" not in r
    assert len(fake.calls) == 1 and not any("--import" in c for c in fake.calls)


def test_profiler_crash_without_result(profiler):
    out = "==PROF== Connected to process 9\nTraceback (most recent call last):\n  File x\nRuntimeError: boom\n"
    fake = FakeTools(outcome=None, ncu_output=out, code=1, write_report=False)
    rows = profiler(fake).cell(DENSE, registry.get("cublas_bf16"))
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert "exit code 1" in rows[0]["reason"] and "RuntimeError: boom" in rows[0]["reason"], rows[0]["reason"]
    assert len(fake.calls) == 1


def test_profiler_no_kernels_in_range(profiler):
    fake = FakeTools(
        outcome=ok_outcome(), ncu_output="==PROF== x\n==WARNING== No kernels were profiled.\n", write_report=False
    )
    rows = profiler(fake).cell(DENSE, registry.get("cublas_bf16"))
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert "'profile cublas_bf16 attn_o bf16 M16 N8192 K8192'" in rows[0]["reason"]
    assert len(fake.calls) == 1


def test_profiler_report_without_kernels(profiler):
    fake = FakeTools(outcome=ok_outcome(), import_text="==PROF== nothing\n")
    rows = profiler(fake).cell(DENSE, registry.get("cublas_bf16"))
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert "NVTX range 'profile cublas_bf16" in rows[0]["reason"] and rows[0]["ncu_report"].endswith(".ncu-rep")


def test_profiler_counter_permission_stops_the_sweep(profiler):
    out = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"
    fake = FakeTools(outcome=ok_outcome(), ncu_output=out, write_report=False)
    with pytest.raises(profile.ProfileError, match="NVreg_RestrictProfilingToAdminUsers"):
        profiler(fake).cell(DENSE, registry.get("cublas_bf16"))


def test_profiler_timeout(profiler):
    fake = FakeTools(timeout=True)
    rows = profiler(fake, timeout_s=42).cell(DENSE, registry.get("cublas_bf16"))
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert "timeout after 42 s (before start)" in rows[0]["reason"]


@pytest.mark.parametrize("problem", [DENSE, Problem("s", "layers.0.attn_o", 16, 64, 64, "bf16")])
def test_profiler_nsys_only(profiler, problem):
    fake = FakeTools(outcome=ok_outcome())
    rows = profiler(fake, use_ncu=False, use_nsys=True).cell(problem, registry.get("cublas_bf16"))
    assert len(rows) == 1
    r = rows[0]
    assert r["status"] == "ok", r["reason"]
    assert r["nsys_kernels"] == 2 and r["nsys_range_us"] == pytest.approx(10.0)
    assert r["nsys_report"].endswith(".nsys-rep") and Path(r["nsys_report"]).exists()
    assert "ncu_kernel" not in r and [c[1] for c in fake.calls] == ["profile", "export"]
    assert fake.calls[0][0] == "/fake/bin/nsys" and fake.tasks[0]["task"] == "profile"


def test_profiler_nsys_without_the_range(profiler):
    fake = FakeTools(outcome=ok_outcome(), nsys_range=False)
    rows = profiler(fake, use_ncu=False, use_nsys=True).cell(DENSE, registry.get("cublas_bf16"))
    assert rows[0]["status"] == "error" and "no NVTX range 'profile cublas_bf16" in rows[0]["reason"]


# ---------------------------------------------------------------- profile tables


def _profile_rows():
    fake_base = dict(
        run_id="p1",
        profile_schema=side_tables.PROFILE_SCHEMA,
        timestamp=TIMESTAMP,
        shape_set="llama70b-attn",
        gemm="attn_o",
        M=16,
        N=8192,
        K=8192,
        E=1,
        topk=1,
        routing=None,
        tp=1,
        dtype="bf16",
        variant="cublas_bf16",
        status="ok",
        reason=None,
        ncu_report="r.ncu-rep",
    )
    rows = [dict(fake_base, **k) for k in ncu.cell_rows(fixture_kernels(), _dense_model())]
    rows.append(dict(fake_base, M=32, status="error", reason="boom"))
    return rows


def test_write_and_load_profiles(tmp_path):
    rows = _profile_rows()
    path = tmp_path / "p" / "p1-profile.parquet"
    side_tables.write_profile_table(path, rows)
    df = side_tables.load_profile_tables(path)
    assert len(df) == 4
    assert df["ncu_kernel"].tolist()[:3] == [GEMM_KERNEL, rows[1]["ncu_kernel"], ncu.SUM_KERNEL]
    assert df["status"].tolist() == ["ok", "ok", "ok", "error"] and df["reason"].iloc[3] == "boom"
    assert df["ncu_duration_ns"].iloc[2] == pytest.approx(57_056)
    assert pd.isna(df["ncu_duration_ns"].iloc[3])
    assert (df["profile_schema"] == side_tables.PROFILE_SCHEMA).all()
    assert df["M"].tolist() == [16, 16, 16, 32]
    # a folder of profile tables reads too
    side_tables.write_profile_table(tmp_path / "p" / "p2-profile.parquet", rows[:1])
    assert len(side_tables.load_profile_tables([tmp_path / "p"])) == 5


def test_load_profiles_refuses_a_run_file(tmp_path):
    path = tmp_path / "run.parquet"
    store.write_rows(path, [_run_row()])
    with pytest.raises(store.StoreError, match="not a gemmbench profile table"):
        side_tables.load_profile_tables([path])
    bad = tmp_path / "junk.parquet"
    bad.write_text("not parquet")
    with pytest.raises(store.StoreError, match="not a readable Parquet file"):
        side_tables.load_profile_tables(bad)


def _run_row(**over):
    r = dict(
        run_id="run1",
        shape_set="llama70b-attn",
        gemm="attn_o",
        M=16,
        N=8192,
        K=8192,
        E=1,
        topk=1,
        tp=1,
        dtype="bf16",
        variant="cublas_bf16",
        status="ok",
        time_us_median=60.0,
    )
    r.update(over)
    return run_row(**r)


def _cell_profile(ts: str, duration: float, status="ok", **cell) -> list[dict]:
    """A cell's profile rows as CellProfiler makes them: two kernels and their sum."""
    base = dict(
        run_id=f"p{ts}",
        profile_schema=side_tables.PROFILE_SCHEMA,
        timestamp=ts,
        shape_set="llama70b-attn",
        gemm="attn_o",
        M=16,
        N=8192,
        K=8192,
        E=1,
        topk=1,
        routing=None,
        tp=1,
        ep=1,
        dp=1,
        layout="vllm",
        dtype="bf16",
        scaling="none",
        fp8_accum="none",
        variant="cublas_bf16",
        status=status,
        reason=None if status == "ok" else "x",
    )
    base.update(cell)
    if status != "ok":
        return [base]
    return [
        dict(base, ncu_kernel="gemm", ncu_kernels=1, ncu_duration_ns=duration - 1, ncu_l2_hit_pct=1.0),
        dict(base, ncu_kernel="reduce", ncu_kernels=1, ncu_duration_ns=1.0, ncu_l2_hit_pct=2.0),
        dict(base, ncu_kernel=ncu.SUM_KERNEL, ncu_kernels=2, ncu_duration_ns=duration, ncu_l2_hit_pct=3.0),
    ]


@pytest.fixture
def runs(tmp_path):
    path = tmp_path / "run.parquet"
    store.write_rows(
        path,
        [
            _run_row(),  # dense, profiled twice
            _run_row(M=32),  # dense, never profiled
            _run_row(gemm="moe_w13", N=1024, K=512, E=8, topk=2, routing="uniform", variant="triton_moe_row"),
        ],
    )
    df = store.load([path])
    assert pd.isna(df["routing"].iloc[0]) and df["routing"].iloc[2] == "uniform"
    return df


def test_join_takes_the_latest_summed_row(runs, tmp_path):
    moe = dict(gemm="moe_w13", N=1024, K=512, E=8, topk=2, routing="uniform", variant="triton_moe_row")
    rows = (
        _cell_profile(stamp(days=1), 200.0)  # newer
        + _cell_profile(stamp(), 100.0)  # older, written after
        + _cell_profile(stamp(days=2), 0.0, status="error")  # newest, but failed
        + _cell_profile(stamp(), 500.0, **moe)
        + _cell_profile(stamp(), 700.0, **dict(moe, routing="skewed"))
    )  # another cell
    path = tmp_path / "prof.parquet"
    side_tables.write_profile_table(path, rows)
    joined = profile.join(runs, side_tables.load_profile_tables(path))
    assert len(joined) == len(runs) == 3
    assert joined["M"].tolist() == [16, 32, 16] and joined["gemm"].tolist() == runs["gemm"].tolist()
    d = joined["ncu_duration_ns"].tolist()
    assert d[0] == 200.0 and math.isnan(d[1]) and d[2] == 500.0
    assert joined["ncu_kernel"].tolist()[0] == ncu.SUM_KERNEL and joined["ncu_kernels"].tolist()[2] == 2
    assert joined["ncu_l2_hit_pct"].iloc[0] == 3.0
    assert list(joined.columns[: len(runs.columns)]) == list(runs.columns)
    assert "_key" not in joined.columns and "timestamp" not in set(joined.columns) - set(runs.columns)
    assert joined["time_us_median"].tolist() == [60.0, 60.0, 60.0]


def test_join_with_no_successful_profile(runs, tmp_path):
    path = tmp_path / "prof.parquet"
    side_tables.write_profile_table(path, _cell_profile(TIMESTAMP, 0.0, status="error", ncu_report="r.ncu-rep"))
    joined = profile.join(runs, side_tables.load_profile_tables(path))
    assert len(joined) == 3 and joined["ncu_report"].isna().all()


# ---------------------------------------------------------------- nsys

RANGE = "profile cublas_bf16 attn_o bf16 M16 N8192 K8192"


def make_nsys_db(path: Path, range_name: str) -> None:
    """An nsys SQLite export: one push/pop range on thread 7 from 1000 to 11000 ns."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,
                                  textId INTEGER, globalTid INTEGER, domainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
                                                  globalTid INTEGER, correlationId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, correlationId INTEGER);
    """)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, range_name), (2, "warmup x")])
    con.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (500, 600, 34, range_name, None, 7, 0),  # a mark with the same text: not a push/pop range
            (1000, 11000, 59, None, 1, 7, 0),  # the range, its text registered
            (20000, 30000, 59, None, 2, 7, 0),  # another range
        ],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)",
        [
            (2000, 2100, 7, 1),  # inside
            (5000, 5200, 7, 2),  # inside
            (12000, 12100, 7, 3),  # after the range
            (3000, 3100, 8, 4),  # inside the window, another thread
            (21000, 21100, 7, 5),  # in the other range
        ],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?)",
        [
            (3000, 4000, 1),
            (6000, 8500, 2),
            (12500, 13000, 3),
            (3500, 3700, 4),
            (22000, 29000, 5),
        ],
    )
    con.commit()
    con.close()


def test_nsys_range_columns(tmp_path):
    db = tmp_path / "r.sqlite"
    make_nsys_db(db, RANGE)
    cols = nsys.range_columns(db, RANGE)
    assert cols["nsys_kernels"] == 2
    assert cols["nsys_kernel_us"] == pytest.approx((1000 + 2500) / 1e3)
    assert cols["nsys_range_us"] == pytest.approx(10.0)
    assert cols["nsys_launch_overhead_us"] == pytest.approx(10.0 - 3.5)
    assert cols["nsys_gpu_span_us"] == pytest.approx((8500 - 3000) / 1e3)
    assert nsys.range_columns(db, "profile no such cell") is None
    assert nsys.range_columns(db, "warmup x")["nsys_kernels"] == 1


def test_nsys_range_text_inline_and_no_kernels(tmp_path):
    db = tmp_path / "inline.sqlite"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, textId INTEGER,"
        " globalTid INTEGER, domainId INTEGER)"
    )
    con.execute("INSERT INTO NVTX_EVENTS VALUES (100, 2100, 59, ?, NULL, 1, 0)", (RANGE,))
    con.commit()
    con.close()
    cols = nsys.range_columns(db, RANGE)
    assert cols["nsys_kernels"] == 0 and cols["nsys_range_us"] == pytest.approx(2.0)
    assert cols["nsys_launch_overhead_us"] == pytest.approx(2.0) and cols["nsys_gpu_span_us"] is None


def test_nsys_commands():
    cmd = nsys.profile_command("/opt/nsys", Path("/o/cell"), TARGET)
    assert cmd[:2] == ["/opt/nsys", "profile"] and _after(cmd, "--trace") == "cuda,nvtx"
    assert _after(cmd, "--output") == "/o/cell" and cmd[-len(TARGET) :] == TARGET
    assert _after(cmd, "--sample") == "none"
    exp = nsys.export_command("nsys", Path("/o/cell.nsys-rep"), Path("/o/cell.sqlite"))
    assert exp[:2] == ["nsys", "export"] and _after(exp, "--type") == "sqlite"
    assert _after(exp, "--output") == "/o/cell.sqlite" and exp[-1] == "/o/cell.nsys-rep"


# ---------------------------------------------------------------- the command


def invoke(*args):
    return CliRunner().invoke(app, ["profile", *map(str, args)])


def one_error(result, code=2) -> str:
    err = ANSI.sub("", result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, (result.exit_code, err)
    assert "Traceback" not in err and "Traceback" not in result.stdout
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shapes", "smoke"], "say which profiler: --ncu"),
        (["--ncu", "--shapes", "nosuchset"], "nosuchset: no such built-in shape set"),
        (["--nsys", "--shapes", "smoke", "--cell-timeout", "-5"], "--cell-timeout must be a number of seconds >= 0"),
        (["--ncu", "--shapes", "smoke", "--cell-timeout", "inf"], "--cell-timeout must be a number of seconds >= 0"),
        (["--ncu", "--shapes", "smoke", "--out", "x.parquet"], "--out x.parquet: give a folder"),
        (["--ncu", "--shapes", "smoke", "--dtype", "fp4"], "--dtype 'fp4'"),
        (["--ncu", "--shapes", "smoke", "--variants", "nosuch_*"], "nosuch_*"),
    ],
)
def test_cli_bad_inputs(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert message in one_error(invoke(*args))


def test_cli_bad_join_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.parquet").write_text("not parquet")
    line = one_error(invoke("--ncu", "--shapes", "smoke", "--join", tmp_path / "junk.parquet"))
    assert line.startswith("error: --join: ") and "not a readable Parquet file" in line
    line = one_error(invoke("--ncu", "--shapes", "smoke", "--join", tmp_path / "none.parquet"))
    assert "no such file or folder" in line


def test_cli_needs_a_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = one_error(invoke("--ncu", "--shapes", "smoke"), code=1)
    assert "needs a CUDA GPU" in line
    assert not (tmp_path / "profiles").exists()


def _pretend_gpu(monkeypatch):
    import torch

    from gemmbench.measure import device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device, "provenance", lambda: {"device": "cuda", "gpu": "Fake H100"})


def test_cli_without_ncu(tmp_path, monkeypatch):
    _pretend_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    _no_tools(monkeypatch, tmp_path)
    line = one_error(invoke("--ncu", "--shapes", "smoke"), code=1)
    assert "ncu (Nsight Compute) is not installed" in line


def _fake_profiler(monkeypatch, fake):
    real = profile.CellProfiler
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/fake/bin/ncu")
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: None)  # the CSV path (as in `profiler`)
    monkeypatch.setattr(profile, "CellProfiler", lambda opts: real(opts, run=fake, start=fake.start))


def test_cli_profiles_and_joins(tmp_path, monkeypatch):
    _pretend_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    fake = FakeTools(outcome=ok_outcome(), import_text=fixture_text())
    _fake_profiler(monkeypatch, fake)
    run_file = tmp_path / "run.parquet"
    store.write_rows(
        run_file,
        [
            _run_row(shape_set="smoke", gemm="smoke_square", M=16, N=64, K=64),
            _run_row(shape_set="smoke", gemm="smoke_square", M=1, N=64, K=64),
        ],
    )
    r = invoke(
        "--ncu",
        "--shapes",
        "smoke",
        "--variants",
        "cublas_bf16",
        "--dtype",
        "bf16",
        "--m",
        "16",
        "--out",
        tmp_path / "out",
        "--join",
        run_file,
    )
    err = ANSI.sub("", r.stderr)
    assert r.exit_code == 0, (r.exit_code, err, r.exception)
    assert "Traceback" not in err
    assert "3 of 3 cells profiled" in err
    assert len(fake.calls) == 6  # ncu and its import, per cell
    profiles = list((tmp_path / "out").glob("*-profile.parquet"))
    assert len(profiles) == 1
    df = side_tables.load_profile_tables(profiles)
    assert len(df) == 9 and (df["ncu_kernel"] == ncu.SUM_KERNEL).sum() == 3
    assert sorted(df["gemm"].unique()) == ["smoke_deep", "smoke_square", "smoke_tails"]
    reports = {Path(p) for p in df["ncu_report"]}
    assert len(reports) == 3 and all(p.exists() for p in reports)
    joined = pd.read_parquet(next((tmp_path / "out").glob("*-joined.parquet")))
    assert len(joined) == 2 and joined["M"].tolist() == [16, 1]
    assert joined["ncu_duration_ns"].iloc[0] == pytest.approx(57_056) and pd.isna(joined["ncu_duration_ns"].iloc[1])
    assert "smoke_square" in r.stdout and "ok" in r.stdout


def test_cli_counter_permission(tmp_path, monkeypatch):
    _pretend_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    out = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"
    _fake_profiler(monkeypatch, FakeTools(outcome=ok_outcome(), ncu_output=out, write_report=False))
    r = invoke("--ncu", "--shapes", "smoke", "--variants", "cublas_bf16", "--dtype", "bf16", "--m", "16")
    err = ANSI.sub("", r.stderr)
    assert r.exit_code == 1 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "NVreg_RestrictProfilingToAdminUsers" in lines[0]


def test_cli_every_cell_failed(tmp_path, monkeypatch):
    _pretend_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    outcome = dict(ok_outcome(), status="wrong", reason="max rel err 0.5", max_rel_err=0.5)
    _fake_profiler(monkeypatch, FakeTools(outcome=outcome, write_report=False))
    r = invoke("--ncu", "--shapes", "smoke", "--variants", "cublas_bf16", "--dtype", "bf16", "--m", "16")
    assert r.exit_code == 1, ANSI.sub("", r.stderr)
    assert "0 of 3 cells profiled" in ANSI.sub("", r.stderr) and "wrong" in r.stdout


def test_real_base_units_export_of_a_two_kernel_cell():
    """`gemmbench profile --ncu` on the H100 (cuBLAS bf16, attn_qkv 16x10240x8192), exported with
    --print-units base: "byte", "ns", "hz", thousands separators.  cuBLAS ran a split-K GEMM and its reduce
    kernel: two kernel rows and a summed row whose DRAM reads are the weight's bytes (within 1%)."""
    text = (Path(__file__).parent / "fixtures" / "ncu-raw-h100-baseunits.csv").read_text()
    ks = ncu.parse_raw_csv(text)
    assert [k["kernel"].split("<")[0] for k in ks] == [
        "nvjet_sm90_tst_256x16_64x6_4x1_v_bz_splitK_TNT",
        "void cublasLt::splitKreduce_kernel",
    ]
    assert ks[0]["gpu__time_duration.sum"] == 65_184 and ks[1]["gpu__time_duration.sum"] == 4_448  # "65,184" ns
    assert ks[0]["dram__bytes_read.sum"] == 168_060_928 and ks[0]["dram__bytes.sum.peak_sustained"] == 1280
    assert ks[0]["dram__cycles_elapsed.avg.per_second"] == pytest.approx(2_617_623_956.80)  # hz
    weight = 10240 * 8192 * 2
    rows = ncu.cell_rows(ks, ncu.Model(flops=2 * 16 * 10240 * 8192, bytes_min=weight + 16 * 8192 * 2 + 16 * 10240 * 2))
    total = rows[-1]
    assert total["ncu_kernel"] == ncu.SUM_KERNEL and total["ncu_kernels"] == 2
    assert total["ncu_duration_ns"] == 65_184 + 4_448
    assert abs(total["ncu_dram_read_bytes"] / weight - 1) < 0.01
    assert total["ncu_tensor_flops_ratio"] == pytest.approx(1.0)  # no padding: the 16-row tile fits M = 16
    assert total["ncu_grid_size"] is None and rows[0]["ncu_grid_size"] == 80 and rows[1]["ncu_grid_size"] == 320


def test_extra_metrics_become_columns():
    """--metrics names: a column per metric on each kernel row; the summed row adds up the `.sum` ones only
    (a `.max` or a percentage cannot be summed over kernels)."""
    ks = fixture_kernels()
    extra = ["smsp__inst_executed_op_global_ld.sum", "lts__t_sector_hit_rate.pct", "no_such__metric.sum"]
    rows = ncu.cell_rows(ks, _dense_model(), extra)
    assert (
        rows[0]["smsp__inst_executed_op_global_ld.sum"] == 512
        and rows[1]["smsp__inst_executed_op_global_ld.sum"] == 513
    )
    assert rows[-1]["smsp__inst_executed_op_global_ld.sum"] == 1025
    assert (
        rows[0]["lts__t_sector_hit_rate.pct"] == pytest.approx(8.443056)
        and rows[-1]["lts__t_sector_hit_rate.pct"] is None
    )
    assert rows[0]["no_such__metric.sum"] is None and rows[-1]["no_such__metric.sum"] is None


def test_a_profile_table_of_another_version_is_refused_in_one_line(tmp_path):
    """Side tables have no upgrade either: a table of profile_schema 1 (before run format 1) is refused, by plot too."""
    path = tmp_path / "old-prof.parquet"
    side_tables.write_profile_table(path, [dict(row, profile_schema=1) for row in _cell_profile(stamp(), 5.0)])
    with pytest.raises(store.StoreError) as e:
        side_tables.load_profile_tables([path])
    assert str(e.value) == (f"{path}: profile table of another gemmbench version (profile_schema [1], this one "
                            f"reads {side_tables.PROFILE_SCHEMA})")  # fmt: skip
    from gemmbench.plot import data as plotdata

    with pytest.raises(store.StoreError, match="profile table of another gemmbench version"):
        plotdata.read([path])


def test_profiled_workers_get_the_import_config_environment(monkeypatch, tmp_path):
    """`profile --import-config`: each cell's worker is started with the environment that registers the imported
    variants there too (engine_import.worker_env), as `run`'s workers are."""
    seen = {}

    class Pool:
        def __init__(self, options, sink, start=None):
            seen["env"] = options.env

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def run(self, cells):
            seen["cells"] = len(cells)

    monkeypatch.setattr(profile, "Pool", Pool)
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/fake/bin/ncu")
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: None)
    env = {"GEMMBENCH_IMPORT": '["vllm:/x/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"]'}
    profiler = profile.CellProfiler(profile.ProfileOptions(out_dir=tmp_path, run_id="r", env=env))
    profiler._child([], Problem("s", "g", 16, 64, 64, "bf16"), registry.get("cublas_bf16"))
    assert seen == {"env": env, "cells": 1}


def test_cli_import_config_of_a_missing_file_is_one_line(tmp_path):
    line = one_error(invoke("--ncu", "--shapes", "smoke", "--import-config", f"vllm:{tmp_path / 'E=8,N=7168,x.json'}"))
    assert "E=8,N=7168,x.json" in line
