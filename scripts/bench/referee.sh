#!/usr/bin/env bash
# docs/BENCHMARKS.md "The referee": every exploit plugin against the referee in cold, stream and graph timing and the
# honest sets (tests/test_gpu_referee.py, their rows kept under OUT_DIR/pytest), then the README's main command twice
# (a fresh start, then warm) with the time the referee took in each worker summed (referee_timing/sitecustomize.py).
# Usage: scripts/bench/referee.sh OUT_DIR
set -uo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
python3 -m pytest -m gpu -q -rA -p no:cacheprovider --basetemp="$out/pytest" tests/test_gpu_referee.py > "$out/tests.log" 2>&1
tail -3 "$out/tests.log"
for pass in fresh warm; do
  rm -f "$out/judge-$pass.txt"
  start=$(date +%s%N)
  PYTHONPATH=scripts/bench/referee_timing${PYTHONPATH:+:$PYTHONPATH} GEMMBENCH_REFEREE_TIMES="$out/judge-$pass.txt" \
    gemmbench run --shapes llama70b-attn --out "$out/main-$pass.parquet" > "$out/main-$pass.txt"
  wall=$(( ($(date +%s%N) - start) / 1000000 ))
  awk -v wall="$wall" -v pass="$pass" '{s += $1} END {printf "%s: referee %.3f s over %d rows, main command %.1f s (%.2f%%)\n",
    pass, s, NR, wall / 1000, 100 * s / (wall / 1000)}' "$out/judge-$pass.txt" | tee -a "$out/cost.txt"
done
python3 - "$out" <<'PY'
import glob, sys
from gemmbench.results import store
for f in sorted(glob.glob(f"{sys.argv[1]}/**/*.parquet", recursive=True)):
    df = store.load([f])
    ok = df[(df.status == "ok") & df.pct_of_roofline.notna()]
    print(f, dict(df.status.value_counts()), "highest ok % of roofline:", round(float(ok.pct_of_roofline.max()), 1) if len(ok) else "-")
PY
