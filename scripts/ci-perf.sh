#!/usr/bin/env bash
# The perf gate for any CI with a GPU runner: run the sweep, compare it with a committed baseline, leave the
# Parquet files, the comparison (Markdown for a PR comment, JSON) and plots in $ARTIFACTS, exit 1 on a
# confirmed regression (a `slower` or `now-failing` cell that is flagged again when its variants are re-run at the
# flagged M and dtypes in CONFIRM_PROCESSES fresh processes, default 3: against a baseline of 3 processes or more that
# is a test between processes; CONFIRM=0 fails on the first comparison), 0 otherwise.
#   BASELINE=h200                    a named baseline (./results/baselines/$BASELINE.parquet in the checkout; the
#                                     search path: docs/CI.md), or a path; default: the first baseline measured on
#                                     the runner's GPU model (the package ships h100 and h200); none: exit 2, saying
#                                     how to make one
#   SHAPES="llama70b-attn llama70b-mlp"   shape sets to run, each with --m decode; default: the sets the baseline holds
#   RUN_ARGS="--budget 0.3 --scaling tensor,row"   more `gemmbench run` options; the default runs fp8 per tensor
#                                     and row-wise, the cells the committed baseline holds.  The variants are the
#                                     ones the baseline holds for each set
#   THRESHOLD=5%   FAIL_ON=slower,failing   ARTIFACTS=perf-artifacts   PLOTS=0: no speedup plots in $ARTIFACTS
# Refresh the baseline from a run you trust:  gemmbench baseline save $ARTIFACTS/runs --name h200
set -uo pipefail
if [ -z "${BASELINE:-}" ]; then  # the baseline of this GPU model: compare refuses another model's
  BASELINE=$(SHAPES="${SHAPES:-llama70b-attn llama70b-mlp}" python3 - <<'PY'
import os, re, sys
import torch
from gemmbench.results import named_baselines
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
found = named_baselines.for_gpu(gpu) if gpu else None
if found is None:
    name = re.sub(r"[^a-z0-9]+", "-", (gpu or "cpu").lower().removeprefix("nvidia ")).strip("-")
    runs = " && ".join(f"gemmbench run --shapes {s} --m decode --budget 0.3 --scaling tensor,row --repeat 3 "
                       f"--out base/{s}.parquet" for s in os.environ["SHAPES"].split())
    print(f"no baseline was measured on {gpu or 'this machine (no CUDA GPU)'}: make one on a commit you trust with "
          f"{runs} && gemmbench baseline save base --name {name}; then BASELINE={name} scripts/ci-perf.sh", file=sys.stderr)
    sys.exit(2)
print(found.name)
PY
) || exit 2
fi
# The gate measures the configs a commit holds (the package's gemmbench/kernels/configs), not ones the runner's user tuned:
# those (~/.config/gemmbench/configs) would overlay them.  An empty folder of its own hides them.
GEMMBENCH_CONFIG_DIR=${GEMMBENCH_CONFIG_DIR:-$(mktemp -d)}
export GEMMBENCH_CONFIG_DIR
ARTIFACTS=${ARTIFACTS:-perf-artifacts}
# What the baseline holds: with no set, its shape sets (space-separated); with one, that set's variants
# (comma-separated): the gate times nothing it cannot compare.  A baseline it cannot find or read: one line, exit 2.
baseline_holds() {
  python3 - "$BASELINE" "$@" <<'PY'
import sys
from gemmbench.results import named_baselines, store
try:
    rows = store.load([named_baselines.resolve(sys.argv[1])])
except (named_baselines.BaselineError, store.StoreError) as e:
    print(f"cannot read the baseline: {e}", file=sys.stderr)
    sys.exit(2)
if len(sys.argv) == 2:
    print(" ".join(sorted(set(rows["shape_set"]))))
else:
    print(",".join(sorted(set(rows.loc[rows["shape_set"] == sys.argv[2], "variant"]))))
PY
}
baseline_failed() {  # exit 2 has said why; any other exit (a crash) did not
  [ "$1" = 2 ] || echo "reading the baseline $BASELINE failed (exit $1)" >&2
  exit 2
}
if [ -z "${SHAPES:-}" ]; then
  SHAPES=$(baseline_holds) || baseline_failed $?
