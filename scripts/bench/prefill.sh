#!/usr/bin/env bash
# docs/BENCHMARKS.md "Prefill": Llama3-70B's GEMMs (QKV, o, gate+up, down, LM head) at TP 8, prefill M, the default variants, fp8 and bf16,
# cold L2.  Usage: scripts/bench/prefill.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
gemmbench run --shapes llama70b --tp 8 --m 512,1024,2048,4096 --out "$out/prefill.parquet" > "$out/prefill.txt"
python3 scripts/bench_tables.py "$out/prefill.parquet" > "$out/table.md"
