#!/usr/bin/env bash
# docs/BENCHMARKS.md "Why: Nsight Compute at M 16": Llama3-70B's attention GEMMs at M 16 under ncu, the default variants,
# fp8 and bf16.  Usage: scripts/bench/profile.sh OUT_DIR
set -euo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
gemmbench profile --ncu --shapes llama70b-attn --m 16 --out "$out/attn-m16" > "$out/profile.txt"
