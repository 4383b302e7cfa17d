"""`--timing cupti` against `cold` and against Nsight Compute on the GPU (marker `gpu`; the ncu part needs ncu on the
PATH), and the `kernels` column of every GPU mode.  Cells: Llama3-70B attn_o (8192 x 8192) and mlp_down (8192 x 28672)
at TP 1, M 512 and 2048, bf16 and fp8 (per tensor), cuBLAS and the data-parallel Triton kernel: 16 cells whose
kernels all take >= 20 µs (2 * 512 * 8192 * 8192 FLOP = 68.7 GFLOP, the smallest, is ~50 µs at 1400 TFLOP/s fp8).

Two bounds, both measured on the H100 (docs/BENCHMARKS.md; these 16 cells, each mode in its own process):
- cold and cupti, 5% (BOUND): cupti's samples are the kernel-only part of the same calls after the same eviction, so
  a cupti median may not exceed its cold median by more than the variation between two processes; it did not on
  any of the 16 cells.
- either against Nsight Compute, 20% (NCU_BOUND): 26 of the 32 comparisons were within 5%, the other six at
  -11.8% ... +8.8% (harness / ncu - 1; ncu above cold on the Triton dp_row attn_o cells: 125.9 µs against cold
  111.0 and cupti 111.1 at M 512 bf16; below on cuBLAS bf16 attn_o M 2048: 335.5 against cupti 365.0).  ncu times one replayed launch per
  pass with the GPU idle between passes (`--clock-control none` keeps the clocks wherever they are), the harness
  the median of back-to-back calls.  Three runs of the test: 26 of 32 within 5% in the first; in the second two
  at -17.0% and -18.1% (Triton dp_row attn_o M 512 bf16: cold 110.4 µs, cupti 108.8, against ncu 132.9); in the third
  30 of 32 within 5%, all within -7.3% ... +4.3%, ncu reading 114.1 µs for that same kernel (ncu alone moved by 16%).
  20% bounds that as measured."""

import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.exclusive_gpu]

BOUND = 0.05
NCU_BOUND = 0.20
MIN_KERNEL_US = 20.0
VARIANTS = "cublas_bf16,cublas_fp8,triton_dp_row"
SHAPES = """name: cupti-check
description: Llama3-70B attn_o and mlp_down at TP 1 (the cupti cross-check)
m: [512, 2048]
gemms:
  - {id: attn_o, N: 8192, K: 8192, parallel: row}
  - {id: mlp_down, N: 8192, K: 28672, parallel: row}
"""


