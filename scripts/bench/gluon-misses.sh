#!/usr/bin/env bash
# docs/BENCHMARKS.md "The Gluon kernel against its targets (H200)", its misses under Nsight Compute (--set full): fp8
# promoted at M 1024 (TP 8's QKV of Llama3-70B and Llama3-405B, Llama3-70B's TP 8 gate+up), block scales at M 1024
# (DeepSeek-V3's dense down projection at TP 1), and TP 8's QKV in bf16 at M 128, once as the run chooses and once
# split 13 ways (a config folder holding that one config).  Each against cuBLAS of its contract; gluon_ws's config
# is the run's own choice among its quick candidates (no stored config), as when these were measured.  Part `mem`:
# the memory-bound M 128 misses (Llama3-70B's TP 8 down and gate+up, TP 1's attention output) with the shipped configs,
# fp8 fast and bf16.  Part `classes`: one cell of each kind of miss left in the targets' run, with the shipped configs:
# block scales (DeepSeek-V3's shared gate+up, gate+up and TP 8's lm_head at M 2048, TP 1's lm_head at M 1024, TP 1's
# attention output and TP 8's q_b at M 512) and fp8 promoted (QKV of N 2304 and 1280 and Qwen2.5-72B's gate+up at
# M 512, its down at M 4096 and lm_head at M 2048, N 1280 at M 128).  Part `rest`: the misses no part above profiles
# with the shipped configs: fp8 promoted at M 1024 (QKV of N 2304 and 2560, TP 8's gate+up), TP 8's QKV at M 128 in
# bf16 and fp8 fast, and at M 333 (no stored bucket: the run's choice among its buckets' and fitted configs) in bf16.
# Usage: scripts/bench/gluon-misses.sh OUT_DIR [PART...]   (parts: promoted block qkv mem classes rest; default: all)
set -euo pipefail
out=${1:?give the output folder}
shift
parts=" ${*:-promoted block qkv mem classes rest} "
mkdir -p "$out/split13/NVIDIA_H200/gluon_ws"
shapes() {  # NAME M GEMM:N:K ...: a shape set of fixed GEMMs
  local name=$1 m=$2 g
  shift 2
  printf 'name: %s\ndescription: Gluon misses profiled\nm: [%s]\ngemms:\n' "$name" "$m" > "$out/$name.yaml"
  for g in "$@"; do
    IFS=: read -r id n k <<< "$g"
    printf '  - {id: %s, N: %s, K: %s, parallel: none}\n' "$id" "$n" "$k" >> "$out/$name.yaml"
  done
}
shapes promoted 1024 qkv_1280:1280:8192 qkv_2304:2304:16384 gate_up_7168:7168:8192
shapes block 1024 down_7168:7168:18432
shapes qkv 128 qkv_1280:1280:8192
shapes mem 128 down_8192:8192:3584 o_8192:8192:8192 gate_up_7168:7168:8192
shapes b2048 2048 shared_gate_up_4096:4096:7168 gate_up_36864:36864:7168 lm_head_16160:16160:7168
shapes b1024 1024 lm_head_129280:129280:7168
shapes b512 512 o_7168:7168:16384 q_b_3072:3072:1536
shapes p512 512 qkv_2304:2304:16384 gate_up_7392:7392:8192 qkv_1280:1280:8192
shapes p4096 4096 down_8192:8192:3696
shapes p2048 2048 lm_head_19008:19008:8192
shapes p128 128 qkv_1280:1280:8192
shapes r1024 1024 qkv_2304:2304:16384 qkv_2560:2560:8192 gate_up_7168:7168:8192
shapes r333 333 qkv_1280:1280:8192
cat > "$out/split13/NVIDIA_H200/gluon_ws/N=1280,K=8192,dtype=bf16.json" <<'JSON'
{"variant": "gluon_ws", "gpu": "NVIDIA H200", "N": 1280, "K": 8192, "dtype": "bf16", "buckets": {"128": {"config":
 {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4, "SCHEDULE": "ws",
  "PROMOTE_OVERLAP": false, "BLOCK_N2": 0, "PROMOTE_WAVES": 0, "SPLIT_K": 13}, "time_us": 1.0}}}
JSON
profile() {  # NAME CONFIG_DIR profile-arguments...: CONFIG_DIR "none": no stored config (the run's own choice),
  # "shipped": the repository's configs
  local name=$1 configs=$2
  shift 2
  local part=${GLUON_MISSES_PART:-${name%%-*}}
  case $parts in *" $part "*) ;; *) return 0 ;; esac
  (
    if [ "$configs" = none ]; then export GEMMBENCH_RETUNE=1
    elif [ "$configs" != shipped ]; then export GEMMBENCH_CONFIG_DIR=$configs; fi
    gemmbench profile --ncu --set full --out "$out/$name" "$@" > "$out/$name.txt"
  )
}
profile promoted-m1024 none --shapes "$out/promoted.yaml" --dtype fp8 --fp8-accum precise --variants cublas_fp8,gluon_ws
profile block-m1024 none --shapes "$out/block.yaml" --dtype fp8 --scaling block --variants cublas_fp8_block,gluon_ws
profile qkv-m128 none --shapes "$out/qkv.yaml" --dtype bf16 --variants cublas_bf16,gluon_ws
profile qkv-m128-split13 "$out/split13" --shapes "$out/qkv.yaml" --dtype bf16 --variants gluon_ws
profile mem-m128 shipped --shapes "$out/mem.yaml" --dtype fp8,bf16 --fp8-accum fast --variants cublas_fp8,cublas_bf16,gluon_ws
for b in b2048 b1024 b512; do
  GLUON_MISSES_PART=classes profile "$b" shipped --shapes "$out/$b.yaml" --dtype fp8 --scaling block --variants cublas_fp8_block,gluon_ws
done
for p in p512 p4096 p2048 p128; do
  GLUON_MISSES_PART=classes profile "$p" shipped --shapes "$out/$p.yaml" --dtype fp8 --fp8-accum precise --variants cublas_fp8,gluon_ws
done
GLUON_MISSES_PART=rest profile r1024 shipped --shapes "$out/r1024.yaml" --dtype fp8 --fp8-accum precise --variants cublas_fp8,gluon_ws
GLUON_MISSES_PART=rest profile r128 shipped --shapes "$out/p128.yaml" --dtype fp8,bf16 --fp8-accum fast --variants cublas_fp8,cublas_bf16,gluon_ws
GLUON_MISSES_PART=rest profile r333 shipped --shapes "$out/r333.yaml" --dtype bf16 --variants cublas_bf16,gluon_ws
