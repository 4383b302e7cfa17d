"""`gemmbench profile` on the GPU (marker `gpu`; needs ncu on the PATH): DRAM bytes read by one decode GEMM
must be its weight's bytes, within 10% (the weight is read once, from DRAM: ncu flushes the caches first)."""

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("variant", ["cublas_bf16", "triton_splitk_atomic"])
def test_ncu_dram_bytes_match_the_weight(variant, tmp_path):
    from gemmbench import registry
    from gemmbench.profile import ncu
    from gemmbench.profile.sweep import CellProfiler, ProfileOptions
    from gemmbench.shapes import Problem

    p = Problem("llama70b-attn", "attn_o", 16, 8192, 8192, "bf16")
    rows = CellProfiler(ProfileOptions(out_dir=tmp_path, run_id="t")).cell(p, registry.get(variant))
    total = rows[-1]
    assert total["status"] == "ok", total["reason"]
    assert total["ncu_kernel"] == ncu.SUM_KERNEL and total["ncu_kernels"] == len(rows) - 1 >= 1
    weight = 8192 * 8192 * 2
    assert abs(total["ncu_dram_read_bytes"] / weight - 1) < 0.10, total["ncu_dram_read_bytes"]
    assert total["ncu_duration_us"] > 0 and 0 < total["ncu_dram_pct_peak"] <= 100
    assert total["ncu_report"].endswith(".ncu-rep")
