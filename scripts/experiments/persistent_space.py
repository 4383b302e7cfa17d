"""Probe: which dimensions of the persistent kernel's config space matter (issue 20 items 1 and 6)?

For each (dtype, shape): every tile shape and warp count that fits (kernels/persistent.fits) at the dtype's usual
BLOCK_K and 3 or 4 stages, GROUP_M 8, no warp specialisation; then the five fastest again with one dimension changed
at a time (warp specialisation, GROUP_M 32 and 64, 2 and 5 stages, the other BLOCK_K, the whole-tile epilogue).
Every config is checked against the fp32 reference before it is timed (tuning.search); cuBLAS is timed beside the
best.  One JSON line per trial, then one per case with the winners: the pruning rules in kernels/persistent.py come
from these lines (docs/BENCHMARKS.md).

    python3 scripts/experiments/persistent_space.py [M,...] [dtype,...] [N:K,...]
"""

import json
import sys
import time
from dataclasses import replace

from gemmbench import registry, tuning
from gemmbench.check import reference
from gemmbench.inputs import make_inputs
from gemmbench.kernels.persistent import PersistentConfig, fits
from gemmbench.shapes import Problem
from gemmbench.timing import Timer

Ms = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [2048]
dtypes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["bf16", "fp8"]
shapes = [tuple(map(int, s.split(":"))) for s in sys.argv[3].split(",")] if len(sys.argv) > 3 else [(10240, 8192)]
t = registry.get("triton_persistent").tunable
t0 = time.time()


def base_space(dtype: str) -> list[PersistentConfig]:
    bk = 128 if dtype == "fp8" else 64
    elem = 1 if dtype == "fp8" else 2
    return [
        PersistentConfig.tile(bm, bn, bk, w, st)
        for bm in (64, 128, 256)
        for bn in (64, 128, 256)
        for w in (4, 8)
        for st in (3, 4)
        if fits(bm, bn, bk, w, st, elem)
    ]


def variations(c: PersistentConfig, dtype: str) -> list[PersistentConfig]:
    other_bk = 64 if c.BLOCK_K == 128 else 128
    return [
        replace(c, WARP_SPECIALIZE=True),
        replace(c, GROUP_M=32),
        replace(c, GROUP_M=64),
        replace(c, num_stages=2),
        replace(c, num_stages=5),
        replace(c, BLOCK_K=other_bk),
        replace(c, EPILOGUE_SUBTILE=False),
    ]


def trials_json(tag, p, trials):
    for x in trials:
        print(json.dumps(dict(tag=tag, dt=p.dtype, M=p.M, N=p.N, K=p.K, cfg=x.config,
                              us=None if x.error else round(x.time_us, 2), err=x.error)), flush=True)  # fmt: skip


for dtype in dtypes:
    for N, K in shapes:
        for M in Ms:
            p = Problem("probe", "g", M, N, K, dtype)
            inputs = make_inputs(p, 1, "cuda")
            ref = reference(p, inputs)
            base = tuning.search(t, p, inputs, base_space(dtype), ref)
            trials_json("base", p, base)
            top = [x.params for x in base if not x.error][:5]
            more = [v for c in top for v in variations(c, dtype)]
            varied = tuning.search(t, p, inputs, list(dict.fromkeys(more)), ref)
            trials_json("varied", p, varied)
            best = min((x for x in base + varied if not x.error), key=lambda x: x.time_us)
            fns = {"persistent": t.build(p, inputs, best.params).fn}
            fns["cublas"] = registry.get("cublas_fp8" if dtype == "fp8" else f"cublas_{dtype}").make(p, inputs).fn
            timer = Timer("cold", budget_s=0.3, target_noise=0.002)
            samples = timer.run({k: timer.prepare([f]) for k, f in fns.items()})
            med = {k: round(float(sorted(v)[len(v) // 2]), 2) for k, v in samples.items()}
            print(json.dumps(dict(tag="case", dt=dtype, M=M, N=N, K=K, us=med, best=best.config,
                                  vs_cublas=round(med["cublas"] / med["persistent"], 3),
                                  failed=[x.error for x in base + varied if x.error][:3],
                                  elapsed_s=round(time.time() - t0))), flush=True)  # fmt: skip
