"""Nsight Compute reports read through the `ncu_report` module and through `ncu --import --csv` give the same table.

`ncu_report` ships with Nsight Compute (extras/python) and is not installable here, so a fake module stands in for it,
with the shape of Nsight Compute's Python Report Interface and only the calls ncu_reader makes: load_report(path) ->
context; num_ranges(), range_by_idx(i); num_actions(), action_by_idx(j); name(IAction.NameBase_DEMANGLED),
metric_names(), metric_by_name(name) (None where the report lacks it); kind() (IMetric.ValueKind_*), as_double(),
as_uint64(), unit().  Its numbers are the committed H100 exports' (tests/fixtures/ncu-raw-h100-*.csv), read here with
the csv module: what a report holds is the export's cells, thousands separators and all, before gemmbench reads them."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
from test_profile import DENSE, FakeTools, ok_outcome

from gemmbench import registry
from gemmbench.profile import ncu, ncu_reader
from gemmbench.profile import sweep as profile
from gemmbench.results import metrics

FIXTURES = Path(__file__).parent / "fixtures"
EXPORTS = ["ncu-raw-h100-autounits.csv", "ncu-raw-h100-baseunits.csv"]

# Nsight Compute's enumerators, as the real module names them (their values are the fake's own)
IMetric = SimpleNamespace(ValueKind_UNKNOWN=0, ValueKind_ANY=1, ValueKind_STRING=2, ValueKind_FLOAT=3,
                          ValueKind_DOUBLE=4, ValueKind_UINT32=5, ValueKind_UINT64=6)  # fmt: skip
IAction = SimpleNamespace(NameBase_FUNCTION=0, NameBase_DEMANGLED=1, NameBase_MANGLED=2)


class FakeMetric:
    def __init__(self, text: str, unit: str):
        self._unit = unit
        number = text.replace(",", "")
        if number.isdigit():  # a count: the report keeps an integer
            self._kind, self._value = IMetric.ValueKind_UINT64, int(number)
        else:
            try:
                self._kind, self._value = IMetric.ValueKind_DOUBLE, float(number)
            except ValueError:  # "NVIDIA H100 80GB HBM3", "No-CC"
                self._kind, self._value = IMetric.ValueKind_STRING, text

    def kind(self):
        return self._kind

    def as_double(self) -> float:
        assert self._kind in (IMetric.ValueKind_FLOAT, IMetric.ValueKind_DOUBLE)
        return self._value

    def as_uint64(self) -> int:
        assert self._kind in (IMetric.ValueKind_UINT32, IMetric.ValueKind_UINT64)
        return self._value

    def unit(self) -> str:
        return self._unit


class FakeAction:
    def __init__(self, name: str, metrics_: dict):
        self._name, self._metrics = name, metrics_

    def name(self, base):
        assert base == IAction.NameBase_DEMANGLED  # the CSV's "Kernel Name" is the demangled name
        return self._name

    def metric_names(self):
        return set(self._metrics)

    def metric_by_name(self, name):
        return self._metrics.get(name)


class FakeRange:
    def __init__(self, actions):
        self._actions = actions

    def num_actions(self):
        return len(self._actions)

    def action_by_idx(self, i):
        return self._actions[i]


class FakeContext:
    def __init__(self, ranges):
        self._ranges = ranges

    def num_ranges(self):
        return len(self._ranges)

    def range_by_idx(self, i):
        return self._ranges[i]


def fake_module(export: str, loaded: Optional[list] = None) -> SimpleNamespace:
    """ncu_report over one export: each kernel row an action with its metrics (a cell left empty is a metric the report
    does not hold), one range per kernel, so that kernels are numbered across ranges."""
    rows = list(csv.reader(io.StringIO((FIXTURES / export).read_text())))
    header, units = rows[0], rows[1]
    ranges = []
    for row in rows[2:]:
        cells = dict(zip(header, row, strict=True))
        held = {h: FakeMetric(v, u) for h, v, u in zip(header, row, units, strict=True) if "__" in h and v.strip()}
        ranges.append(FakeRange([FakeAction(cells["Kernel Name"], held)]))

    def load_report(path):
        if loaded is not None:
            loaded.append(path)
        return FakeContext(ranges)

    return SimpleNamespace(load_report=load_report, IMetric=IMetric, IAction=IAction)


def _held(kernels: list[dict]) -> list[dict]:
    return [{k: v for k, v in kernel.items() if v is not None} for kernel in kernels]


@pytest.mark.parametrize("export", EXPORTS)
def test_both_paths_read_the_same_kernels_and_table(export):
    via_module = ncu_reader.kernels_from_module(fake_module(export), Path("r.ncu-rep"))
    via_csv = ncu.parse_raw_csv((FIXTURES / export).read_text())
    assert len(via_module) == len(via_csv) == 2
    assert [k["id"] for k in via_module] == [0, 1] and [k["kernel"] for k in via_module] == [
        k["kernel"] for k in via_csv
    ]
    assert _held(via_module) == _held(via_csv)  # every number, in base units, exactly
    model = ncu.Model(metrics.flops(DENSE), metrics.bytes_min(DENSE))
    assert ncu.cell_rows(via_module, model) == ncu.cell_rows(via_csv, model)


def test_module_values_in_base_units():
    """The autounits export holds prefixed units; its first kernel, converted by hand from the file's cells."""
    [gemm, _] = ncu_reader.kernels_from_module(fake_module(EXPORTS[0]), Path("r.ncu-rep"))
    assert gemm["gpu__time_duration.sum"] == pytest.approx(50.208 * 1e3)  # "50.208000" usecond -> ns
    assert gemm["dram__bytes_read.sum"] == pytest.approx(134.513152e6)  # "134.513152" Mbyte
    assert gemm["dram__cycles_elapsed.avg.per_second"] == pytest.approx(2.617208e9)  # "2.617208" Ghz
    assert gemm["launch__registers_per_thread"] == 168  # an integer count, no prefix
    assert gemm["device__attribute_display_name"] is None  # a string is no number


