"""`gemmbench profile`: each selected cell in a worker of the engine (its `profile` task: check, warm-up, one launch
inside the cell's NVTX range) started under Nsight Compute and/or Nsight Systems, its report parsed into ncu_* /
nsys_* columns, one Parquet table of profile rows.

A profile row is a cell (the run's naming columns, its check outcome and config, gemmbench's FLOP and
byte model) plus one kernel's counters; a cell of several kernels has one row per kernel and a row
with ncu_kernel = ncu.SUM_KERNEL summing them.  join() puts the summed row's columns beside a run's rows.
Reports are kept: <out>/<run_id>/<cell>.ncu-rep (and .nsys-rep).  A cell that fails is a row with its
reason, and the next cell goes on; only a missing tool or missing counter permission stops the sweep.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from gemmbench.engine.pool import Pool
from gemmbench.engine.tasks import profile_task
from gemmbench.engine.worker_process import WorkerOptions, exit_hint
from gemmbench.measure import device
from gemmbench.measure.nvtx_ranges import cell_name, domain_in_use, range_name
from gemmbench.profile import ncu, ncu_reader, nsys
from gemmbench.results import metrics
from gemmbench.results.cells import CELL_KEY, cell_columns
from gemmbench.results.store import cell_keys
from gemmbench.results.table_versions import PROFILE_SCHEMA
from gemmbench.shapes import Problem


class ProfileError(RuntimeError):
    """The sweep cannot go on (no tool, no permission); one line for the user."""


@dataclass
class ProfileOptions:
    out_dir: Path
    run_id: str
    use_ncu: bool = True
    use_nsys: bool = False
    seed: int = 0
    plugins: list = field(default_factory=list)
    extra_metrics: list = field(default_factory=list)
    ncu_set: Optional[str] = None  # e.g. "full": ncu's section set, passed through
    env: dict = field(default_factory=dict)  # the workers' extra environment (the --import-config variants)
    # the watchdog of each cell's worker (silent this long in one phase: stopped, the cell an error) and the limit of
    # reading its report; None: no limit
    timeout_s: Optional[float] = 6000.0


def report_stem(variant: str, problem: Problem) -> str:
    """A file name for the cell's reports: its NVTX name with spaces and odd characters as '_'."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", cell_name(variant, problem)).strip("_")


def _last_error(output: str, code: int) -> str:
    how, _, hint = exit_hint(output, code).partition(": ")
    return f"the profiled process failed ({how}): {hint}"


