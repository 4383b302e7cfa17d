#!/usr/bin/env bash
# Issue 21 items 3 and 6 (and issue 20's fp8 ncu profile), as run on the H100 on 2026-11-24 (second session): one
# device call.  Run from the repository root on the GPU machine with OUT set; docs/BENCHMARKS.md has the results.
#  1. scripts/experiments/short_kernel_modes.py first, on a GPU nothing else has touched: the TP 8 M 16 fp8 cells
#     timed cold, cold after idling, warm, and broken down by the profiler's kernel records;
#  2. the GPU tests the last session could not finish (stream-K, telemetry, cupti with its stream-mode names);
#  3. ncu on the same TP 8 cells (the other side of the 10 µs disagreement), and the fp8 persistent kernel's stalls.
set -uo pipefail
O=$OUT
TESTS=0 OUT=$O/install bash scripts/device-run.sh >/dev/null 2>&1
PYTHONPATH=/tmp/site timeout 90 python3 scripts/experiments/short_kernel_modes.py >"$O/short-modes.jsonl" 2>"$O/short-modes.err"
echo "short_kernel_modes: exit $?" | tee -a "$O/steps.log"
STALLS=barrier,long_scoreboard,wait,math_pipe_throttle,short_scoreboard,mio_throttle,lg_throttle,dispatch_stall
STALLS=$STALLS,not_selected,selected,no_instruction,branch_resolving,membar,drain,sleeping,tex_throttle,imc_miss,misc
M=$(echo "$STALLS" | tr ',' '\n' | sed 's/.*/smsp__average_warps_issue_stalled_&_per_issue_active.ratio/' | paste -sd,)
OUT=$O TESTS=1 PYTEST_ARGS="-rA --tb=short tests/test_gpu_streamk.py tests/test_gpu_telemetry.py tests/test_gpu_cupti.py" \
  PROFILES="tp8-ncu:--shapes+llama70b+--tp+8+--m+16+--dtype+fp8+--variants+cublas_fp8,triton_splitk_atomic+--ncu fp8-prefill:--shapes+llama70b-attn+--tp+1+--m+2048+--dtype+fp8+--variants+cublas_fp8,triton_persistent+--ncu+--metrics+$M" \
  BUDGET_S=${BUDGET_S:-480} bash scripts/device-run.sh
