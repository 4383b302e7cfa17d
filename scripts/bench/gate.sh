#!/usr/bin/env bash
# docs/BENCHMARKS.md "Budgets" and "The shipped baseline": measures the shipped baseline of this GPU model (the
# gate's own sweep, saved as NAME.parquet), then runs scripts/ci-perf.sh against it, timed: same build, so every cell
# should be `same`.
# The baseline is REPEAT processes (default 3), so that the gate's confirmation is a test between processes.
# Usage: NAME=h200 [SETS="llama70b-attn llama70b-mlp"] [REPEAT=3] scripts/bench/gate.sh OUT_DIR   (then copy
# OUT_DIR/NAME.parquet to gemmbench/baselines/ to ship it)
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out/baseline"
# the configs the commit ships (with what they borrow), not a user's; ci-perf.sh does the same
GEMMBENCH_CONFIG_DIR=$(mktemp -d)
export GEMMBENCH_CONFIG_DIR
for set in ${SETS:-llama70b-attn llama70b-mlp}; do
  gemmbench run --shapes "$set" --m decode --budget 0.3 --scaling tensor,row --repeat "${REPEAT:-3}" \
    --out "$out/baseline/$set.parquet" > "$out/baseline-$set.txt"
done
name=${NAME:-h200}
gemmbench baseline save "$out/baseline" --name "$name" --dir "$out" --force
start=$(date +%s%N)
code=0
BASELINE="$out/$name.parquet" ARTIFACTS="$out/gate" scripts/ci-perf.sh > "$out/gate.txt" 2>&1 || code=$?
echo "gate: exit $code in $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee "$out/wall.txt"
python3 scripts/bench_tables.py "$out/$name.parquet" > "$out/table.md"
