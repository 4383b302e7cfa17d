#!/usr/bin/env bash
# docs/BENCHMARKS.md "Decode" and "Budgets": Llama3-70B's attention and MLP GEMMs at decode M, the default variants, fp8 and
# bf16, cold L2; the first sweep is the README's main command, timed.  Usage: scripts/bench/decode.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
start=$(date +%s%N)
gemmbench run --shapes llama70b-attn --out "$out/attn.parquet" > "$out/attn.txt"
echo "main command: $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee "$out/wall.txt"
gemmbench run --shapes llama70b-mlp --m decode --out "$out/mlp.parquet" > "$out/mlp.txt"
python3 scripts/bench_tables.py "$out/attn.parquet" "$out/mlp.parquet" > "$out/table.md"
