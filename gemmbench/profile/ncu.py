"""Nsight Compute: the command line that profiles one cell, and its report read back as columns.

The metric names were checked on an H100 with ncu 2025.3.1 (docs/GPU-FACTS.md §6).  A report's kernels come from
ncu_reader: through Nsight Compute's `ncu_report` Python module where it can be imported, else read here from
`ncu --import R.ncu-rep --csv --page raw --print-units base`: a header row, a units row, then one row per
profiled kernel, numbers with thousands separators ("178,528").  A cell that launches several kernels
(a zeroing or reduction kernel, a grouped GEMM's setup) gets one row per kernel and a summed row.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from gemmbench.measure.nvtx_ranges import ncu_include

# column -> metric, for every kernel.  The percentages are of the kernel's own elapsed time or cycles.
METRICS = {
    "ncu_duration_ns": "gpu__time_duration.sum",
    "ncu_dram_read_bytes": "dram__bytes_read.sum",
    "ncu_dram_write_bytes": "dram__bytes_write.sum",
    "ncu_dram_pct_peak": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "ncu_dram_peak_bytes_per_cycle": "dram__bytes.sum.peak_sustained",
    "ncu_dram_cycles_per_s": "dram__cycles_elapsed.avg.per_second",
    # the SM clock the kernel ran at (ncu's "SM Frequency"): with --clock-control none it is whatever the GPU chose,
    # and it says whether a duration was taken at the clocks the harness's rows show
    "ncu_sm_hz": "sm__cycles_elapsed.avg.per_second",
    "ncu_l1_hit_pct": "l1tex__t_sector_hit_rate.pct",  # reads 0 for TMA loads (they bypass L1)
    "ncu_l1_sectors": "l1tex__t_sectors.sum",
    "ncu_l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "ncu_l2_sectors": "lts__t_sectors.sum",
    "ncu_global_load_inst": "smsp__inst_executed_op_global_ld.sum",  # reads 0 for TMA/wgmma kernels
    "ncu_lsu_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "ncu_tma_load_inst": "smsp__inst_executed_op_tma_ld.sum",
    "ncu_ldgsts_inst": "smsp__inst_executed_op_ldgsts.sum",  # cp.async global->shared: Triton's pipelined loads
    "ncu_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "ncu_tensor_pipe_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "ncu_sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "ncu_registers": "launch__registers_per_thread",
    "ncu_smem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "ncu_smem_static_bytes": "launch__shared_mem_per_block_static",
    "ncu_grid_size": "launch__grid_size",
    "ncu_block_size": "launch__block_size",
}
# Tensor-core operations with sparsity off (the counters without "sparsity_off" have the sparse rate as
# their peak).  Their sum over the kernel's path is its tensor FLOPs; compared with the model's 2MNK it
# shows work done on padding (a 16-row tile for M = 1 does 16x the FLOPs the GEMM needs).
FLOP_METRICS = (
    "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum",  # wgmma (64-row warpgroup tiles)
    "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum",
    "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum",  # mma.sync (e.g. Triton's 16-row tiles)
    "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum",
    "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp16_sparsity_off.sum",
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum",  # every fp8 path
)
# Why warps waited and how evenly the SMs were busy, where the report holds them (`--set full` collects both; the
# default metrics do not, to keep the replay short): each stall reason in cycles per issued instruction, and the SMs'
# active cycles, whose mean over the busiest's falls below 1 where tiles leave SMs idle or the last wave is partial.
STALL_METRIC = ("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio")
SM_ACTIVE_CYCLES = ("sm__cycles_active.avg", "sm__cycles_active.max")
TOP_STALLS = 3  # reasons named in ncu_stall_top
NOT_A_STALL = ("selected",)  # the cycle a warp issues: in the interval between issues, never a reason to wait
# Summed over a cell's kernels; the percentages are weighted (hit rates by their sectors, the rest by
# duration); sizes take the largest kernel's.
_ADDITIVE = (
    "ncu_duration_ns",
    "ncu_dram_read_bytes",
    "ncu_dram_write_bytes",
    "ncu_l1_sectors",
    "ncu_l2_sectors",
    "ncu_global_load_inst",
    "ncu_lsu_load_requests",
    "ncu_tma_load_inst",
    "ncu_ldgsts_inst",
    "ncu_tensor_flops",
)
_BY_SECTORS = {"ncu_l1_hit_pct": "ncu_l1_sectors", "ncu_l2_hit_pct": "ncu_l2_sectors"}
_BY_DURATION = (
    "ncu_occupancy_pct",
    "ncu_tensor_pipe_pct",
    "ncu_sm_pct",
    "ncu_sm_mhz",
    "ncu_issue_cycles",
    "ncu_sm_balance",
)
_LARGEST = ("ncu_registers", "ncu_smem_bytes", "ncu_dram_peak_gbps")
SUM_KERNEL = "(all kernels)"

# ncu scales a unit with a decimal SI prefix unless --print-units base is given ("Mbyte", "Kbyte/cycle",
# "Ghz", "us"): values are brought back to base units (durations to ns).
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_BASES = ("byte", "hz", "cycle", "inst", "sector", "request", "warp", "thread", "block", "register")
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


class NcuError(RuntimeError):
    """One line for the user: what went wrong with ncu, and what to do about it."""


def find_tool(exe: str) -> Optional[str]:
    """An Nsight executable on the PATH or in the CUDA toolkit's usual place, else None."""
    default = f"/usr/local/cuda/bin/{exe}"
    return shutil.which(exe) or (default if os.access(default, os.X_OK) else None)