def _child(cmd) -> bool:
    """Whether cmd is read_kernels' child reader (python -m gemmbench.profile.ncu_reader REPORT NCU)."""
    return cmd[1:3] == ["-m", "gemmbench.profile.ncu_reader"]


def test_read_kernels_prefers_the_module_in_a_child_process(tmp_path, monkeypatch, capsys):
    """The child prints the kernels ncu_report read as JSON (main(), run here in-process with a fake module); the
    parent takes them and never runs `ncu --import`."""
    loaded: list = []
    report = tmp_path / "cell.ncu-rep"
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: fake_module(EXPORTS[1], loaded))
    assert ncu_reader.main([str(report), "ncu"]) == 0
    printed = capsys.readouterr().out
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        assert _child(cmd), "ncu --import ran although ncu_report read the report"
        return subprocess.CompletedProcess(cmd, 0, printed, "")

    kernels, reader = ncu_reader.read_kernels(report, "ncu", True, run, 60)
    assert reader == "ncu_report" and loaded == [str(report)] and len(kernels) == 2 and len(calls) == 1
    assert kernels == json.loads(json.dumps(ncu_reader.kernels_from_module(fake_module(EXPORTS[1]), report)))


class _Broken:
    """An ncu_report that cannot read the report (one older than the ncu that wrote it)."""

    @staticmethod
    def load_report(path):
        raise RuntimeError("unsupported report version")


def test_the_child_exits_1_where_the_module_cannot_read_the_report(monkeypatch, capsys):
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: _Broken)
    assert ncu_reader.main(["r.ncu-rep", "ncu"]) == 1
    assert "unsupported report version" in capsys.readouterr().err
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: None)
    assert ncu_reader.main(["r.ncu-rep", "ncu"]) == 1


# module None: no ncu_report; -11: the child crashed (Nsight Compute 2025.3.1's module on the H100 machine);
# 1: it could not read the report
@pytest.mark.parametrize("module, child_rc", [(None, None), (_Broken, -11), (_Broken, 1)],
                         ids=["no-module", "child-crashes", "child-fails"])  # fmt: skip
def test_read_kernels_falls_back_to_the_csv(module, child_rc):
    export = (FIXTURES / EXPORTS[1]).read_text()
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if _child(cmd):
            return subprocess.CompletedProcess(cmd, child_rc, "", "Segmentation fault")
        return subprocess.CompletedProcess(cmd, 0, export, "")

    kernels, reader = ncu_reader.read_kernels(Path("r.ncu-rep"), "/x/ncu", module is not None, run, 60)
    csv_call = ncu.import_command("/x/ncu", Path("r.ncu-rep"))
    assert reader == "csv" and calls[-1] == csv_call and len(calls) == (1 if module is None else 2)
    assert kernels == ncu.parse_raw_csv(export)


def _nsight(folder: Path, version: str) -> Path:
    extras = folder / "extras" / "python"
    extras.mkdir(parents=True)
    (extras / "ncu_report.py").write_text(f"VERSION = {version!r}\n")
    return extras


