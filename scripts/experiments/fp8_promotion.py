"""Probe: fp8 promotion interval (FP8_PROMOTE 32 / 128 / never) - error against the fp32 reference and cold
time, beside cuBLAS fp8; prefill shapes on the DP kernel, M = 64 on the stored SplitK config."""
import json
import torch
from gemmbench import config_files, registry
from gemmbench.check import poison, reference
from gemmbench.inputs import make_inputs
from gemmbench.shapes import Problem
from gemmbench.timing import Timer
import gemmbench.kernels.splitk, gemmbench.kernels.dense_dp, gemmbench.kernels.cublas  # noqa
from gemmbench.kernels.dense_dp import _cfg

gpu = torch.cuda.get_device_name()


def err(p, out, ref):
    scale = ref.abs().max()
    return float(((out.float() - ref).abs() / scale).max()), float((out.float() - ref).mean() / scale)


def probe(p, tunable, cfgs):
    inp = make_inputs(p, 1, "cuda")
    ref = reference(p, inp)
    fns, info = {}, {}
    cb = registry.get("cublas_fp8").make(p, inp)
    poison(cb.out)
    info["cublas"] = err(p, cb.fn(), ref)
    fns["cublas"] = cb.fn
    for name, cfg in cfgs.items():
        try:
            L = tunable.build(p, inp, cfg)
            poison(L.out)
            info[name] = err(p, L.fn(), ref)
            fns[name] = L.fn
        except Exception as e:  # noqa
            info[name] = str(e).splitlines()[0][:120]
    t = Timer("cold", budget_s=0.3, target_noise=0.003)
    s = t.run({k: t.prepare([f]) for k, f in fns.items()})
    us = {k: round(float(sorted(v)[len(v) // 2]), 2) for k, v in s.items()}
    print(json.dumps(dict(M=p.M, N=p.N, K=p.K, us=us, err={k: v for k, v in info.items()})), flush=True)
    del inp, ref, fns
    torch.cuda.empty_cache()


dp = registry.get("triton_dp_grouped").tunable
sk = registry.get("triton_splitk_atomic").tunable
for (M, N, K) in [(64, 1280, 8192), (64, 2560, 8192), (64, 8192, 8192)]:
    p = Problem("p", "g", M, N, K, "fp8")
    base = config_files.stored("triton_splitk_atomic", p, gpu)[0]
    probe(p, sk, {f"sk_p{x}": dict(base, FP8_PROMOTE=x) for x in (32, 128, 1 << 30)})
for (M, N, K) in [(1024, 8192, 8192), (4096, 8192, 8192), (4096, 57344, 8192), (4096, 8192, 28672), (256, 8192, 8192)]:
    p = Problem("p", "g", M, N, K, "fp8")
    cfgs = {}
    for (bm, bn, bk, w, st) in [(128, 256, 64, 8, 3), (128, 256, 128, 8, 3), (128, 128, 128, 8, 4)]:
        for x in (32, 128, 1 << 30):
            for tma in (False, True):
                name = f"{bm}x{bn}x{bk}s{st}_p{x if x < 1024 else 'inf'}{'_tma' if tma else ''}"
                cfgs[name] = _cfg(bm, bn, bk, w, st, tma=tma) | {"FP8_PROMOTE": x}
    probe(p, dp, cfgs)
