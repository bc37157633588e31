#!/usr/bin/env bash
# The offload strategies on one GPU of a GPU host, against PyTorch FSDP2 with CPUOffloadPolicy in the same
# run, plus the CPU optimizer against PyTorch's fused CPU AdamW on the same cores.
# Usage: scripts/gpu_offload_bench.sh OUTPUT_DIR ANCHORS_DIR NVME_DIR [MODEL:BATCH [STRATEGY ...]]
#   ANCHORS_DIR holds torch_reference.py and cpu_adam.py; NVME_DIR is a folder on the disk for the nvme
#   strategy. A STRATEGY may carry an offload ratio, as offload_bench takes it: cpu_optimizer:0.8. Default
#   case gpt2-xl:8 with none cpu_optimizer cpu_full nvme, seq 1024. STEPS (default 8),
#   WARMUP (default 3) and NVME_STEPS (default 3: each nvme step moves the whole optimizer state twice) may
#   be set in the environment; TORCH=0 skips the PyTorch runs; TRAIN_ARGS adds flags to every train run and
#   LABEL (default empty) marks its rows and logs. GPU 0 is used.
# Needs a Release build in build-gpu/. Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu_offload_bench.sh OUTPUT_DIR ANCHORS_DIR NVME_DIR [MODEL:BATCH [STRATEGY ...]]"
out=${1:?$usage} anchors=${2:?$usage} nvme=${3:?$usage}
shift 3
case_=${1:-gpt2-xl:8}; (($#)) && shift
strategies=("$@"); ((${#strategies[@]})) || strategies=(none cpu_optimizer cpu_full nvme)
model=${case_%%:*} batch=${case_##*:}
steps=${STEPS:-8} warmup=${WARMUP:-3} nvme_steps=${NVME_STEPS:-3}
export CUDA_VISIBLE_DEVICES=0
mkdir -p "$out" "$nvme"
table=()

if [[ ${TORCH:-1} == 1 && ${CPU_BENCH:-1} == 1 ]]; then
  build-gpu/bin/cpu_optimizer_bench --params 268435456 --repeats 5 > "$out/cpu_optimizer_bench.log" 2>&1
  python3 "$anchors/cpu_adam.py" > "$out/cpu_adam.json" 2>&1
  table+=("$(grep -E 'in place' "$out/cpu_optimizer_bench.log" | tail -1 | sed 's/^/CPU AdamW ours: /')")
  table+=("$(grep -E 'no AdamW' "$out/cpu_optimizer_bench.log" | sed 's/^/the same bytes without AdamW (a reference, not a floor): /')")
  table+=("$(grep -oP '"impl": "fused".*' "$out/cpu_adam.json" | sed 's/^/CPU AdamW PyTorch: /')")
fi

for strategy in "${strategies[@]}"; do
  log="$out/train_${model}_b${batch}_${strategy}${LABEL:+_$LABEL}.log"
  n=$steps w=$warmup
  name=${strategy%%:*} ratio=1
  [[ $strategy == *:* ]] && ratio=${strategy#*:}
  [[ $name == nvme ]] && n=$nvme_steps w=1
  build-gpu/bin/train --model "$model" --batch-size "$batch" --seq-length 1024 --num-steps "$n" --warmup-steps "$w" \
    --offload "$name" --offload-ratio "$ratio" --nvme-path "$nvme" ${TRAIN_ARGS:-} > "$log" 2>&1 || { tail -5 "$log"; table+=("$model B$batch $strategy: failed"); continue; }
  tok=$(grep -oP 'summary over steps .*? \| \K[0-9]+(?= tok/s)' "$log")
  ms=$(grep -oP 'summary over steps [0-9-]+: \K[0-9.]+(?= ms/step)' "$log")
  peak=$(grep -oP 'total \K[0-9.]+' "$log" | tail -1)
  host=$(grep -oP 'strategy \(pinned\): \K[0-9.e+-]+' "$log")
  overlap=$(grep -oP 'the step is \K[0-9.]+x its slowest offload phase \([^)]*\)' "$log")
  norms=$(grep -oP '^step [0-9]+/[0-9]+ \| loss [0-9.]+ \| norm \K[0-9.]+' "$log" | tr '\n' ' ')
  table+=("$(printf '%-8s B%-3s %-14s %8s tok/s %8s ms/step  GPU peak %s GiB  host %s GB  %s  norms %s' "$model" \
    "$batch" "$strategy${LABEL:+ ($LABEL)}" "$tok" "$ms" "$peak" "${host:-0}" "${overlap:+step = $overlap}" "$norms")")
done

if [[ ${TORCH:-1} == 1 ]]; then
  json="$out/torch_${model}_b${batch}_fsdp_offload.json"
  PYTHONUNBUFFERED=1 torchrun --standalone --nproc_per_node 1 "$anchors/torch_reference.py" --model "$model" -B "$batch" \
    -T 1024 --steps "$steps" --warmup "$warmup" --mode fsdp --offload 1 > "$json" 2> "$out/torch_fsdp_offload.err"
  tok=$(grep -oP '"tok_s": \K[0-9.]+' "$json" | head -1)
  peak=$(grep -oP '"peak_gib": \K[0-9.]+' "$json" | head -1)
  table+=("$(printf '%-8s B%-3s PyTorch FSDP2 CPUOffloadPolicy %8s tok/s  GPU peak %s GiB' "$model" "$batch" "${tok:-n/a}" "${peak:-n/a}")")
fi
printf '%s\n' "---" "${table[@]}"
