#!/usr/bin/env bash
# docs/BENCHMARKS.md "Configs across GPUs": the shipped sets' decode cells on this GPU three ways, no config stored:
# with its own shipped configs, with the nearest GPU's borrowed (--no-own --borrow), and searched in the run
# (--no-own).  Each in 2 processes (--repeat 2); then the table (scripts/bench_tables.py --transfer).
# Usage: scripts/bench/transfer.sh OUT_DIR [SET ...]   (default: llama70b-attn)
set -euo pipefail
out=${1:?give the output folder}
shift
sets=${*:-llama70b-attn}
mkdir -p "$out"
GEMMBENCH_CONFIG_DIR=$(mktemp -d)  # the user's configs must not overlay the shipped ones
export GEMMBENCH_CONFIG_DIR
for set in $sets; do
  for how in own borrowed searched; do
    case $how in
      own) flags=() ;;
      borrowed) flags=(--no-own --borrow) ;;
      searched) flags=(--no-own) ;;
    esac
    gemmbench run --shapes "$set" --m decode --no-store "${flags[@]}" --repeat 2 --out "$out/$set-$how.parquet" \
      > "$out/$set-$how.txt"
  done
  python3 scripts/bench_tables.py --transfer "$out/$set-own.parquet" "$out/$set-borrowed.parquet" \
    "$out/$set-searched.parquet" > "$out/$set-table.md" || true
done
