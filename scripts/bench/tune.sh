#!/usr/bin/env bash
# docs/BENCHMARKS.md "Tuning: the quick search against the exhaustive one": the README's main set (llama70b-attn,
# decode, the four default Triton variants, fp8 and bf16) and Mixtral 8x7B's experts at TP 2 (bf16, the 18 token
# counts of vLLM's files) tuned from nothing (empty config folders, an empty Triton cache) by the default search and by
# --exhaustive, each timed; then, bucket by bucket, the quick winner's time over the exhaustive one's (as each tune
# measured it).  The exhaustive main set takes about 15 minutes: give it its own call (PARTS=exhaustive).
# Usage: scripts/bench/tune.sh OUT_DIR   PARTS="quick exhaustive" (default both)
set -uo pipefail
out=${1:?give the output folder}
mkdir -p "$out"
main=(--shapes llama70b-attn --m decode --dtype fp8,bf16
      --variants triton_dp_grouped,triton_persistent,triton_splitk_atomic,triton_streamk)
moe=(--shapes mixtral-moe --tp 2 --dtype bf16 --variants triton_moe_grouped --export vllm "$out/export")
for part in ${PARTS:-quick exhaustive}; do
  flags=()
  [ "$part" = exhaustive ] && flags=(--exhaustive)
  for set in main moe; do
    declare -n args=$set
    start=$(date +%s%N)
    GEMMBENCH_CONFIG_DIR="$out/$part" TRITON_CACHE_DIR="$out/triton-$part-$set" \
      gemmbench tune "${args[@]}" "${flags[@]}" > "$out/$part-$set.txt" 2> "$out/$part-$set.err"
    echo "$part $set: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$out/wall.txt"
  done
done
python3 - "$out/quick" "$out/exhaustive" <<'PY'
import json, statistics, sys
from pathlib import Path
quick, full = map(Path, sys.argv[1:])
ratios = []
for f in sorted(full.glob("*/*/*.json")):
    q = quick / f.relative_to(full)
    if not q.is_file():
        continue
    qb, fb = json.loads(q.read_text())["buckets"], json.loads(f.read_text())["buckets"]
    for b, e in fb.items():
        if b in qb:
            ratios.append(qb[b]["time_us"] / e["time_us"])
            print(f"{f.parent.name} {f.name} bucket {b}: quick {qb[b]['time_us']:.2f} µs ({qb[b]['candidates']} timed), "
                  f"exhaustive {e['time_us']:.2f} µs ({e['candidates']} timed)")
if ratios:
    print(f"{len(ratios)} buckets: quick / exhaustive geomean {statistics.geometric_mean(ratios):.3f}, "
          f"worst {max(ratios):.3f}")
PY