def missing_tool(exe: str, product: str) -> str:
    return (
        f"{exe} ({product}) is not installed or not on the PATH: it ships with the CUDA toolkit (<cuda>/bin/{exe}) "
        f"and as NVIDIA's standalone {product} package; add its folder to PATH"
    )


def find_ncu() -> str:
    found = find_tool("ncu")
    if not found:
        raise NcuError(missing_tool("ncu", "Nsight Compute"))
    return found


def profile_command(
    ncu: str,
    report: Path,
    range_name: str,
    domain: Optional[str],
    target: Sequence[str],
    extra_metrics: Sequence[str] = (),
    full_set: bool = False,
) -> list[str]:
    """ncu over `target` (a command line), profiling only the kernels inside the push/pop range.
    Clocks are left alone (--clock-control none: never lock them) and every kernel starts with flushed
    caches (--cache-control all), as in gemmbench's cold timing."""
    metrics = list(dict.fromkeys([*METRICS.values(), *FLOP_METRICS, *extra_metrics]))
    cmd = [
        ncu,
        "--target-processes",
        "all",
        "--clock-control",
        "none",
        "--cache-control",
        "all",
        "--nvtx",
        "--nvtx-include",
        ncu_include(range_name, domain),
    ]
    if full_set:
        cmd += ["--set", "full"]
    return cmd + ["--metrics", ",".join(metrics), "--export", str(report), "--force-overwrite", *target]


def import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def explain_failure(output: str, range_name: str) -> Optional[str]:
    """The one-line reason in ncu's output for a profile that produced nothing, if it names one."""
    if "ERR_NVGPUCTRPERM" in output:
        return (
            "no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or have an "
            "administrator load the nvidia driver with NVreg_RestrictProfilingToAdminUsers=0 "
            "(e.g. `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d, then reload it)"
        )
    if "No kernels were profiled" in output:
        return f"no kernel was captured inside the NVTX range {range_name!r} (ncu saw no kernel launch in it)"
    for line in output.splitlines():
        if "==ERROR==" in line:
            return "ncu: " + line.split("==ERROR==", 1)[1].strip()[:300]
    return None


def _number(text: str, unit: str) -> Optional[float]:
    text = text.strip().replace(",", "")  # thousands separators
    try:
        value = float(text)
    except ValueError:  # "", "n/a", a name
        return None
    return to_base(value, unit)


def to_base(value: float, unit: str) -> float:
    """`value` in `unit` (as ncu names units: "Mbyte", "usecond", "Ghz", "%") in base units, durations in ns."""
    if unit in _TIME_NS:
        return value * _TIME_NS[unit]
    head = unit.split("/")[0].lower() if unit[:1] in ("", "%") else unit.split("/")[0]
    if len(head) > 1 and head[0] in _PREFIX and head[1:].lower() in _BASES:
        return value * _PREFIX[head[0]]
    return value


def parse_raw_csv(text: str) -> list[dict]:
    """`ncu --import --csv --page raw` -> one dict per kernel: 'kernel' (its name), 'id', and every metric
    column as a float in base units (durations in ns); a metric the report lacks is absent."""
    rows = list(csv.reader(io.StringIO(text)))
    # ncu may print "==PROF==" lines before the table; the header starts with "ID"
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None or len(rows) < start + 2:
        raise NcuError("the ncu report has no kernel table (no 'ID' header row)")
    header, units = rows[start], rows[start + 1]
    kernels = []
    for r in rows[start + 2 :]:
        if len(r) != len(header):
            continue
        cells = dict(zip(header, r, strict=False))
        entry = {
            "id": int(cells["ID"]) if cells["ID"].isdigit() else cells["ID"],
            "kernel": cells.get("Kernel Name") or cells.get("Function Name") or "",
        }
        for name, value, unit in zip(header, r, units, strict=False):
            if "__" in name:  # metric columns are the ones named like unit__counter
                entry[name] = _number(value, unit)
        kernels.append(entry)
    return kernels


@dataclass(frozen=True)
class Model:
    """What the cell should cost by gemmbench's model (metrics.py): for the derived ratios."""

    flops: Optional[int]
    bytes_min: Optional[int]


