#!/usr/bin/env bash
# docs/BENCHMARKS.md "Targets against cuBLAS": every sweep runs in 3 processes, one file each (NAME-1..3.parquet), and
# the table gives the median over processes and the worst process.  The variants and their configs are what the shipped
# tuned configs select (a shape without a stored config chooses among quick candidates in the run).  A file already
# there is resumed, so the parts can be spread over several GPU calls.
# The gluon-* parts hold the Gluon kernel alone against cuBLAS of each contract ("The Gluon kernel against its
# targets"): fp8 promoted at M 512-4096, every contract at M 128-511, block scales on DeepSeek-V3's dense GEMMs.
# Usage: scripts/bench/targets.sh OUT_DIR [PART ...]   PART: llama70b llama3-405b qwen2.5-72b between decode
# gluon-promoted gluon-between gluon-block (default: $TARGET_PARTS, else the first five)
set -euo pipefail
out=${1:?give the output folder}
shift
parts=${*:-${TARGET_PARTS:-llama70b llama3-405b qwen2.5-72b between decode}}
mkdir -p "$out"
prefill='cublas_bf16,cublas_fp8,triton_persistent,triton_streamk,gluon_ws'
sweep() {  # NAME gemmbench-run-arguments...
  local name=$1 p f where
  shift
  for p in 1 2 3; do
    f=$out/$name-$p.parquet
    if [ -f "$f" ]; then where=--resume; else where=--out; fi
    gemmbench run "$@" "$where" "$f" > "$out/$name-$p.txt"
  done
}
for part in $parts; do
  case $part in
    llama70b) sweep llama70b --shapes llama70b --tp 1,2,4,8 --m 512,1024,2048,4096 --dtype bf16,fp8 \
      --fp8-accum precise,fast --variants "$prefill" --budget 0.2 ;;
    llama3-405b | qwen2.5-72b) sweep "$part" --shapes "$part" --tp 8 --m 512,1024,2048,4096 --dtype bf16,fp8 \
      --fp8-accum precise,fast --variants "$prefill" --budget 0.2 ;;
    between) sweep between --shapes llama70b --tp 1,8 --m 128,333,777,1500,3000 --dtype bf16,fp8 \
      --variants "$prefill" --budget 0.2 ;;
    decode) sweep decode --shapes llama70b --tp 1,2,4,8 --m 1,16,64 --dtype bf16,fp8 --timing stream --budget 0.2 ;;
    gluon-promoted)
      for set in llama70b llama3-405b qwen2.5-72b; do
        case $set in llama70b) tp=1,2,4,8 ;; *) tp=8 ;; esac
        sweep "gluon-promoted-$set" --shapes "$set" --tp "$tp" --m 512,1024,2048,4096 --dtype fp8 --fp8-accum precise \
          --variants cublas_fp8,gluon_ws --budget 0.2
      done ;;
    gluon-between) sweep gluon-between --shapes llama70b --tp 1,8 --m 128,333 --dtype bf16,fp8 \
      --fp8-accum precise,fast --variants cublas_bf16,cublas_fp8,gluon_ws --budget 0.2 ;;
    gluon-block) sweep gluon-block --shapes deepseek-v3 --tp 1,8 --m 512,1024,2048,4096 --dtype fp8 --scaling block \
      --variants cublas_fp8_block,gluon_ws --budget 0.2 ;;
    *) echo "targets.sh: unknown part '$part' (llama70b llama3-405b qwen2.5-72b between decode gluon-promoted" \
         "gluon-between gluon-block)" >&2; exit 2 ;;
  esac
done
python3 scripts/bench_tables.py --targets "$out"/*-[123].parquet > "$out/table.md"
