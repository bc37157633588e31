#!/usr/bin/env bash
# The offload strategies on one GPU of a GPU host, against PyTorch FSDP2 with CPUOffloadPolicy in the same
# run, plus the CPU optimizer against PyTorch's fused CPU AdamW on the same cores.
# Usage: scripts/gpu_offload_bench.sh OUTPUT_DIR NVME_DIR [MODEL:BATCH [STRATEGY ...]]
#   NVME_DIR is a folder on the disk for the nvme strategy; the PyTorch references are scripts/reference/'s.
#   A STRATEGY may carry an offload ratio, as offload_bench takes it: cpu_optimizer:0.8. Default case gpt2-xl:8
#   with none cpu_optimizer cpu_full nvme, seq 1024. STEPS (default 8), WARMUP (default 3) and NVME_STEPS
#   (default 3: each nvme step moves the whole optimizer state twice) may be set in the environment; TORCH=0
#   skips the PyTorch runs, CPU_BENCH=0 the CPU optimizer ones; TRAIN_ARGS adds flags to every train run and
#   LABEL (default empty) marks its rows and logs. GPU 0 is used.
# Needs a Release build in build-gpu/. Reads the runs' records (train --json, the references' JSON lines);
# prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
usage="usage: scripts/gpu_offload_bench.sh OUTPUT_DIR NVME_DIR [MODEL:BATCH [STRATEGY ...]]"
out=${1:?$usage} nvme=${2:?$usage}
shift 2
case_=${1:-gpt2-xl:8}; (($#)) && shift
strategies=("$@"); ((${#strategies[@]})) || strategies=(none cpu_optimizer cpu_full nvme)
model=${case_%%:*} batch=${case_##*:}
steps=${STEPS:-8} warmup=${WARMUP:-3} nvme_steps=${NVME_STEPS:-3}
export CUDA_VISIBLE_DEVICES=0
mkdir -p "$out" "$nvme"
table=()

if [[ ${CPU_BENCH:-1} == 1 ]]; then
  build-gpu/bin/cpu_optimizer_bench --params 268435456 --repeats 5 > "$out/cpu_optimizer_bench.log" 2>&1
  table+=("$(grep -E 'in place' "$out/cpu_optimizer_bench.log" | tail -1 | sed 's/^/CPU AdamW ours: /')")
  table+=("$(grep -E 'no AdamW' "$out/cpu_optimizer_bench.log" | sed 's/^/the same bytes without AdamW (a reference, not a floor): /')")
  if [[ ${TORCH:-1} == 1 ]]; then
    python3 scripts/reference/cpu_adam_reference.py > "$out/cpu_adam.json" 2>&1
    table+=("CPU AdamW PyTorch: $(grep '"fused"' "$out/cpu_adam.json")")
  fi
fi

for strategy in "${strategies[@]}"; do
  name="$out/train_${model}_b${batch}_${strategy}${LABEL:+_$LABEL}"
  n=$steps w=$warmup
  strategy_name=${strategy%%:*} ratio=1
  [[ $strategy == *:* ]] && ratio=${strategy#*:}
  [[ $strategy_name == nvme ]] && n=$nvme_steps w=1
  rm -f "$name.json"
  # shellcheck disable=SC2086
  build-gpu/bin/train --model "$model" --batch-size "$batch" --seq-length 1024 --num-steps "$n" --warmup-steps "$w" \
    --offload "$strategy_name" --offload-ratio "$ratio" --nvme-path "$nvme" --json "$name.json" ${TRAIN_ARGS:-} \
    > "$name.log" 2>&1 || { tail -5 "$name.log"; table+=("$model B$batch $strategy: failed"); continue; }
  table+=("$(python3 scripts/summarise_results.py "$name.json")${LABEL:+ ($LABEL)}")
done

if [[ ${TORCH:-1} == 1 ]]; then
  json="$out/torch_${model}_b${batch}_fsdp_offload.json"
  PYTHONUNBUFFERED=1 torchrun --standalone --nproc_per_node 1 scripts/reference/torch_reference.py --model "$model" -B "$batch" \
    -T 1024 --steps "$steps" --warmup "$warmup" --mode fsdp --offload 1 > "$json" 2> "$out/torch_fsdp_offload.err"
  tok=$(json_field "$json" tok_s) peak=$(json_field "$json" peak_gib)
  table+=("$(printf '%-8s B%-3s PyTorch FSDP2 CPUOffloadPolicy %8s tok/s  GPU peak %s GiB' "$model" "$batch" "${tok:-n/a}" "${peak:-n/a}")")
fi
printf '%s\n' "---" "${table[@]}"
