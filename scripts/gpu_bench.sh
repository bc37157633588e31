#!/usr/bin/env bash
# Single-GPU throughput: our train against the PyTorch reference trainer, same machine, same run.
# Usage: scripts/gpu_bench.sh OUTPUT_DIR PATH/TO/torch_reference.py [case ...]
#   a case is MODEL:BATCH[:SEQ] (seq 1024 unless given), e.g. gpt2:16 gpt2-xl:8 llama-3.2-1b:8:2048;
#   default: gpt2:16 gpt2-xl:8
#   VARIANTS="ZB_ATTENTION=own ZB_ATTENTION=cudnn" times ours once per environment setting against one
#   PyTorch run (settings joined with commas apply together: ZB_ATTENTION=own,ZB_GEMM_ALGORITHMS=heuristic);
#   default: one run with train's defaults. (ATTENTION_VARIANTS="own cudnn", the older form, still works.)
# Needs a Release build in build-gpu/ (scripts/gpu_check.sh makes one). Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_bench.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH ...]}
reference=${2:?usage: scripts/gpu_bench.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH ...]}
shift 2
cases=("$@"); ((${#cases[@]})) || cases=(gpt2:16 gpt2-xl:8)
mkdir -p "$out"
table=()
for c in "${cases[@]}"; do
  IFS=: read -r model batch seq <<< "$c"
  seq=${seq:-1024}
  ours=(); names=()
  variants=${VARIANTS:-default}
  [[ -n ${ATTENTION_VARIANTS:-} ]] && variants=$(printf 'ZB_ATTENTION=%s ' $ATTENTION_VARIANTS)
  for variant in $variants; do
    settings=(); [[ $variant != default ]] && IFS=, read -ra settings <<< "$variant"
    log="$out/train_${model}_b${batch}_t${seq}_${variant//[=,]/_}.log"
    env "${settings[@]}" build-gpu/bin/train --model "$model" --batch-size "$batch" --seq-length "$seq" \
      --num-steps 30 --warmup-steps 10 > "$log" 2>&1 || { tail -5 "$log"; ours+=(failed); names+=("$variant"); continue; }
    ours+=("$(grep -oP 'summary over steps .*? \| \K[0-9]+(?= tok/s)' "$log")"); names+=("$variant")
    echo "[$model B$batch T$seq, $variant]"; grep -E "^summary|^time per step|^peak memory|^GEMM|^attention|^pass replay" "$log"
  done
  theirs=$(PYTHONUNBUFFERED=1 python3 "$reference" --model "$model" -B "$batch" -T "$seq" --steps 30 --warmup 10 \
           2>"$out/torch_${model}_t${seq}.err" | tee "$out/torch_${model}_b${batch}_t${seq}.json" | grep -oP '"tok_s": \K[0-9]+')
  for i in "${!ours[@]}"; do
    ratio=$(python3 -c "print(f'{${ours[i]} / $theirs:.3f}' if '$theirs' else 'n/a')" 2>/dev/null)
    table+=("$(printf '%-12s B%-3s T%-5s %-30s ours %8s tok/s | PyTorch %8s tok/s | ratio %s' "$model" "$batch" "$seq" \
      "${names[i]}" "${ours[i]}" "${theirs:-n/a}" "${ratio:-n/a}")")
  done
done
printf '%s\n' "---" "${table[@]}"
