#!/usr/bin/env bash
# Runs on the lent GPU machine (see docs/BENCHMARKS.md): install from the working tree, run the GPU
# tests, then the tunes named in $TUNES and the sweeps named in $SWEEPS.  Logs and Parquet files go to
# $OUT; everything is also packed into $OUT/all.tgz (the device tool returns at most 8 files).
#   TESTS=1|0        pytest -m gpu first (default 1); TESTS_S caps its seconds (default: all that is left)
#   TEST_GPUS=0,1    the tests' xdist workers spread over these GPUs (tests/conftest.py), e.g. with PYTEST_ARGS='-n 16'
#   TUNES="name:args"   each: gemmbench tune args (+ for spaces); they store into gemmbench/kernels/configs
#                       (GEMMBENCH_CONFIG_DIR), packed as configs.tgz (configs/<gpu>/<variant>/…)
#   SWEEPS="name:args"  each: gemmbench run args --out logs/name.parquet, e.g. attn-cold:--shapes+llama70b-attn
#   PROFILES="name:args" each: gemmbench profile args --out logs/name/ (ncu reports and the profile table)
#   LAYERS="name:args"   each: gemmbench layer args --out logs/name.parquet
#   BENCH="decode moe"   each: scripts/bench/NAME.sh logs/NAME (the scripts of docs/BENCHMARKS.md's tables)
#   Order: tests, tunes, profiles, layers, sweeps (the sweeps last: the longest, and a stopped one keeps its rows).  A .whl/ folder (carried) is installed first (the nvtx wheel).
#   BUDGET_S=540        every step is stopped (and what it wrote kept) when this many seconds have passed,
#                       so that the packing at the end still runs inside the tool's 600 s limit
set -uo pipefail
OUT=${OUT:-/tmp/out}
LOG=$OUT/logs
mkdir -p "$LOG"
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-540} ))
left() { echo $(( DEADLINE - $(date +%s) > 1 ? DEADLINE - $(date +%s) : 1 )); }
# The GPU host gets a copy of the tree without .git: pass the commit in, e.g.
#   GEMMBENCH_GIT_SHA=$(git rev-parse --short=12 HEAD) (evaluated on your machine, written into the command)
[ -n "${GEMMBENCH_GIT_SHA:-}" ] || GEMMBENCH_GIT_SHA=$(git rev-parse --short=12 HEAD 2>/dev/null) || true
[ -n "${GEMMBENCH_GIT_SHA:-}" ] && export GEMMBENCH_GIT_SHA
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import platformdirs" 2>/dev/null || {  # a dependency the GPU image lacks (CONTRIBUTING.md)
  echo "platformdirs is missing: carry its wheel in .whl/ (python3 -m pip download --no-deps -d .whl platformdirs)"
  exit 1
}
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOG/install.log" 2>&1 || { cat "$LOG/install.log"; exit 1; }
# The tunes write into the tree's gemmbench/kernels/configs (what configs.tgz packs, and what the project commits), not the
# user's config folder where `gemmbench tune` writes by default; the sweeps read the same files (the pytest run
# sets its own folder: tests/conftest.py)
export GEMMBENCH_CONFIG_DIR=$PWD/gemmbench/kernels/configs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$LOG/gpu.txt"
if [ "${TESTS:-1}" = 1 ]; then
  PYTHONUNBUFFERED=1 GEMMBENCH_TEST_GPUS=${TEST_GPUS:-} timeout -s INT "${TESTS_S:-$(left)}" python3 -m pytest -m gpu -q ${PYTEST_ARGS:-tests/test_gpu.py tests/test_tuning.py} \
    >"$LOG/gpu-tests.log" 2>&1
  tail -40 "$LOG/gpu-tests.log" | tee "$OUT/gpu-tests.log"
fi
step() {  # kind name args
  local kind=$1 name=$2 args=${3//+/ } start=$(date +%s) extra=()
  case $kind in
    run | layer) extra=(--out "$LOG/$name.parquet") ;;
    profile) extra=(--out "$LOG/$name") ;;
  esac
  # SIGINT: gemmbench stops like on Ctrl-C, with the finished rows saved
  PYTHONUNBUFFERED=1 GEMMBENCH_TEST_GPUS=${TEST_GPUS:-} timeout -s INT "$(left)" gemmbench "$kind" $args "${extra[@]}" >"$LOG/$name.txt" 2>"$LOG/$name.err"
  echo "$kind $name: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.log"
}
for t in ${TUNES:-}; do step tune "${t%%:*}" "${t#*:}"; done
[ -n "${TUNES:-}" ] && tar czf "$OUT/configs.tgz" -C gemmbench/kernels configs
for s in ${PROFILES:-}; do step profile "${s%%:*}" "${s#*:}"; done
for s in ${LAYERS:-}; do step layer "${s%%:*}" "${s#*:}"; done
for s in ${SWEEPS:-}; do step run "${s%%:*}" "${s#*:}"; done
for b in ${BENCH:-}; do
  start=$(date +%s)
  PYTHONUNBUFFERED=1 GEMMBENCH_TEST_GPUS=${TEST_GPUS:-} timeout -s INT "$(left)" "scripts/bench/$b.sh" "$LOG/$b" >"$LOG/bench-$b.log" 2>&1
  echo "bench $b: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.log"
done
tar czf "$OUT/all.tgz" -C "$OUT" logs && rm -rf "$LOG"
