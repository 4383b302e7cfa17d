#!/usr/bin/env bash
# The perf gate for any CI with a GPU runner: run the sweep, compare it with a committed baseline, leave the
# Parquet files, the comparison (Markdown for a PR comment, JSON) and plots in $ARTIFACTS, exit 1 on a
# confirmed regression (a `slower` or `now-failing` cell), 0 otherwise.
#   BASELINE=h100                    results/baselines/$BASELINE.parquet (or a path)
#   SHAPES="llama70b-attn llama70b-mlp"   shape sets to run, each with --m decode
#   RUN_ARGS="--budget 0.3"           more `gemmbench run` options (e.g. --variants ...)
#   THRESHOLD=5%   FAIL_ON=slower,failing   ARTIFACTS=perf-artifacts
# Refresh the baseline from a run you trust:  gemmbench baseline save $ARTIFACTS/runs --name h100
set -uo pipefail
BASELINE=${BASELINE:-h100}
SHAPES=${SHAPES:-"llama70b-attn llama70b-mlp"}
ARTIFACTS=${ARTIFACTS:-perf-artifacts}
mkdir -p "$ARTIFACTS/runs"
for set in $SHAPES; do
  # shellcheck disable=SC2086  # RUN_ARGS is a list of options
  gemmbench run --shapes "$set" --m decode ${RUN_ARGS:---budget 0.3} --out "$ARTIFACTS/runs/$set.parquet" \
    > "$ARTIFACTS/$set.txt" || { echo "gemmbench run --shapes $set failed (see $ARTIFACTS/$set.txt)"; exit 2; }
done
gemmbench compare "$BASELINE" "$ARTIFACTS/runs" --threshold "${THRESHOLD:-5%}" --format json \
  --fail-on "${FAIL_ON:-slower,failing}" > "$ARTIFACTS/compare.json"
gemmbench compare "$BASELINE" "$ARTIFACTS/runs" --threshold "${THRESHOLD:-5%}" --format markdown \
  --fail-on "${FAIL_ON:-slower,failing}" > "$ARTIFACTS/compare.md"
code=$?
cat "$ARTIFACTS/compare.md"
if gemmbench plot --help > /dev/null 2>&1; then  # plots are a convenience: they never decide the verdict
  gemmbench plot "$ARTIFACTS/runs" --kind speedup --out "$ARTIFACTS/plots" > /dev/null 2>&1 || true
fi
[ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$ARTIFACTS/compare.md" >> "$GITHUB_STEP_SUMMARY"
exit $code
