#!/usr/bin/env bash
# docs/BENCHMARKS.md "Fused MoE": Mixtral 8x7B's expert GEMMs at TP 2 from 1 to 4096 tokens, bf16 and fp8, the
# default variants and every fused schedule, cold and stream.  Usage: scripts/bench/moe.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
for timing in cold stream; do
  gemmbench run --shapes mixtral-moe --tp 2 --m 1,16,64,256,1024,4096 --dtype bf16,fp8 --timing "$timing" \
    --variants 'torch_moe_loop,triton_moe_*' --out "$out/moe-$timing.parquet" > "$out/moe-$timing.txt"
done
python3 scripts/bench_tables.py --moe "$out/moe-cold.parquet" > "$out/table.md"
python3 scripts/bench_tables.py --moe "$out/moe-stream.parquet" >> "$out/table.md"
