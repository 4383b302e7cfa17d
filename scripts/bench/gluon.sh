#!/usr/bin/env bash
# docs/BENCHMARKS.md "The Gluon kernel, step by step": Llama3-70B's GEMMs at TP 1 and 8, M 2048, bf16 and fp8 (precise and
# fast accumulation), cuBLAS against triton_persistent and the Gluon kernel's steps (one program per tile, persistent,
# warp-specialized), cold L2.  Usage: scripts/bench/gluon.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
gemmbench run --shapes llama70b --tp 1,8 --m 2048 --dtype bf16,fp8 --fp8-accum precise,fast \
  --variants 'cublas_bf16,cublas_fp8,triton_persistent,gluon_*' --out "$out/gluon.parquet" > "$out/gluon.txt"
python3 scripts/bench_tables.py "$out/gluon.parquet" --group pipelined=gluon_pipelined \
  --group persistent=gluon_persistent --group ws=gluon_ws --group triton=triton_persistent > "$out/table.md"
