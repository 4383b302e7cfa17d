#!/usr/bin/env bash
# Runs on the lent GPU machine (see docs/BENCHMARKS.md): install from the working tree, run the GPU
# tests, then the sweeps named in $SWEEPS.  Logs and Parquet files go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# The GPU host gets a copy of the tree without .git: pass the commit in, e.g.
#   GEMMBENCH_GIT_SHA=$(git rev-parse --short=12 HEAD) (evaluated on your machine, written into the command)
[ -n "${GEMMBENCH_GIT_SHA:-}" ] || GEMMBENCH_GIT_SHA=$(git rev-parse --short=12 HEAD 2>/dev/null) || true
[ -n "${GEMMBENCH_GIT_SHA:-}" ] && export GEMMBENCH_GIT_SHA
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
if [ "${TESTS:-1}" = 1 ]; then
  PYTHONUNBUFFERED=1 python3 -m pytest -m gpu -q -x tests/test_gpu.py 2>&1 | tail -40 | tee "$OUT/gpu-tests.log"
fi
for sweep in ${SWEEPS:-}; do  # each: name:args with + for spaces, e.g. attn-cold:--shapes+llama70b-attn
  name=${sweep%%:*}; args=${sweep#*:}; args=${args//+/ }
  start=$(date +%s)
  PYTHONUNBUFFERED=1 gemmbench run $args --out "$OUT/$name.parquet" >"$OUT/$name.txt" 2>"$OUT/$name.err"
  echo "$name: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/sweeps.log"
done
