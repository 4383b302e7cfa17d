#!/usr/bin/env bash
# docs/BENCHMARKS.md "A decoder layer": Llama3-70B's layer at TP 8 in fp8 and Mixtral 8x7B's at TP 2 in bf16, at
# decode M: the kernels' sum, eager launches and one CUDA graph.  Usage: scripts/bench/layer.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
gemmbench layer --model llama3-70b --tp 8 --dtype fp8 --m 1,16,64 --out "$out/llama70b.parquet" > "$out/llama70b.txt"
gemmbench layer --model mixtral-8x7b --tp 2 --dtype bf16 --m 1,16,64 --out "$out/mixtral.parquet" > "$out/mixtral.txt"
