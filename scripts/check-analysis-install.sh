#!/usr/bin/env bash
# The commands that read results, installed without the GPU stack (torch, triton, nvtx, nvidia-ml-py: the `gpu`
# extra): each runs on the shipped baseline, and a kernel command stops with one line.  Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=/tmp/gemmbench-analysis-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q -e .
gb="$venv/bin/gemmbench"
for module in torch triton nvtx pynvml; do
  if "$venv/bin/python" -c "import $module" 2>/dev/null; then echo "analysis install: $module is there"; exit 1; fi
done
work=$(mktemp -d)
base=gemmbench/baselines/h100.parquet
# a second run to compare with: the baseline's rows under another run id
"$venv/bin/python" -c "import sys, pyarrow as pa, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); \
i = t.column_names.index('run_id'); pq.write_table(t.set_column(i, 'run_id', pa.array(['copy'] * t.num_rows)), sys.argv[2])" \
  "$base" "$work/copy.parquet"
"$gb" list shapes >/dev/null
"$gb" baseline list >/dev/null
"$gb" baseline save "$base" --name b --dir "$work/baselines" >/dev/null
"$gb" compare "$base" "$work/copy.parquet" --format markdown >/dev/null
"$gb" merge "$base" --out "$work/merged.parquet" --allow-missing >/dev/null 2>&1 || test -f "$work/merged.parquet"
"$gb" plot "$base" --kind tflops,speedup,roofline --out "$work/plots" >/dev/null
"$gb" report "$base" --out "$work/report" >/dev/null
# a command that runs kernels: one line, exit 2
set +e
"$gb" run --shapes smoke 2>"$work/run.err"
code=$?
set -e
lines=$(grep -c . "$work/run.err")
if [ "$code" != 2 ] || [ "$lines" != 1 ] || ! grep -q "needs torch (the \`gpu\` extra" "$work/run.err"; then
  echo "analysis install: \`gemmbench run\` did not stop with one line (exit $code):"; cat "$work/run.err"; exit 1
fi
echo "analysis install: plot, report, compare, merge, baseline and list shapes ran without torch or triton"
