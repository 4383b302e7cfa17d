#!/usr/bin/env bash
# Issue 20, third session (H100, 2026-11-24): stream-K at prefill (kernels/streamk.py's prefill space and HYBRID).
#   CALL=probe  the stream-K GPU tests; stream-K tuned at TP 8 attn (every prefill bucket) and at TP 1 (M 256 and 512,
#               the neighbours of 333); TP 8 attn and TP 1 at M 256-512 cold against cuBLAS and the persistent kernel
#   CALL=ncu    why stream-K loses at prefill: ncu on TP 1 attn at M 333 and TP 8 attn at M 2048, bf16, stream-K (the
#               probe's stored configs, carried) against the persistent kernel and cuBLAS: DRAM bytes, L2 hits,
#               registers, local-memory (spill) loads and the main stall reasons
#   CALL=moe    the four Mixtral 8x7B TP 2 bf16 cells where vLLM's file or the fixed 128x256x64 config was ahead of ours
#               (w13 at 4, 2048, 3072 tokens; w2 at 64), with 1024 and 4096 beside them, three processes each
#   CALL=moe64  Mixtral TP 2 bf16 re-tuned at 64 tokens with 32-row tiles in the space (fused_moe.py), the 64-token
#               cells again beside vLLM's file, three processes; then every -m gpu test but the cupti one (4 workers)
# Run from the repository root on the GPU machine with OUT set (and GEMMBENCH_GIT_SHA); results in docs/BENCHMARKS.md.
set -uo pipefail
V=cublas_bf16,cublas_fp8,triton_persistent,triton_streamk
T="--dtype+fp8,bf16+--variants+triton_streamk"
case ${CALL:?} in
probe)
  OUT=$OUT TESTS=1 BUDGET_S=560 PYTEST_ARGS="-rA --tb=short tests/test_gpu_streamk.py" \
    TUNES="tp8attn:--shapes+llama70b-attn+--tp+8+--m+prefill+$T tp1:--shapes+llama70b+--tp+1+--m+256,512+$T" \
    SWEEPS="tp8attn-cold:--shapes+llama70b-attn+--tp+8+--m+128,256,333,512,1000,2048,3000,4096+--dtype+fp8,bf16+--budget+0.05+--variants+$V tp1-cold:--shapes+llama70b+--tp+1+--m+256,333,512+--dtype+fp8,bf16+--budget+0.05+--variants+$V" \
    bash scripts/device-run.sh
  ;;
ncu)
  M="launch__registers_per_thread,l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"
  for s in long_scoreboard barrier wait math_pipe_throttle lg_throttle; do
    M="$M,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"
  done
  P="--ncu+--dtype+bf16+--variants+cublas_bf16,triton_persistent,triton_streamk+--metrics+$M"
  OUT=$OUT TESTS=0 BUDGET_S=400 PROFILES="tp1-m333:--shapes+llama70b-attn+--tp+1+--m+333+$P tp8-m2048:--shapes+llama70b-attn+--tp+8+--m+2048+$P" \
    bash scripts/device-run.sh
  ;;
moe)
  F=results/h100-2026-11-24-issue20/fixed-config/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json
  R="--shapes+mixtral-moe+--tp+2+--dtype+bf16+--m+4,64,1024,2048,3072,4096+--budget+0.1+--repeat+3+--variants+triton_moe_grouped,triton_moe_col"
  OUT=$OUT TESTS=0 BUDGET_S=500 \
    SWEEPS="moe-vllm:$R+--import-config+vllm:tests/fixtures/engine-configs/vllm/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json moe-fixed:$R+--import-config+vllm:$F" \
    bash scripts/device-run.sh
  ;;
moe64)
  O=$OUT
  OUT=$O TESTS=0 BUDGET_S=200 \
    TUNES="moe64:--shapes+mixtral-moe+--tp+2+--dtype+bf16+--m+64+--variants+triton_moe_grouped,triton_moe_col" \
    SWEEPS="moe64-vllm:--shapes+mixtral-moe+--tp+2+--dtype+bf16+--m+64+--budget+0.1+--repeat+3+--variants+triton_moe_grouped,triton_moe_col+--import-config+vllm:tests/fixtures/engine-configs/vllm/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json" \
    bash scripts/device-run.sh
  OUT=$O/suite TESTS=1 BUDGET_S=330 PYTEST_ARGS="-n 4 -p xdist --ignore=tests/test_gpu_cupti.py tests" bash scripts/device-run.sh
  ;;
esac
