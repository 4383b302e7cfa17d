#!/usr/bin/env bash
# Issue 20, third session (H100, 2026-11-24): stream-K at prefill (kernels/streamk.py's prefill space and HYBRID).
#   CALL=probe  the stream-K GPU tests; stream-K tuned at TP 8 attn (every prefill bucket) and at TP 1 (M 256 and 512,
#               the neighbours of 333); TP 8 attn and TP 1 at M 256-512 cold against cuBLAS and the persistent kernel
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
esac
