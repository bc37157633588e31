#!/usr/bin/env bash
# ZeRO stages on the GPUs of one host against PyTorch DDP and FSDP2 (torchrun), same machine, same run.
# Usage: scripts/gpu_zero_bench.sh OUTPUT_DIR PATH/TO/torch_reference.py [MODEL:BATCH ...]
#   a case is MODEL:BATCH per GPU (seq 1024); default: gpt2:16 gpt2-xl:8. GPUS (default: all visible),
#   STEPS (default 20) and WARMUP (default 5) may be set in the environment, and STAGES (default "0 1 2 3") and
#   MODES (the PyTorch runs, default "ddp fsdp") to run fewer; either set empty runs none of its kind.
# Needs a Release build in build-gpu/ (scripts/gpu_check.sh makes one). Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_zero_bench.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH ...]}
reference=${2:?usage: scripts/gpu_zero_bench.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH ...]}
shift 2
cases=("$@"); ((${#cases[@]})) || cases=(gpt2:16 gpt2-xl:8)
gpus=${GPUS:-$(nvidia-smi -L | wc -l)} steps=${STEPS:-20} warmup=${WARMUP:-5}
mkdir -p "$out"
table=()
for c in "${cases[@]}"; do
  model=${c%%:*} batch=${c##*:}
  for stage in ${STAGES-0 1 2 3}; do
    log="$out/train_${model}_b${batch}_stage${stage}.log"
    # Reductions overlap backward in buckets of 50M elements in every stage, so stages differ only in what
    # they partition.
    mpirun -np "$gpus" --bind-to none build-gpu/bin/train --model "$model" --batch-size "$batch" --seq-length 1024 \
      --num-steps "$steps" --warmup-steps "$warmup" --zero-stage "$stage" --overlap-comm true \
      --reduce-bucket-size 50000000 > "$log" 2>&1 || { tail -5 "$log"; table+=("$model B$batch stage $stage: failed"); continue; }
    tok=$(grep -oP 'summary over steps .*? \| \K[0-9]+(?= tok/s)' "$log")
    ms=$(grep -oP 'summary over steps [0-9-]+: \K[0-9.]+(?= ms/step)' "$log")
    exposed=$(grep -oP 'compute waited \K[0-9.]+ ms \([0-9]+%\)' "$log")
    peak=$(grep -oP 'total \K[0-9.]+' "$log" | tail -1)
    table+=("$(printf '%-8s B%-3s stage %s  %9s tok/s  %7s ms/step  exposed comm %-12s peak %s GiB (rank 0)' \
      "$model" "$batch" "$stage" "$tok" "$ms" "${exposed:-n/a}" "$peak")")
  done
  for mode in ${MODES-ddp fsdp}; do
    json="$out/torch_${model}_b${batch}_${mode}.json"
    PYTHONUNBUFFERED=1 torchrun --standalone --nproc_per_node "$gpus" "$reference" --model "$model" -B "$batch" -T 1024 \
      --steps "$steps" --warmup "$warmup" --mode "$mode" > "$json" 2> "$out/torch_${model}_${mode}.err"
    tok=$(grep -oP '"tok_s": \K[0-9.]+' "$json" | head -1)
    peak=$(grep -oP '"peak_gib": \K[0-9.]+' "$json" | head -1)
    table+=("$(printf '%-8s B%-3s PyTorch %-5s %9s tok/s  peak %s GiB' "$model" "$batch" "$mode" "${tok:-n/a}" "${peak:-n/a}")")
  done
done
printf '%s\n' "---" "${table[@]}"
