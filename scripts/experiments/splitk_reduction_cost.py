"""Probe: what the SplitK reduction costs on the skinny GEMMs.  Same stored config, three kernels:
full (atomic adds + counter + last-split epilogue), adds-only (atomic adds, no counter: wrong result,
timing only), partial-only (each split stores its partial, no atomics), and the size-matched read."""
import json
import torch
import triton
import triton.language as tl
from gemmbench import config_files, registry
from gemmbench.inputs import make_inputs
from gemmbench.shapes import Problem
from gemmbench.timing import Timer
from gemmbench.streamread import StreamReader
from gemmbench.kernels.tile_loop import accumulate_tile
import gemmbench.kernels.splitk, gemmbench.kernels.cublas  # noqa


@triton.jit
def partial_kernel(a_ptr, b_ptr, buf_ptr, M, N, K, SPLIT_K, sam, sak, sbn, sbk,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ATOMIC: tl.constexpr):
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m = tl.program_id(0) // grid_n
    pid_n = tl.program_id(0) % grid_n
    pid_k = tl.program_id(1)
    k_blocks = tl.cdiv(K, BLOCK_K)
    per = tl.cdiv(k_blocks, SPLIT_K)
    acc, offs_m, offs_n, _, _ = accumulate_tile(a_ptr, b_ptr, M, N, K, sam, sak, sbn, sbk, pid_m, pid_n,
                                                pid_k * per, tl.minimum(pid_k * per + per, k_blocks),
                                                BLOCK_M, BLOCK_N, BLOCK_K, True, True, 32)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    mn = offs_m[:, None] * N + offs_n[None, :]
    if ATOMIC:
        tl.atomic_add(buf_ptr + mn, acc, mask=mask, sem="relaxed")
    else:
        tl.store(buf_ptr + pid_k * M * N + mn, acc, mask=mask)


gpu = torch.cuda.get_device_name()
for (N, K) in [(1280, 8192), (2560, 8192)]:
    for M in (1, 16):
        p = Problem("probe", "g", M, N, K, "fp8")
        cfg = config_files.stored("triton_splitk_atomic", p, gpu)[0]
        sk = cfg["SPLIT_K"]
        tv = registry.get("triton_splitk_atomic").tunable
        nbytes = N * K
        copies = max(1, min(1024, (512 << 20) // nbytes))
        ins = [make_inputs(p, s, "cuda") for s in range(copies)]
        full = [tv.build(p, i, cfg).fn for i in ins]
        bufs = [torch.zeros((sk, M, N), dtype=torch.float32, device="cuda") for _ in ins]
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), sk)

        def part(i, buf, atomic):
            return lambda: partial_kernel[grid](i.a, i.b, buf, M, N, K, sk, i.a.stride(0), i.a.stride(1), i.b.stride(0),
                                                i.b.stride(1), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                                                BLOCK_K=cfg["BLOCK_K"], ATOMIC=atomic, num_warps=cfg["num_warps"],
                                                num_stages=cfg["num_stages"])
        adds = [part(i, b, True) for i, b in zip(ins, bufs)]
        stores = [part(i, b, False) for i, b in zip(ins, bufs)]
        readers = [StreamReader(nbytes) for _ in range(copies)]
        cb = [registry.get("cublas_fp8").make(p, i).fn for i in ins]
        for mode in ("cold", "stream"):
            t = Timer(mode, budget_s=0.4, target_noise=0.002)
            fns = {"full": full, "adds_only": adds, "partial_only": stores, "read": readers, "cublas": cb}
            s = t.run({k: t.prepare(v) for k, v in fns.items()})
            med = {k: round(float(sorted(v)[len(v) // 2]), 2) for k, v in s.items()}
            print(json.dumps(dict(N=N, K=K, M=M, mode=mode, split_k=sk, cfg=cfg, us=med)), flush=True)