fi
mkdir -p "$ARTIFACTS/runs"
for set in $SHAPES; do
  variants=$(baseline_holds "$set") || baseline_failed $?
  [ -n "$variants" ] || { echo "the baseline $BASELINE holds no row of $set: nothing to compare"; exit 2; }
  # shellcheck disable=SC2086  # RUN_ARGS is a list of options
  gemmbench run --shapes "$set" --m decode --variants "$variants" ${RUN_ARGS:---budget 0.3 --scaling tensor,row} \
    --out "$ARTIFACTS/runs/$set.parquet" > "$ARTIFACTS/$set.txt" \
    || { echo "gemmbench run --shapes $set failed (see $ARTIFACTS/$set.txt)"; exit 2; }
done
# --across-gpus: the committed baseline was measured on one GPU, which a CI runner rarely is (without it every cell
# is other-gpu and nothing is compared); the re-run below is what confirms a regression
cmp() {  # runs-folder name: compare.json and compare.md for it; the exit code of the comparison
  gemmbench compare "$BASELINE" "$ARTIFACTS/$1" --threshold "${THRESHOLD:-5%}" --format json --across-gpus \
    --fail-on "${FAIL_ON:-slower,failing}" > "$ARTIFACTS/$2.json"
  gemmbench compare "$BASELINE" "$ARTIFACTS/$1" --threshold "${THRESHOLD:-5%}" --format markdown --across-gpus \
    --fail-on "${FAIL_ON:-slower,failing}" > "$ARTIFACTS/$2.md"
}
cmp runs compare
code=$?
cat "$ARTIFACTS/compare.md"
if [ "$code" = 1 ] && [ "${CONFIRM:-1}" = 1 ]; then
  # A regression must be confirmed: the flagged variants run again, in fresh processes, and only what is
  # flagged again fails the job.  (Measured on an H100: cuBLAS's row-wise fp8 GEMM moved 5-14% between two
  # processes of one build, same kernel; see docs/BENCHMARKS.md.)
  mkdir -p "$ARTIFACTS/retry"
  python3 - "$ARTIFACTS/compare.json" "${FAIL_ON:-slower,failing}" > "$ARTIFACTS/retry.txt" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
fail = {"slower": "slower", "failing": "now-failing", "noisy": "noisy", "missing": "missing"}
want = {fail[x] for x in sys.argv[2].split(",") if x in fail}
hits = [r for r in rows if r["verdict"] in want]
for s in sorted({r["cell"].split()[0] for r in hits}):
    mine = [r for r in hits if r["cell"].split()[0] == s]  # cell: "SET GEMM DTYPE [SCALING] M<m> N<n> K<k>"
    ms = sorted({int(t[1:]) for r in mine for t in r["cell"].split() if t[:1] == "M" and t[1:].isdigit()})
    print(s, ",".join(sorted({r["variant"] for r in mine})), ",".join(map(str, ms)),
          ",".join(sorted({r["cell"].split()[2] for r in mine})))
PY
  while read -r set variants ms dtypes; do
    # only the flagged M and dtypes, in several processes: the test between processes needs them on both sides
    # shellcheck disable=SC2086
    gemmbench run --shapes "$set" --m decode ${RUN_ARGS:---budget 0.3 --scaling tensor,row} --variants "$variants" \
      --m "$ms" --dtype "$dtypes" --repeat "${CONFIRM_PROCESSES:-3}" \
      --out "$ARTIFACTS/retry/$set.parquet" > "$ARTIFACTS/retry-$set.txt" || true
  done < "$ARTIFACTS/retry.txt"
  cmp retry compare-retry
  code=$?
  echo; echo "Re-run of the flagged variants:"; cat "$ARTIFACTS/compare-retry.md"
  cat "$ARTIFACTS/compare-retry.md" >> "$ARTIFACTS/compare.md"
fi
if [ "${PLOTS:-1}" = 1 ] && gemmbench plot --help > /dev/null 2>&1; then  # a convenience: never the verdict
  gemmbench plot "$ARTIFACTS/runs" --kind speedup --out "$ARTIFACTS/plots" > /dev/null 2>&1 || true
fi
[ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$ARTIFACTS/compare.md" >> "$GITHUB_STEP_SUMMARY"
exit $code