class CellProfiler:
    """Profiles cells one at a time, each in a worker of the engine's pool started under the profiler (the `profile`
    task); each returns its rows (never raises for one cell's failure)."""

    def __init__(self, opts: ProfileOptions, run: Callable = subprocess.run, start: Optional[Callable] = None):
        self.opts, self.run, self.start = opts, run, start
        self.ncu = ncu.find_ncu() if opts.use_ncu else None
        # without ncu_report: `ncu --import --csv`
        self.ncu_module = bool(self.ncu) and ncu_reader.load_module(self.ncu) is not None
        self.nsys = nsys.find_nsys() if opts.use_nsys else None
        self.reports = opts.out_dir / opts.run_id

    def _child(self, prefix: list, problem: Problem, variant) -> tuple[Optional[dict], str, int]:
        """One worker under the tool `prefix` over the cell: (its outcome or None, the tool's output, exit code)."""
        cell = profile_task.cell(problem, variant.name, self.opts.seed, tuple(prefix), self.opts.timeout_s)
        sink = profile_task.Outcome()
        with Pool(
            WorkerOptions("cold", plugins=list(self.opts.plugins), env=self.opts.env), sink, start=self.start
        ) as pool:
            pool.run([cell])
        output = sink.output + (f"\n{sink.why_lost}" if sink.why_lost else "")
        return sink.outcome, output, sink.code

    def cell(self, problem: Problem, variant) -> list[dict]:
        name = range_name("profile", cell_name(variant.name, problem))
        base = dict(cell_columns(problem, variant), run_id=self.opts.run_id, profile_schema=PROFILE_SCHEMA,
                    timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"), nvtx_range=name,
                    **device.provenance())  # fmt: skip
        self.reports.mkdir(parents=True, exist_ok=True)
        # reports are stem + suffix, never stem.with_suffix(): a GEMM id may contain '.' (two cells, one report)
        stem = self.reports / report_stem(variant.name, problem)
        extra: dict = {}
        outcome = None
        if self.nsys:
            outcome, output, code = self._child(nsys.profile_command(self.nsys, stem, []), problem, variant)
            if outcome is None or outcome["status"] != "ok":
                return [self._failed(base, outcome, output, code, name)]
            columns = self._nsys_columns(stem, name)
            if isinstance(columns, str):
                return [dict(base, status="error", reason=columns)]
            extra = columns
        if self.ncu:
            report = stem.with_name(stem.name + ".ncu-rep")
            prefix = ncu.profile_command(self.ncu, report, name, domain_in_use(), [], self.opts.extra_metrics,
                                         self.opts.ncu_set)  # fmt: skip
            outcome, output, code = self._child(prefix, problem, variant)
            if outcome is None or outcome["status"] != "ok":
                return [self._failed(base, outcome, output, code, name)]
            why = ncu.explain_failure(output, name)
            if not report.exists():
                return [self._failed(base, None, output, code, name, why)]
            kernels, reader = ncu_reader.read_kernels(report, self.ncu, self.ncu_module, self.run, self.opts.timeout_s)
            if not kernels:
                reason = why or f"no kernel was captured inside the NVTX range {name!r}"
                return [dict(base, status="error", reason=reason, ncu_report=str(report))]
        assert outcome is not None
        hit = outcome["experts_hit"] if problem.is_moe else None
        # under expert parallelism this rank's pairs and tokens (an outcome without them: EP 1, every pair)
        pairs, tokens = (outcome.get("pairs"), outcome.get("tokens")) if problem.is_moe else (None, None)
        model = ncu.Model(metrics.flops(problem, pairs) if variant.gemm else None,
                          metrics.bytes_min(problem, hit, pairs=pairs, tokens=tokens)
                          if variant.gemm else None)  # fmt: skip
        cell = dict(base, status="ok", reason=None, config=json.dumps(outcome["config"], sort_keys=True),
                    max_rel_err=outcome["max_rel_err"], flops=model.flops, bytes_min=model.bytes_min,
                    **extra)  # fmt: skip
        if not self.ncu:
            return [cell]
        return [dict(cell, ncu_report=str(report), ncu_reader=reader, **k)
                for k in ncu.cell_rows(kernels, model, self.opts.extra_metrics)]  # fmt: skip

    def _nsys_columns(self, stem: Path, name: str):
        sqlite_path = stem.with_name(stem.name + ".sqlite")
        rep = stem.with_name(stem.name + ".nsys-rep")
        proc = self.run(
            nsys.export_command(self.nsys, rep, sqlite_path),
            capture_output=True,
            text=True,
            timeout=self.opts.timeout_s,
        )
        if proc.returncode != 0 or not sqlite_path.exists():
            return f"nsys could not export {rep}: {_last_error(proc.stdout + proc.stderr, proc.returncode)}"
        cols = nsys.range_columns(sqlite_path, name)
        if cols is None:
            return f"nsys recorded no NVTX range {name!r}"
        return dict(cols, nsys_report=str(rep))

    def _failed(
        self, base: dict, outcome: Optional[dict], output: str, code: int, name: str, why: Optional[str] = None
    ) -> dict:
        """The row of a cell that produced no profile; stops the sweep where no cell could succeed."""
        why = why or ncu.explain_failure(output, name)
        if why and "ERR_NVGPUCTRPERM" in why:
            raise ProfileError(why)
        if outcome is not None:  # the child ran and said why it did not profile (wrong, skipped)
            return dict(
                base,
                status=outcome["status"],
                reason=outcome["reason"],
                max_rel_err=outcome["max_rel_err"],
                config=json.dumps(outcome["config"], sort_keys=True) if outcome["config"] else None,
            )
        return dict(base, status="error", reason=why or _last_error(output, code))


def join(runs: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    """The run's rows with the ncu_* / nsys_* columns of each cell's summed profile row (NaN where a cell
    was not profiled).  Cells match on store.CELL_KEY; a cell profiled twice takes its latest profile."""
    prof = profiles[profiles["status"] == "ok"]
    if "ncu_kernel" in prof.columns:
        prof = prof[prof["ncu_kernel"].isna() | (prof["ncu_kernel"] == ncu.SUM_KERNEL)]
    cols = [c for c in prof.columns if c.startswith(("ncu_", "nsys_"))]
    prof = prof.sort_values("timestamp").drop_duplicates(list(CELL_KEY), keep="last")
    prof = pd.DataFrame({"_key": cell_keys(prof).to_numpy(), **{c: prof[c].to_numpy() for c in cols}})
    return runs.assign(_key=cell_keys(runs)).merge(prof, how="left", on="_key").drop(columns=["_key"])
