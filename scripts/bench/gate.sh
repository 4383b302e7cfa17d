#!/usr/bin/env bash
# docs/BENCHMARKS.md "Budgets" and "The shipped baseline": measures the shipped baseline (the gate's own sweep, saved as h100.parquet), then
# runs scripts/ci-perf.sh against it, timed: same build, so every cell should be `same`.
# Usage: scripts/bench/gate.sh OUT_DIR   (then copy OUT_DIR/h100.parquet to gemmbench/baselines/ to ship it)
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out/baseline"
for set in llama70b-attn llama70b-mlp; do
  gemmbench run --shapes "$set" --m decode --budget 0.3 --scaling tensor,row --out "$out/baseline/$set.parquet" \
    > "$out/baseline-$set.txt"
done
gemmbench baseline save "$out/baseline" --name h100 --dir "$out" --force
start=$(date +%s%N)
code=0
BASELINE="$out/h100.parquet" ARTIFACTS="$out/gate" scripts/ci-perf.sh > "$out/gate.txt" 2>&1 || code=$?
echo "gate: exit $code in $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee "$out/wall.txt"
python3 scripts/bench_tables.py "$out/h100.parquet" > "$out/table.md"
