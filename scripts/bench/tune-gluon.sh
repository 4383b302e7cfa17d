#!/usr/bin/env bash
# docs/BENCHMARKS.md "The Gluon kernel against its targets (H200)": the tune behind gluon_ws's shipped configs, on the
# targets' shapes: fp8 promoted at M 512-4096 (Llama3-70B TP 1-8, Llama3-405B and Qwen2.5-72B TP 8), every contract at
# M 128, 256 and 512 (Llama3-70B TP 1 and 8; an M between two stored buckets runs the faster of their configs), fp8
# promoted at M 128-4096 on the QKV weights (Llama3-70B TP 2, 4 and 8, Llama3-405B TP 8; searched again, longer: the
# narrowest outputs, with fewer tiles than SMs at the small M and a partial last wave of tiles at the large), and
# block scales at M 512-4096 (DeepSeek-V3 TP 1 and 8).  Writes into CONFIG_DIR, which starts as a copy of the shipped
# gluon_ws files (a file already there is kept), so that the buckets tuned here replace theirs and the others stay:
# copy its <GPU>/gluon_ws/*.json over gemmbench/kernels/configs's to ship them.  Every bucket named is tuned again,
# its shipped config in the race (kept unless beaten beyond the noise): --skip-stored would count it as tuned.
# Usage: scripts/bench/tune-gluon.sh CONFIG_DIR
set -euo pipefail
export GEMMBENCH_CONFIG_DIR=${1:?give the config folder}
for shipped in gemmbench/kernels/configs/*/gluon_ws; do
  into=$GEMMBENCH_CONFIG_DIR/$(basename "$(dirname "$shipped")")/gluon_ws
  mkdir -p "$into"
  for file in "$shipped"/*.json; do [ -e "$into/${file##*/}" ] || cp "$file" "$into/"; done
done
tune() { gemmbench tune --variants gluon_ws "$@"; }
prefill=(--m 512,1024,2048,4096 --dtype fp8 --fp8-accum precise --time-budget 3)
for tp in 8 4 2 1; do tune --shapes llama70b --tp "$tp" "${prefill[@]}"; done
tune --shapes llama3-405b --tp 8 "${prefill[@]}"
tune --shapes qwen2.5-72b --tp 8 "${prefill[@]}"
tune --shapes llama70b --tp 1,8 --m 128,256,512 --dtype bf16 --time-budget 3
tune --shapes llama70b --tp 1,8 --m 128,256,512 --dtype fp8 --fp8-accum fast --time-budget 3
tune --shapes llama70b --tp 1,8 --m 128,256 --dtype fp8 --fp8-accum precise --time-budget 3
qkv=$GEMMBENCH_CONFIG_DIR/qkv-small-outputs.yaml  # the QKV weights alone: the sets' other GEMMs fill the SMs better
printf 'name: qkv-small-outputs\ndescription: TP 2-8 QKV weights\nm: [128]\ngemms:\n' > "$qkv"
for nk in 1280:8192 2560:8192 5120:8192 2304:16384; do
  printf '  - {id: qkv_n%s, N: %s, K: %s, parallel: none}\n' "${nk%%:*}" "${nk%%:*}" "${nk##*:}" >> "$qkv"
done
tune --shapes "$qkv" --m 128,256,512,1024,2048,4096 --dtype fp8 --fp8-accum precise --time-budget 10
tune --shapes deepseek-v3 --tp 1,8 --m 512,1024,2048,4096 --dtype fp8 --scaling block --time-budget 2