@pytest.fixture
def clean_import(monkeypatch):
    """sys.path and sys.modules as they were after the test: load_module appends to one and fills the other."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    yield
    sys.modules.pop("ncu_report", None)


def test_module_found_in_the_cuda_toolkit(tmp_path, clean_import):
    """<cuda>/bin/ncu is a script; its Nsight Compute is <cuda>/nsight-compute-<version>/: the newest one."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ncu").write_text("#!/bin/sh\n")
    _nsight(tmp_path / "nsight-compute-2024.1.0", "2024.1.0")
    newest = _nsight(tmp_path / "nsight-compute-2025.3.1", "2025.3.1")
    _nsight(tmp_path / "nsight-compute-2025.10.0", "2025.10.0")  # numbers, not text: 10 > 3
    dirs = ncu_reader.module_dirs(str(tmp_path / "bin" / "ncu"))
    assert [d.parent.parent.name for d in dirs] == ["nsight-compute-2025.10.0", newest.parent.parent.name,
                                                    "nsight-compute-2024.1.0"]  # fmt: skip
    assert ncu_reader.load_module(str(tmp_path / "bin" / "ncu")).VERSION == "2025.10.0"


def test_module_found_in_the_standalone_install_when_ncu_is_the_toolkits_script(tmp_path, clean_import):
    """The H100 machine: /usr/local/cuda/bin/ncu (a script; no nsight-compute-* beside the toolkit) and the module in
    /opt/nvidia/nsight-compute/<version>/extras/python: found there, the newest first."""
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "ncu").write_text("#!/bin/sh\n")
    opt = tmp_path / "opt" / "nvidia" / "nsight-compute"
    _nsight(opt / "2025.1.0", "2025.1.0")
    _nsight(opt / "2025.3.1", "2025.3.1")
    dirs = ncu_reader.module_dirs(str(tmp_path / "cuda" / "bin" / "ncu"), standalone=opt)
    assert [d.parent.parent.name for d in dirs] == ["2025.3.1", "2025.1.0"]
    assert ncu_reader.module_dirs(str(tmp_path / "cuda" / "bin" / "ncu"), standalone=tmp_path / "none") == []


def test_module_found_beside_a_linked_standalone_ncu(tmp_path, clean_import):
    tool = tmp_path / "nsight-compute" / "2025.3.1"
    _nsight(tool, "standalone")
    (tool / "ncu").write_text("#!/bin/sh\n")
    (tmp_path / "ncu").symlink_to(tool / "ncu")  # /usr/local/bin/ncu -> the install
    assert ncu_reader.load_module(str(tmp_path / "ncu")).VERSION == "standalone"


def test_no_module_leaves_the_path_as_it_was(tmp_path, clean_import):
    (tmp_path / "bin").mkdir()
    broken = _nsight(tmp_path / "nsight-compute-2025.3.1", "x")
    (broken / "ncu_report.py").write_text("import _ncu_report_missing_so\n")  # its compiled half cannot load
    before = list(sys.path)
    assert ncu_reader.load_module(str(tmp_path / "bin" / "ncu")) is None
    assert ncu_reader.load_module(None) is None
    assert sys.path == before


def test_profiler_reads_through_the_module(monkeypatch, tmp_path):
    """A profiled cell's rows through ncu_report: the CSV path's rows (tests/test_profile.py), `ncu_reader` aside,
    and no `ncu --import`."""
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/fake/bin/ncu")
    rows = {}
    for reader, module in (("csv", None), ("ncu_report", fake_module(EXPORTS[0]))):
        monkeypatch.setattr(ncu_reader, "load_module", lambda exe, m=module: m)
        fake = FakeTools(outcome=ok_outcome(), import_text=(FIXTURES / EXPORTS[0]).read_text())

        def run(cmd, fake=fake, **kwargs):  # the child reader runs here, in-process, on the fake module
            if not _child(cmd):
                return fake(cmd, **kwargs)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = ncu_reader.main(cmd[3:])
            return subprocess.CompletedProcess(cmd, rc, out.getvalue(), "")

        opts = profile.ProfileOptions(out_dir=tmp_path / reader, run_id="r")
        rows[reader] = profile.CellProfiler(opts, run=run, start=fake.start).cell(DENSE, registry.get("cublas_bf16"))
        assert {r["ncu_reader"] for r in rows[reader]} == {reader}
        assert sum("--import" in c for c in fake.calls) == (reader == "csv")
    assert len(rows["csv"]) == 3 and rows["csv"][-1]["ncu_kernel"] == ncu.SUM_KERNEL
    counters = [{k: v for k, v in r.items() if k.startswith("ncu_") and k not in ("ncu_reader", "ncu_report")}
                for r in rows["csv"]]  # fmt: skip
    assert counters == [{k: r[k] for k in c} for c, r in zip(counters, rows["ncu_report"], strict=True)]