def kernel_columns(kernel: dict) -> dict:
    """One kernel's ncu_* columns from its parsed metrics."""
    cols = {"ncu_kernel": kernel["kernel"], "ncu_kernel_id": kernel["id"]}
    for col, metric in METRICS.items():
        cols[col] = kernel.get(metric)
    flops = [kernel[m] for m in FLOP_METRICS if kernel.get(m) is not None]
    cols["ncu_tensor_flops"] = sum(flops) if flops else None
    static, dynamic = cols.pop("ncu_smem_static_bytes"), cols.pop("ncu_smem_dynamic_bytes")
    cols["ncu_smem_bytes"] = (static or 0) + (dynamic or 0) if static is not None or dynamic is not None else None
    per_cycle, cycles = cols.pop("ncu_dram_peak_bytes_per_cycle"), cols.pop("ncu_dram_cycles_per_s")
    cols["ncu_dram_peak_gbps"] = per_cycle * cycles / 1e9 if per_cycle and cycles else None
    hz = cols.pop("ncu_sm_hz")
    cols["ncu_sm_mhz"] = hz / 1e6 if hz else None
    return cols | _stall_columns(kernel)


def _stall_columns(kernel: dict) -> dict:
    """ncu_issue_cycles (a warp's cycles between issued instructions: every reason's summed), ncu_stall_top (the
    TOP_STALLS largest reasons, "barrier 5.0, ..."), ncu_sm_balance (the SMs' mean active cycles over the busiest's);
    None where the report lacks them."""
    head, tail = STALL_METRIC
    stalls = {
        name[len(head) : -len(tail)]: value
        for name, value in kernel.items()
        if name.startswith(head) and name.endswith(tail) and value is not None
    }
    waits = sorted(((v, k) for k, v in stalls.items() if k not in NOT_A_STALL), key=lambda x: (-x[0], x[1]))
    mean, busiest = (kernel.get(m) for m in SM_ACTIVE_CYCLES)
    return {
        "ncu_issue_cycles": sum(stalls.values()) if stalls else None,
        "ncu_stall_top": ", ".join(f"{k} {v:.1f}" for v, k in waits[:TOP_STALLS]) if stalls else None,
        "ncu_sm_balance": mean / busiest if mean is not None and busiest else None,
    }


def _derive(cols: dict, model: Model) -> dict:
    ns, read, write = cols.get("ncu_duration_ns"), cols.get("ncu_dram_read_bytes"), cols.get("ncu_dram_write_bytes")
    moved = (read or 0) + (write or 0) if read is not None or write is not None else None
    cols["ncu_duration_us"] = ns / 1e3 if ns is not None else None
    cols["ncu_dram_gbps"] = moved / ns if moved is not None and ns else None  # bytes per ns = GB/s
    # above 1: traffic the model does not need (re-reads, spills, padding); below 1: served from L2
    cols["ncu_dram_traffic_ratio"] = moved / model.bytes_min if moved is not None and model.bytes_min else None
    tf = cols.get("ncu_tensor_flops")
    cols["ncu_tensor_flops_ratio"] = tf / model.flops if tf is not None and model.flops else None
    return cols


def _weighted(values, weights) -> Optional[float]:
    pairs = [(v, w) for v, w in zip(values, weights, strict=False) if v is not None and w]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def cell_rows(kernels: list[dict], model: Model, extra_metrics: Sequence[str] = ()) -> list[dict]:
    """The ncu_* columns of each kernel of a cell, then their sum (ncu_kernel = SUM_KERNEL).  extra_metrics
    (`--metrics`): raw metrics, each a column named as the metric; the summed row adds up the `.sum` ones."""
    per = [dict(_derive(kernel_columns(k), model), **{m: k.get(m) for m in extra_metrics}) for k in kernels]
    total = {"ncu_kernel": SUM_KERNEL, "ncu_kernel_id": None, "ncu_kernels": len(per)}
    for m in extra_metrics:
        vals = [r[m] for r in per if r[m] is not None]
        total[m] = sum(vals) if vals and m.endswith(".sum") else None
    for col in _ADDITIVE:
        vals = [r[col] for r in per if r.get(col) is not None]
        total[col] = sum(vals) if vals else None
    for col, weight in _BY_SECTORS.items():  # by duration where the sector counts were not collected
        by_sectors = _weighted([r[col] for r in per], [r[weight] for r in per])
        total[col] = (
            by_sectors
            if by_sectors is not None
            else _weighted([r[col] for r in per], [r["ncu_duration_ns"] for r in per])
        )
    for col in _BY_DURATION:
        total[col] = _weighted([r[col] for r in per], [r["ncu_duration_ns"] for r in per])
    for col in _LARGEST:
        vals = [r[col] for r in per if r.get(col) is not None]
        total[col] = max(vals) if vals else None
    total["ncu_grid_size"] = total["ncu_block_size"] = None  # per kernel only
    longest = max(per, key=lambda r: r["ncu_duration_ns"] or 0, default=None)
    total["ncu_stall_top"] = longest["ncu_stall_top"] if longest else None  # the kernel that took the time
    total = _derive(total, model)
    peak = total.get("ncu_dram_peak_gbps")
    total["ncu_dram_pct_peak"] = 100 * total["ncu_dram_gbps"] / peak if peak and total["ncu_dram_gbps"] else None
    for r in per:
        r["ncu_kernels"] = 1
    return per + [total]
