"""Probe: does the TMA K loop beat the pointer loop?  For each case: stored (pointer) config, best TMA
config from the full space, cuBLAS; re-timed side by side, cold and stream-like."""
import sys
import time
import json
import torch
from gemmbench import config_files, registry, tuning
from gemmbench.check import reference
from gemmbench.inputs import make_inputs
from gemmbench.shapes import Problem
from gemmbench.timing import Timer
import gemmbench.kernels.splitk, gemmbench.kernels.dense_dp, gemmbench.kernels.cublas  # noqa

cases = [(1280, 8192), (2560, 8192), (8192, 1024), (8192, 8192), (7168, 8192), (8192, 3584)]
Ms = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [16, 64]
dts = sys.argv[2].split(",") if len(sys.argv) > 2 else ["fp8", "bf16"]
t0 = time.time()
for dt in dts:
    for (N, K) in cases:
        for M in Ms:
            p = Problem("probe", "g", M, N, K, dt)
            inp = make_inputs(p, 1, "cuda")
            ref = reference(p, inp)
            tv = registry.get("triton_splitk_atomic").tunable
            space = [c for c in tv.space(p, True, True) if c["TMA"]]
            tr = tuning.search(tv, p, inp, space, ref, refine=4)
            best_tma = tr[0]
            st = config_files.stored("triton_splitk_atomic", p, torch.cuda.get_device_name())
            cfgs = {"tma": best_tma.config}
            if st:
                cfgs["ptr"] = st[0]
                cfgs["ptr+tma"] = dict(st[0], TMA=True)
            fns = {k: tv.build(p, inp, c).fn for k, c in cfgs.items()}
            cb = registry.get("cublas_bf16" if dt != "fp8" else "cublas_fp8").make(p, inp)
            fns["cublas"] = cb.fn
            timer = Timer("cold", budget_s=0.3, target_noise=0.002)
            samples = timer.run({k: timer.prepare([f]) for k, f in fns.items()})
            med = {k: float(sorted(v)[len(v) // 2]) for k, v in samples.items()}
            print(json.dumps(dict(dt=dt, N=N, K=K, M=M, us={k: round(v, 2) for k, v in med.items()},
                                  tma_cfg=best_tma.config, failed=sum(1 for x in tr if x.error),
                                  err=next((x.error for x in tr if x.error), ""), t=round(time.time() - t0))), flush=True)