def _run(tmp_path, mode):
    from gemmbench.results.store import load

    shapes = tmp_path / "cupti-check.yaml"
    shapes.write_text(SHAPES)
    out = tmp_path / f"{mode}.parquet"
    cmd = [sys.executable, "-m", "gemmbench", "run", "--shapes", str(shapes), "--dtype", "bf16,fp8",
           "--variants", VARIANTS, "--timing", mode, "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = load([out])
    ok = df[df["status"] == "ok"]
    # bf16: cublas_bf16 and triton_dp_row; fp8: cublas_fp8 and triton_dp_row; 2 GEMMs x 2 M each
    assert len(ok) == 16, df[df["status"] != "ok"][["variant", "dtype", "status", "reason"]].to_string()
    return ok.set_index(["gemm", "M", "dtype", "variant"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cupti")
    return {mode: _run(tmp, mode) for mode in ("cold", "cupti", "stream")}


def test_every_gpu_row_names_its_kernels(runs):
    """Stream mode's names come from a replay of its CUDA graph: CUPTI reports the kernels of graph launches."""
    for mode, rows in runs.items():
        assert rows["kernels"].notna().all() and (rows["kernels"].str.len() > 0).all(), mode
        assert not rows["kernels"].str.contains("read_kernel").any(), mode  # the eviction is never named
        assert (rows["l2_state"] == {"cold": "cold", "cupti": "cold", "stream": "streaming"}[mode]).all()
    # cold and cupti both profile eager calls of the same launch: the same kernels
    cold, cupti = runs["cold"]["kernels"], runs["cupti"]["kernels"].reindex(runs["cold"].index)
    assert (cold == cupti).all(), (cold[cold != cupti], cupti[cold != cupti])


def test_cupti_is_kernel_time_within_the_cold_time(runs, tmp_path):
    """A GPU at its power limit can slow from one sweep to the next by more than BOUND on a millisecond-long cell.
    Where cupti is over, cold is timed once more after it, and cupti must be within the bound of one of the two cold
    sweeps around it; an eviction or a launch counted into cupti's samples would be over both."""
    sweeps = {"cold": runs["cold"], "cupti": runs["cupti"].reindex(runs["cold"].index)}
    cold, cupti = sweeps["cold"]["time_us_median"], sweeps["cupti"]["time_us_median"]
    assert (cupti > 0).all()
    over = cupti[cupti > cold * (1 + BOUND)]
    if not over.empty:
        sweeps["cold after"] = _run(tmp_path, "cold").reindex(cold.index)
        after = sweeps["cold after"]["time_us_median"]
        print(f"cupti over the cold sweep before it: {over.to_dict()}; cold after it: {after[over.index].to_dict()}")
        over = over[over > after[over.index] * (1 + BOUND)]
    # each sweep's time and SM clock of the cells over: a slower clock on cupti's side would say the GPU, not the timer
    seen = {name: rows.loc[over.index, ["time_us_median", "sm_clock_mhz_median"]].to_dict("index")
            for name, rows in sweeps.items()}  # fmt: skip
    assert over.empty, f"cupti above cold by more than {BOUND:.0%} (µs, SM MHz): {seen}"


def test_cold_and_cupti_agree_with_ncu(runs, tmp_path):
    """Durations within NCU_BOUND.  Each comparison is printed (pytest -rA shows it) with the SM clock each side saw
    (NVML's median reading over the harness's batches, ncu's sm__cycles_elapsed.avg.per_second) and the SM cycles
    they imply: docs/BENCHMARKS.md's table of the disagreement is this output."""
    if shutil.which("ncu") is None:
        pytest.skip("ncu (Nsight Compute) is not on the PATH")
    from gemmbench import registry
    from gemmbench.profile.sweep import CellProfiler, ProfileOptions
    from gemmbench.shapes import Problem

    profiler = CellProfiler(ProfileOptions(out_dir=tmp_path, run_id="cupti-check"))
    bad = []
    for (gemm, M, dtype, variant), row in runs["cold"].iterrows():
        p = Problem("cupti-check", gemm, int(M), int(row["N"]), int(row["K"]), dtype, scaling=row["scaling"])
        rows = profiler.cell(p, registry.get(variant))
        total = rows[-1]
        assert total["status"] == "ok", total["reason"]
        kernels = [r["ncu_duration_us"] for r in rows[:-1]]
        assert min(kernels) >= MIN_KERNEL_US, (gemm, M, dtype, variant, kernels)  # the cells were chosen so
        ncu_us, ncu_mhz = total["ncu_duration_us"], total["ncu_sm_mhz"]
        assert ncu_mhz, "ncu reported no SM clock (sm__cycles_elapsed.avg.per_second)"
        for mode in ("cold", "cupti"):
            t = runs[mode].loc[(gemm, M, dtype, variant), "time_us_median"]
            mhz = runs[mode].loc[(gemm, M, dtype, variant), "sm_clock_mhz_median"]
            cycles = t * mhz / (ncu_us * ncu_mhz) - 1
            line = (
                f"{mode} {gemm} M{M} {dtype} {variant}: {t:.1f} µs at {mhz:.0f} MHz vs ncu {ncu_us:.1f} µs at "
                f"{ncu_mhz:.0f} MHz: time {t / ncu_us - 1:+.1%}, cycles {cycles:+.1%}"
            )
            print(line)
            if abs(t / ncu_us - 1) > NCU_BOUND:
                bad.append(line)
    assert not bad, "\n".join(bad)
