"""A Nsight Compute report's kernels, each a dict of its metrics in base units (the shape ncu.parse_raw_csv gives, which
ncu.cell_rows reads): through `ncu_report`, the Python module Nsight Compute ships in its `extras/python` folder, where
it can be imported; else through `ncu --import --csv`, the fallback.

`ncu_report` is not on PyPI: it is imported as installed (on PYTHONPATH), else from the `extras/python` folder of the
Nsight Compute that profiled (beside the real `ncu`, or, for the CUDA toolkit's `<cuda>/bin/ncu`, the newest
`<cuda>/nsight-compute-*/extras/python`).  The calls used are those of Nsight Compute's Python Report Interface:
load_report(path) -> context; context.num_ranges(), range_by_idx(i); range.num_actions(), action_by_idx(j);
action.name(IAction.NameBase_DEMANGLED), metric_names(), metric_by_name(name); metric.kind(), as_double(),
as_uint64(), unit().  One kernel is one action, numbered across the ranges as ncu's CSV numbers its `ID`s."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional

from gemmbench.profile import ncu

READERS = ("ncu_report", "csv")  # the `ncu_reader` column of a profile row: which path read its counters
# Where Nsight Compute's own installers put it (the .deb/.run of a standalone install, and the CUDA toolkit's
# /usr/local/cuda/bin/ncu, which is a script that runs it from there, not a link): the H100 machine has
# /opt/nvidia/nsight-compute/2025.3.1/extras/python/ncu_report.py beside /usr/local/cuda/bin/ncu
STANDALONE = Path("/opt/nvidia/nsight-compute")


def module_dirs(ncu_exe: Optional[str], standalone: Path = STANDALONE) -> list[Path]:
    """The `extras/python` folders holding an ncu_report.py that belong to the ncu at `ncu_exe`, most likely first:
    its own folder's, the toolkit's nsight-compute-*, then the standalone installs' (newest first in each)."""
    if not ncu_exe:
        return []
    exe = Path(ncu_exe).resolve()  # a link to the tool: its own folder holds extras/
    toolkit = sorted(exe.parent.parent.glob("nsight-compute*/extras/python"), key=_version, reverse=True)
    installed = sorted(standalone.glob("*/extras/python"), key=_version, reverse=True)
    found = [exe.parent / "extras" / "python", *toolkit, *installed]
    return [d for d in found if (d / "ncu_report.py").is_file()]


def _version(extras: Path) -> tuple[int, ...]:
    """(2025, 3, 1) from <cuda>/nsight-compute-2025.3.1/extras/python: the newest reads the older reports too."""
    return tuple(int(x) for x in re.findall(r"\d+", extras.parent.parent.name))


def load_module(ncu_exe: Optional[str]) -> Optional[ModuleType]:
    """ncu_report as installed, else from module_dirs(ncu_exe); None where neither imports (then: the CSV path)."""
    for folder in [None, *module_dirs(ncu_exe)]:
        if folder is not None:
            sys.path.append(str(folder))  # ncu_report.py imports its compiled half from its own folder
        try:
            return importlib.import_module("ncu_report")
        except Exception:  # ImportError, or the compiled module's own (a libc it wants): try the next, then CSV
            if folder is not None:
                sys.path.remove(str(folder))
    return None


def _value(module: ModuleType, metric) -> Optional[float]:
    """A metric's number in base units; None for a string (a device's name) or a metric without a value."""
    kinds = module.IMetric
    kind = metric.kind()
    if kind in (kinds.ValueKind_FLOAT, kinds.ValueKind_DOUBLE):
        value = metric.as_double()
    elif kind in (kinds.ValueKind_UINT32, kinds.ValueKind_UINT64):
        value = float(metric.as_uint64())
    else:
        return None
    return ncu.to_base(value, metric.unit())


def kernels_from_module(module: ModuleType, report: Path) -> list[dict]:
    """Every kernel (action) of the report: 'id', 'kernel' (its demangled name, as the CSV's "Kernel Name"), and
    each metric named like unit__counter, as ncu.parse_raw_csv has them."""
    context = module.load_report(str(report))
    kernels = []
    for i in range(context.num_ranges()):
        span = context.range_by_idx(i)
        for j in range(span.num_actions()):
            action = span.action_by_idx(j)
            entry: dict = {"id": len(kernels), "kernel": action.name(module.IAction.NameBase_DEMANGLED)}
            for name in action.metric_names():
                if "__" in name:
                    entry[name] = _value(module, action.metric_by_name(name))
            kernels.append(entry)
    return kernels


def read_kernels(
    report: Path, ncu_exe: str, has_module: bool, run: Callable, timeout: Optional[float]
) -> tuple[list[dict], str]:
    """(the report's kernels, the reader: a name in READERS); [] where the report holds no kernel table.

    Where ncu_report imports here (has_module: load_module found it), it reads the report in a child process (`python -m
    gemmbench.profile.ncu_reader REPORT NCU`, which prints the kernels as JSON): on the H100 machine, Nsight Compute
    2025.3.1's module crashed the interpreter (a segmentation fault in IMetric.unit()), which in this
    process would end the whole sweep.  A child that fails or crashes costs nothing: the CSV path reads the report."""
    if has_module:
        child = run([sys.executable, "-m", __name__, str(report), ncu_exe], capture_output=True, text=True,
                    timeout=timeout)  # fmt: skip
        if child.returncode == 0:
            try:
                return json.loads(child.stdout), "ncu_report"
            except ValueError:  # not the JSON main() prints: read it the other way
                pass
    proc = run(ncu.import_command(ncu_exe, report), capture_output=True, text=True, timeout=timeout)
    try:
        return (ncu.parse_raw_csv(proc.stdout) if proc.returncode == 0 else []), "csv"
    except ncu.NcuError:  # an export with no kernel table: the cell's error row, not the sweep's end
        return [], "csv"


def main(argv: list[str]) -> int:
    """The child of read_kernels: REPORT NCU -> the report's kernels as JSON on stdout; exit 1 where ncu_report does
    not import or cannot read the report."""
    report, ncu_exe = Path(argv[0]), argv[1]
    module = load_module(ncu_exe)
    if module is None:
        return 1
    try:
        kernels = kernels_from_module(module, report)
    except Exception as exc:  # noqa: BLE001 - one line to the parent, which reads the report the other way
        print(f"ncu_report could not read {report}: {exc}", file=sys.stderr)
        return 1
    json.dump(kernels, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
