#!/usr/bin/env bash
# On a GPU machine: a kernel that kills its process costs only its own cell in run, tune, profile and layer alike
# (the engine's pool: the item in flight is blamed by name, a fresh worker carries on).  Prints one verdict line
# per command and leaves the files in $OUT/engine.  Needs ncu on the PATH for the profile step.
#   bash scripts/engine-check.sh        (after `pip install -e .`)
set -uo pipefail
OUT=${OUT:-/tmp/out}/engine
mkdir -p "$OUT"
P=tests/plugins
export GEMMBENCH_CONFIG_DIR=$OUT/configs  # tune writes here, never into the checkout
verdict() {  # name, python condition over the table `df` (or `ok` for a command's exit code), file
  python3 - "$@" <<'PY'
import sys
import pandas as pd
name, cond, path = sys.argv[1:4]
df = pd.read_parquet(path) if path.endswith(".parquet") else None
ok = eval(cond)
print(f"{name}: {'PASS' if ok else 'FAIL'}")
if df is not None:
    cols = [c for c in ("gemm", "M", "variant", "status", "reason", "ncu_kernel", "part") if c in df.columns]
    print(df[cols].to_string(max_colwidth=90))
PY
}
gemmbench run --shapes llama70b-attn --m 1,16 --dtype fp8 --variants 'cublas_fp8,test_crash' --plugin $P/crash_plugin.py \
  --budget 0.1 --out "$OUT/run.parquet" >"$OUT/run.txt" 2>&1
verdict run "((df.variant=='test_crash') == (df.status=='error')).all() and df[df.variant=='test_crash'].reason.str.contains('worker died').all() and len(df)==8" "$OUT/run.parquet"
gemmbench tune --shapes llama70b-attn --tp 8 --m 16 --dtype fp8 --variants 'triton_splitk_atomic,test_crash_tune' \
  --plugin $P/crash_tune_plugin.py >"$OUT/tune.txt" 2>&1
echo "tune exit $? (1 expected: the crashing jobs failed)"
grep -E "^failed: " "$OUT/tune.txt"
verdict tune "len(list(__import__('pathlib').Path('$OUT/configs').rglob('*.json'))) == 2 and open('$OUT/tune.txt').read().count('failed: test_crash_tune') == 2" none
gemmbench profile --ncu --shapes llama70b-attn --tp 8 --m 16 --dtype fp8 --variants 'cublas_fp8,test_crash' \
  --plugin $P/crash_plugin.py --out "$OUT/prof" >"$OUT/profile.txt" 2>&1
verdict profile "set(df[df.variant=='test_crash'].status)=={'error'} and (df[df.variant=='cublas_fp8'].status=='ok').all()" "$(ls "$OUT"/prof/*-profile.parquet)"
gemmbench layer --model llama3-70b --tp 8 --m 1,16 --dtype fp8 --variants 'cublas_*,attn_o=test_crash' \
  --plugin $P/crash_plugin.py --out "$OUT/layer-crash.parquet" >"$OUT/layer-crash.txt" 2>&1
gemmbench layer --model llama3-70b --tp 8 --m 1,16 --dtype fp8 --out "$OUT/layer.parquet" >"$OUT/layer.txt" 2>&1
verdict layer-crash "(df.status=='error').all() and df[df.part=='layer'].reason.str.contains('worker died').all()" "$OUT/layer-crash.parquet"
verdict layer "(df.status=='ok').all() and df[df.part=='layer'].graph_us.notna().all()" "$OUT/layer.parquet"
