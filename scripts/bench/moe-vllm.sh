#!/usr/bin/env bash
# docs/BENCHMARKS.md "Fused MoE against vLLM's kernel" (part `vllm`) and "Fused MoE roofline" (part `roofline`).
# Every sweep runs in 3 processes into one file (`--repeat 3`); a file already there is resumed.
#   vllm:     Mixtral 8x7B's experts at TP 2, 1-4096 tokens, bf16 and fp8 (per tensor, fast accumulation: what
#             vLLM's kernel does), vLLM's kernel with vLLM's H100 config against triton_moe_grouped with that same
#             file (`@vllm`) and with its own shipped config.  vLLM's kernel is a plugin kept outside this repository:
#             VLLM_MOE_PLUGIN names a file registering the variant `vllm_fused_moe` (reading its config file from
#             $VLLM_MOE_CONFIG), VLLM_CONFIG_DIR vLLM's vllm/model_executor/layers/fused_moe/configs folder.
#   roofline: DeepSeek-V3's routed experts at TP 8 + EP 8 and Qwen3-30B-A3B's at TP 1, 1-64 and 4096 tokens, bf16,
#             fp8 per tensor and fp8 block, every MoE Triton form (three schedules, SplitK, persistent, permuted).
#   h200:     on an H200, Mixtral's experts at TP 2, bf16, vLLM's 18 token counts: vLLM's kernel reading vLLM's own H200
#             file (the plugin finds it) against triton_moe_grouped with gemmbench's shipped H200 configs.
# Usage: scripts/bench/moe-vllm.sh OUT_DIR [PART ...]   PART: vllm h200 roofline (default: vllm roofline)
set -euo pipefail
out=${1:?give the output folder}
shift
parts=${*:-vllm roofline}
mkdir -p "$out"
sweep() {  # NAME gemmbench-run-arguments...
  local name=$1 f=$out/$1.parquet where=--out
  shift
  [ -f "$f" ] && where=--resume
  gemmbench run "$@" --repeat 3 "$where" "$f" > "$out/$name.txt"
}
tokens=1,2,4,8,16,32,64,128,256,512,1024,2048,4096
fused=triton_moe_col,triton_moe_grouped,triton_moe_splitk,triton_moe_persistent,triton_moe_permuted  # roofline
gpu=${VLLM_DEVICE_NAME:-NVIDIA_H100_80GB_HBM3}  # vLLM's file names: the GPU's name with '_' for ' '
for part in $parts; do
  case $part in
    vllm)
      plugin=${VLLM_MOE_PLUGIN:?name the plugin file of vLLMs kernel (VLLM_MOE_PLUGIN)}
      configs=${VLLM_CONFIG_DIR:?name vLLMs fused_moe/configs folder (VLLM_CONFIG_DIR)}
      for dtype in bf16 fp8; do
        file=$configs/E=8,N=7168,device_name=$gpu.json accum=()
        [ "$dtype" = fp8 ] && file=$configs/E=8,N=7168,device_name=$gpu,dtype=fp8_w8a8.json accum=(--fp8-accum fast)
        VLLM_MOE_CONFIG=$file sweep "vllm-$dtype" --plugin "$plugin" --shapes mixtral-moe --tp 2 --m "$tokens" \
          --dtype "$dtype" "${accum[@]}" --variants 'vllm_fused_moe,triton_moe_grouped' --import-config "vllm:$file" \
          --budget 0.2
      done
      python3 scripts/bench_tables.py --moe-vllm "$out"/vllm-*.parquet > "$out/vllm.md" ;;
    h200)  # on an H200: vLLM's kernel with vLLM's own H200 file against ours with the shipped H200 configs, bf16,
      # vLLM's 18 token counts; nothing stored (--no-store), so a run's searches cannot stand in for a config
      plugin=${VLLM_MOE_PLUGIN:?name the plugin file of vLLMs kernel (VLLM_MOE_PLUGIN)}
      sweep moe-vllm-bf16 --plugin "$plugin" --shapes mixtral-moe --tp 2 --dtype bf16 --no-store \
        --m 1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096 --variants 'vllm_fused_moe,triton_moe_grouped'
      python3 scripts/bench_tables.py --moe-vllm "$out/moe-vllm-bf16.parquet" > "$out/h200.md" ;;
    roofline)
      sweep roofline-deepseek-v3 --shapes deepseek-v3 --tp 8 --ep 8 --m 1,2,4,8,16,32,64,4096 --dtype bf16,fp8 \
        --scaling tensor,block --variants "$fused" --budget 0.1
      sweep roofline-qwen3-30b-a3b --shapes qwen3-30b-a3b --m 1,2,4,8,16,32,64,4096 --dtype bf16,fp8 \
        --scaling tensor,block --variants "$fused" --budget 0.1
      python3 scripts/bench_tables.py --moe-roofline "$out"/roofline-*.parquet > "$out/roofline.md" ;;
    *) echo "moe-vllm.sh: unknown part '$part' (vllm h200 roofline)" >&2; exit 2 ;;
  esac
done
