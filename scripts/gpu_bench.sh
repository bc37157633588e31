#!/usr/bin/env bash
# Single-GPU throughput: our train against the PyTorch reference trainer, same machine, same run.
# Usage: scripts/gpu_bench.sh OUTPUT_DIR [case ...]
#   a case is MODEL:BATCH[:SEQ] (seq 1024 unless given), e.g. gpt2:16 gpt2-xl:8 llama-3.2-1b:8:2048;
#   default: gpt2:16 gpt2-xl:8
#   VARIANTS="ZB_ATTENTION=own ZB_ATTENTION=cudnn" times ours once per environment setting against one
#   PyTorch run (settings joined with commas apply together: ZB_ATTENTION=own,ZB_GEMM_ALGORITHMS=heuristic; a
#   setting starting with -- is a flag of train's instead: VARIANTS="default --dtype=fp16" times bf16 and fp16,
#   each against the same PyTorch run, which is bf16 whatever the variant); default: one run with train's
#   defaults. (ATTENTION_VARIANTS="own cudnn", the older form, still works.)
#   ROUNDS=N (default 1) repeats each case's runs N times, ours and PyTorch alternating, and reports the median
#   of the N ratios (each ours over the PyTorch run of its own round) with their range: a GPU's clock and a
#   host's speed drift by a percent or two between runs, which one pair of runs cannot tell from a difference.
#   REFERENCE (default scripts/reference/torch_reference.py) is the PyTorch trainer.
#   CHECKPOINTING=full or selective runs ours with that --activation-checkpointing and PyTorch with its own
#   checkpointing of every block (torch.utils.checkpoint); default none.
# Needs a Release build in build-gpu/ (scripts/gpu_check.sh makes one). Reads the runs' records (train --json and
# the reference's JSON line); prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: scripts/gpu_bench.sh OUTPUT_DIR [MODEL:BATCH[:SEQ] ...]}
reference=${REFERENCE:-scripts/reference/torch_reference.py}
shift
cases=("$@"); ((${#cases[@]})) || cases=(gpt2:16 gpt2-xl:8)
rounds=${ROUNDS:-1}
checkpointing=${CHECKPOINTING:-none}
[[ $checkpointing =~ ^(none|full|selective)$ ]] \
  || { echo "CHECKPOINTING must be none, full or selective, not '$checkpointing'" >&2; exit 2; }
reference_checkpoint=1; [[ $checkpointing == none ]] && reference_checkpoint=0
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a whole number of at least 1, not '$rounds'" >&2; exit 2; }
mkdir -p "$out"
table=()
# "median (min-max)" of the numbers given, with the printf format for each.
summary() {
  python3 - "$@" <<'EOF'
import statistics, sys
fmt, values = sys.argv[1], [float(v) for v in sys.argv[2:] if v not in ("failed", "n/a", "")]
if not values: print("n/a"); sys.exit()
text = fmt % statistics.median(values)
print(text if len(values) == 1 else f"{text} ({fmt % min(values)}-{fmt % max(values)})")
EOF
}
for c in "${cases[@]}"; do
  IFS=: read -r model batch seq <<< "$c"
  seq=${seq:-1024}
  variants=${VARIANTS:-default}
  [[ -n ${ATTENTION_VARIANTS:-} ]] && variants=$(printf 'ZB_ATTENTION=%s ' $ATTENTION_VARIANTS)
  read -ra variant_list <<< "$variants"
  declare -A ours=() ratios=()
  theirs_all=()
  for ((round = 1; round <= rounds; ++round)); do
    suffix=; ((rounds > 1)) && suffix="_round$round"
    declare -A this_round=()
    for variant in "${variant_list[@]}"; do
      settings=(); [[ $variant != default ]] && IFS=, read -ra settings <<< "$variant"
      # A setting that starts with -- is a flag of train's (--dtype=fp16), any other an environment setting.
      environment=() flags=()
      for setting in "${settings[@]}"; do
        if [[ $setting == --*=* ]]; then
          flags+=("${setting%%=*}" "${setting#*=}")
        elif [[ $setting == --* ]]; then
          flags+=("$setting")
        else
          environment+=("$setting")
        fi
      done
      name="$out/train_${model}_b${batch}_t${seq}_${variant//[=,-]/_}$suffix"
      rm -f "$name.json"  # (a record of an earlier call would be refused, not overwritten)
      if env "${environment[@]}" build-gpu/bin/train --model "$model" --batch-size "$batch" --seq-length "$seq" \
           --num-steps 30 --warmup-steps 10 --activation-checkpointing "$checkpointing" --json "$name.json" \
           "${flags[@]}" > "$name.log" 2>&1; then
        this_round[$variant]=$(json_field "$name.json" throughput_tokens_per_sec)
        echo "[$model B$batch T$seq, $variant${suffix:+, round $round}]"
        python3 scripts/summarise_results.py "$name.json"
        grep -E "^GEMM|^attention|^pass replay" "$name.log"
      else
        log=$name.log
        tail -5 "$log"; this_round[$variant]=failed
      fi
      ours[$variant]+="${this_round[$variant]} "
    done
    json="$out/torch_${model}_b${batch}_t${seq}$suffix.json"
    PYTHONUNBUFFERED=1 python3 "$reference" --model "$model" -B "$batch" -T "$seq" --steps 30 --warmup 10 \
      --checkpoint "$reference_checkpoint" \
      > "$json" 2> "$out/torch_${model}_t${seq}$suffix.err"
    theirs=$(json_field "$json" tok_s)
    theirs_all+=("${theirs:-n/a}")
    ((rounds > 1)) && echo "[$model B$batch T$seq, PyTorch, round $round] ${theirs:-n/a} tok/s"
    for variant in "${variant_list[@]}"; do
      ratio=$(python3 -c "print(f'{${this_round[$variant]} / $theirs:.4f}')" 2>/dev/null)
      ratios[$variant]+="${ratio:-n/a} "
    done
  done
  for variant in "${variant_list[@]}"; do
    table+=("$(printf '%-12s B%-3s T%-5s %-30s ours %s tok/s | PyTorch %s tok/s | ratio %s' "$model" "$batch" "$seq" \
      "$variant" "$(summary %.0f ${ours[$variant]})" "$(summary %.0f "${theirs_all[@]}")" \
      "$(summary %.3f ${ratios[$variant]})")")
  done
  unset ours ratios
done
((rounds > 1)) && table=("(median of $rounds rounds, range in brackets; each ratio pairs the runs of one round)" "${table[@]}")
printf '%s\n' "---" "${table[@]}"
