#!/usr/bin/env bash
# The device calls of issues 20 and 21 after launch_hold (H100, 2026-11-24, second session), one per CALL:
#   CALL=tests  short_kernel_modes.py on a fresh GPU, every `-m gpu` test but the cupti one (4 workers), then the
#               cupti one alone (-rA: its ncu comparison lines are the BENCHMARKS table)
#   CALL=llama  the issue 20 target table for llama70b at TP 1, 2, 4, 8 in stream mode, and TP 8 cold again
#   CALL=rest   the GPU tests of layer and telemetry (changed since the tests call); a clean heating sweep; Qwen2.5-72B's table in stream mode; TP 8 QKV fp8 decode in stream; Llama3-405B
#               cuBLAS fp8 cold and stream (kernel names); the A/B of issue 21 item 2
# Run from the repository root on the GPU machine with OUT set (and GEMMBENCH_GIT_SHA); results in docs/BENCHMARKS.md.
set -uo pipefail
O=$OUT
R=results/h100-2026-11-24-issue20
SMALL=17,100,128,256,333
LARGE=512,1000,2048,3000,4096
V=cublas_bf16,cublas_fp8,triton_persistent,triton_dp_grouped
table() {  # name shapes tps mode: the small-M sweep (with SplitK) and the large-M one
  echo "$1-small-$4:--shapes+$2+--tp+$3+--m+$SMALL+--dtype+fp8,bf16+--budget+0.05+--timing+$4+--variants+$V,triton_splitk_atomic" \
       "$1-large-$4:--shapes+$2+--tp+$3+--m+$LARGE+--dtype+fp8,bf16+--budget+0.05+--timing+$4+--variants+$V"
}
case ${CALL:?} in
tests)
  TESTS=0 OUT=$O/install bash scripts/device-run.sh >/dev/null 2>&1  # install only
  PYTHONPATH=/tmp/site timeout 100 python3 scripts/experiments/short_kernel_modes.py >"$O/short-modes.jsonl" 2>"$O/short-modes.err"
  echo "short_kernel_modes: exit $?" | tee -a "$O/steps.log"
  OUT=$O/suite TESTS=1 BUDGET_S=250 PYTEST_ARGS="-n 4 -p xdist --ignore=tests/test_gpu_cupti.py tests" bash scripts/device-run.sh
  OUT=$O/cupti TESTS=1 BUDGET_S=280 PYTEST_ARGS="-rA --tb=short tests/test_gpu_cupti.py" bash scripts/device-run.sh
  ;;
llama)
  OUT=$O TESTS=0 BUDGET_S=560 SWEEPS="$(table llama70b-tp1248 llama70b 1,2,4,8 stream) $(table llama70b-tp8 llama70b 8 cold)" \
    bash scripts/device-run.sh
  ;;
rest)
  D="--dtype+fp8+--budget+0.2+--variants+cublas_fp8"
  OUT=$O TESTS=1 BUDGET_S=330 PYTEST_ARGS="-rA --tb=short tests/test_gpu_layer.py tests/test_gpu_telemetry.py" \
    SWEEPS="heat:--shapes+llama70b+--tp+1+--m+4096+--dtype+bf16+--variants+cublas_bf16+--budget+8 $(table qwen2.5-72b $R/qwen2.5-72b-qkv-down.yaml 1,8 stream) tp8-qkv-decode-stream:--shapes+$R/llama70b-tp8-qkv.yaml+--m+1,2,4,8,16+$D,triton_splitk_atomic,triton_streamk+--timing+stream g405-cold:--shapes+llama3-405b+--m+16+$D g405-stream:--shapes+llama3-405b+--m+16+$D+--timing+stream" \
    bash scripts/device-run.sh
  # Issue 21 item 2: five processes a side, interleaved; the candidate plants a 3% slowdown (tests/plugins/planted_slowdown.py)
  # on kernels of 0.1-1 ms (Llama3-70B attn at TP 1, M 512 and 2048), where the spin's own launch is small beside 3%
  mkdir -p "$O/ab"
  PYTHONPATH=/tmp/site GEMMBENCH_PLANTED_SLOWDOWN=0.03 timeout -s INT 240 \
    gemmbench run --shapes llama70b-attn --tp 1 --m 512,2048 --dtype bf16,fp8 --budget 0.2 \
    --variants cublas_bf16,cublas_fp8,triton_persistent,planted_slow_bf16 --plugin tests/plugins/planted_slowdown.py \
    --repeat 5 --ab "env GEMMBENCH_PLANTED_SLOWDOWN=0 gemmbench" --out "$O/ab/cand.parquet" >"$O/ab/ab.txt" 2>&1
  echo "ab: exit $?" | tee -a "$O/steps.log"
  ;;
esac
