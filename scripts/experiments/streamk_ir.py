"""Why stream-K is slower than the persistent kernel on the same prefill tile (issue 20, H100): compile both on one
problem, print each compiled kernel's registers, spills, shared memory and what its Triton IR says about the K loop
(TMA copies made asynchronous and wgmma left in flight = pipelined; plain descriptor loads = not), and a median time.
Run on the GPU machine from the repository root: python3 scripts/experiments/streamk_ir.py > $OUT/ir.txt"""

import re

import torch
import triton.testing

from gemmbench import registry
from gemmbench.inputs import make_inputs
from gemmbench.kernels import persistent, streamk
from gemmbench.shapes import Problem


def compiled(fn):
    kernels = []
    for cache in fn.device_caches.values():
        kernels += list(cache[0].values())
    return kernels


def describe(name, fn, launch):
    launch.fn()
    torch.cuda.synchronize()
    us = triton.testing.do_bench(launch.fn, warmup=5, rep=40) * 1e3
    for k in compiled(fn):
        ir = k.asm.get("ttgir", "")
        counts = {w: len(re.findall(w, ir)) for w in (
            "async_tma_copy_global_to_local", "descriptor_load", "warp_group_dot ", "warp_group_dot_wait",
            "isAsync = true", "scf.for", "scf.while", "ttg.local_alloc")}
        print(f"{name}: {us:.1f} us  regs {k.n_regs} spills {k.n_spills} smem {k.metadata.shared}  {counts}")
    fn.device_caches.clear()


for M, N, K, dtype, bm, bn, bk, warps, stages in (
    (512, 8192, 28672, "bf16", 128, 128, 64, 4, 5),
    (512, 8192, 28672, "bf16", 128, 256, 64, 8, 4),
    (512, 8192, 28672, "fp8", 256, 128, 128, 8, 4),
):
    p = Problem("ir", "g", M, N, K, dtype, scaling="tensor" if dtype == "fp8" else "none")
    x = make_inputs(p, 0, "cuda")
    print(f"== M {M} N {N} K {K} {dtype} {bm}x{bn}x{bk} w{warps} s{stages}")
    pc = persistent.PersistentConfig.tile(bm, bn, bk, warps, stages)
    describe("persistent", persistent.persistent_gemm_kernel, registry.get("triton_persistent").tunable.build(p, x, pc))
    for hybrid in (False, True):
        sc = streamk.StreamKConfig.tile(bm, bn, bk, warps, stages, PROGRAMS=132, TMA=True, HYBRID=hybrid)
        describe(f"streamk hybrid={hybrid}", streamk.streamk_gemm_kernel, registry.get("triton_streamk").tunable.build(p, x, sc))
