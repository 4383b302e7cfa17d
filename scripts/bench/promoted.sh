#!/usr/bin/env bash
# docs/BENCHMARKS.md "Promoted fp8: the waves and the halves": gluon_ws against cuBLAS on Llama3-70B's GEMMs at TP 1-8,
# M 512-4096, fp8 with promotion (cuBLAS's default contract), cold L2, one process, gluon_ws choosing among its quick
# candidates in the run.  Run it at two commits (NAME before and after), then render them side by side.
# Usage: scripts/bench/promoted.sh OUT_DIR NAME   then   python3 scripts/bench_tables.py --versus OUT/A.parquet OUT/B.parquet
set -euo pipefail
out=${1:?give the output folder}
name=${2:?give the run a name, e.g. after}
mkdir -p "$out"
gemmbench run --shapes llama70b --tp 1,2,4,8 --m 512,1024,2048,4096 --dtype fp8 --fp8-accum precise \
  --variants cublas_fp8,gluon_ws --budget 0.2 --out "$out/$name.parquet" > "$out/$name.txt"
