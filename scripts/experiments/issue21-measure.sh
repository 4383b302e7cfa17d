#!/usr/bin/env bash
# The H100 measurements of issue 21 (and the fp8 persistent ncu profile of issue 20), as run on 2026-11-24: one
# device call.  Run from the repository root on the GPU machine with OUT set; docs/BENCHMARKS.md has the results.
set -uo pipefail
O=$OUT
STALLS=barrier,long_scoreboard,wait,math_pipe_throttle,short_scoreboard,mio_throttle,lg_throttle,dispatch_stall
STALLS=$STALLS,not_selected,selected,no_instruction,branch_resolving,membar,drain,sleeping,tex_throttle,imc_miss,misc
M=$(echo "$STALLS" | tr ',' '\n' | sed 's/.*/smsp__average_warps_issue_stalled_&_per_issue_active.ratio/' | paste -sd,)
TP8="--shapes+llama70b-attn+--tp+8+--m+16+--dtype+fp8+--budget+0.2+--variants+cublas_fp8,triton_splitk_atomic"
G405="--shapes+llama3-405b+--m+16+--dtype+fp8+--budget+0.2+--variants+cublas_fp8,triton_splitk_atomic"
OUT=$O TESTS=1 PYTEST_ARGS="-rA --tb=short tests/test_gpu_ceilings.py tests/test_gpu_cupti.py" \
  PROFILES="fp8-prefill:--shapes+llama70b-attn+--tp+1+--m+2048+--dtype+fp8+--variants+cublas_fp8,triton_persistent+--ncu+--metrics+$M " \
  SWEEPS="tp8-cold:$TP8 tp8-cupti:$TP8+--timing+cupti g405-cold:$G405 g405-stream:$G405+--timing+stream heat:--shapes+llama70b+--tp+1+--m+4096+--dtype+bf16+--variants+cublas_bf16+--budget+8" \
  BUDGET_S=${BUDGET_S:-420} bash scripts/device-run.sh
# Issue 21 item 2: AB_REPEAT (5) processes of each side, interleaved (--ab); the candidate plants a 3% slowdown into
# planted_slow_bf16 (tests/plugins/planted_slowdown.py), the baseline runs the same build without it
mkdir -p "$O/ab"
PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} GEMMBENCH_PLANTED_SLOWDOWN=0.03 timeout -s INT "${AB_S:-170}" \
  gemmbench run --shapes llama70b-attn --tp 8 --m 16,64 --dtype bf16,fp8 --budget 0.1 \
  --variants cublas_bf16,cublas_fp8,cublas_fp8_rowwise,planted_slow_bf16 --plugin tests/plugins/planted_slowdown.py \
  --repeat "${AB_REPEAT:-5}" --ab "env GEMMBENCH_PLANTED_SLOWDOWN=0 gemmbench" --out "$O/ab/cand.parquet" >"$O/ab/ab.txt" 2>&1
echo "ab: exit $?" | tee -a "$O/steps.log"
