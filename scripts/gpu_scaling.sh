#!/usr/bin/env bash
# Scaling of the ZeRO stages over the GPUs of one host: tokens/s of `train` on 1, 2, 4, ... GPUs (powers of two
# up to all of them) for each stage, with the scaling efficiency against linear (tokens/s on N GPUs over N
# times one GPU's). The batch per GPU stays fixed (weak scaling), as in the zero_bench runs.
# Usage: scripts/gpu_scaling.sh OUTPUT_DIR MODEL:BATCH[:SEQ] [STAGE ...]   (seq 1024, stages 1 2 3 by default)
#   STEPS (default 15), WARMUP (5), GPUS (default: all visible), BIN (default build-gpu/bin) and TRAIN_ARGS
#   (more train flags; e.g. GPUS=4 TRAIN_ARGS="--device cpu" with a tiny model tries the script without GPUs).
# Prints a table last; each run's log stays in OUTPUT_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu_scaling.sh OUTPUT_DIR MODEL:BATCH[:SEQ] [STAGE ...]"
out=${1:?$usage} case=${2:?$usage}
shift 2
stages=("$@"); ((${#stages[@]})) || stages=(1 2 3)
IFS=: read -r model batch seq <<< "$case"
gpus=${GPUS:-$(nvidia-smi -L | wc -l)} bin=${BIN:-build-gpu/bin}
mkdir -p "$out"
counts=() n=1
while ((n <= gpus)); do counts+=("$n"); n=$((n * 2)); done

header=$(printf '%-10s %-5s' "$model B$batch" "stage")
for n in "${counts[@]}"; do header+=$(printf ' | %4s GPU(s): tok/s (eff.)' "$n"); done
table=("$header")
for stage in "${stages[@]}"; do
  row=$(printf '%-10s %-5s' "" "$stage") single=""
  for n in "${counts[@]}"; do
    log="$out/train_${model}_b${batch}_stage${stage}_gpus${n}.log"
    # shellcheck disable=SC2086
    mpirun -np "$n" --bind-to none --oversubscribe "$bin/train" --model "$model" --batch-size "$batch" \
      --seq-length "${seq:-1024}" --num-steps "${STEPS:-15}" --warmup-steps "${WARMUP:-5}" --zero-stage "$stage" \
      --overlap-comm true --reduce-bucket-size 50000000 ${TRAIN_ARGS:-} > "$log" 2>&1
    tok=$(grep -oP 'summary over steps .*? \| \K[0-9]+(?= tok/s)' "$log")
    if [[ -z $tok ]]; then
      row+=$(printf ' | %25s' "failed (see log)")
      continue
    fi
    [[ $n == 1 ]] && single=$tok
    eff=$([[ -n $single ]] && python3 -c "print(f'{$tok / ($n * $single):.2f}')")
    row+=$(printf ' | %16s (%4s)' "$tok" "${eff:-n/a}")
  done
  table+=("$row")
done
printf '%s\n' "---" "${table[@]}"
