#!/usr/bin/env bash
# docs/BENCHMARKS.md "The Gluon kernel": gluon_ws on every built-in dense shape set, bf16 and fp8 (per tensor and
# row-wise, DeepSeek-V3 also block scales; precise and fast accumulation), M 1, 333 and 2048: every row must be ok or
# skipped with its reason (bf16 carries no scales; block scales have no fast accumulation; MoE GEMMs are not dense).
# Usage: scripts/bench/gluon-sets.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
for set in smoke seed001-tkgemm gpt-oss-120b llama4-scout llama4-maverick qwen3-30b-a3b qwen3-235b-a22b llama70b \
  qwen2.5-72b llama3-405b deepseek-v3; do
  scalings=tensor,row
  [ "$set" = deepseek-v3 ] && scalings=tensor,row,block
  gemmbench run --shapes "$set" --variants gluon_ws --m 1,333,2048 --dtype bf16,fp8 --scaling "$scalings" \
    --fp8-accum precise,fast --budget 0.02 --out "$out/$set.parquet" > "$out/$set.txt"
  python3 scripts/bench_tables.py "$out/$set.parquet" | head -1
done
