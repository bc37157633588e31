#!/usr/bin/env bash
# The measurements the planner is validated against, on 1, 2 and 4 GPUs of one host: for each of CASES
# (MODEL:BATCH:SEQ:WARMUP:STEPS), a sweep of ZeRO stages 0-3 without offload and stages 1-3 with cpu_optimizer on
# each of RANKS (default "1 2 4") GPUs. Each sweep writes its records and its profile (the units' times on that many
# GPUs, the machine's peak rates with the all-reduce bus bandwidth among them) under OUTPUT_DIR/<model>_<n>gpu/; then
# the profiles of each model are gathered into OUTPUT_DIR/profiles/, and `plan --validate` predicts every record
# from the one-GPU entries and the host's collective rates, where the plan program is built.
# Usage: scripts/gpu_plan_validation.sh OUTPUT_DIR [build]   (build: configure and build Release first)
# NONE_STAGES (default "0 1 2 3"), OFFLOAD_STAGES (default "1 2 3"; empty: no cpu_optimizer sweep) and CHECKPOINTING
# (default "none"; several modes: each a configuration) narrow or widen the sweeps.
# ROUNDS (default 1) runs each sweep that many times, alternating with the others; the repeats' records (in
# OUTPUT_DIR/repeat<r>_<model>_<n>gpu/, not gathered into the profile) join the validation, which compares each
# configuration at its median run: a host's CPU optimizer runs a third slower in some runs than in others.
# ARCHIVE=1 packs OUTPUT_DIR into OUTPUT_DIR.tgz at the end and removes the folder (a machine that returns only a
# few files of a run keeps them all so).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: scripts/gpu_plan_validation.sh OUTPUT_DIR [build]}
mkdir -p "$out"
if [[ ${2:-} == build ]]; then
  targets=(sweep)
  [[ -f bench/plan_main.cc ]] && targets+=(plan)
  build_gpu_tree "$out" "${targets[@]}"  # (exits itself on failure)
fi
bin=build-gpu/bin
cases=${CASES:-"gpt2-xl:8:1024:3:8 meta-llama/Llama-2-7b-hf:2:1024:2:6"}
ranks_list=${RANKS:-"1 2 4"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rounds=${ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a whole number of at least 1, not '$rounds'" >&2; exit 2; }
for c in $cases; do
  IFS=: read -r model batch seq warmup steps <<< "$c"
  label=$(basename "$model")
  for ((round = 1; round <= rounds; ++round)); do
    for n in $ranks_list; do
      dir="$out/${label}_${n}gpu"
      ((round > 1)) && dir="$out/repeat${round}_${label}_${n}gpu"
      common=(--models "$model" --batch-sizes "$batch" --seq-lengths "$seq" --warmup-steps "$warmup"
              --num-steps "$steps" --output-dir "$dir" --activation-checkpointing ${CHECKPOINTING:-none})
      none_stages=${NONE_STAGES-0 1 2 3} offload_stages=${OFFLOAD_STAGES-1 2 3}
      echo "== $label on $n GPU(s), round $round: stages ${none_stages:-(none)} none, stages ${offload_stages:-(none)}" \
        "cpu_optimizer"
      for strategy in none cpu_optimizer; do
        stages=$none_stages
        [[ $strategy == cpu_optimizer ]] && stages=$offload_stages
        [[ -z $stages ]] && continue
        # (word splitting of $stages intended)
        mpirun -np "$n" --bind-to none "$bin/sweep" "${common[@]}" --stages $stages --strategies $strategy \
          > "$dir.$strategy.log" 2>&1 || { echo "sweep failed:"; tail -20 "$dir.$strategy.log"; }
        tail -n 14 "$dir.$strategy.log"
      done
    done
  done
  folders=()
  for n in $ranks_list; do folders+=("$out/${label}_${n}gpu"); done
  merged=$("$bin/sweep" --gather "${folders[@]}" --output-dir "$out" | tail -1)
  echo "$merged"
  profile=${merged##* into }
  if [[ -x $bin/plan && -f $profile ]]; then
    "$bin/plan" --profile "$profile" --validate "$out/${label}"_*gpu/sweep_*.json \
      $(ls "$out"/repeat*_"${label}"_*gpu/sweep_*.json 2> /dev/null) | tee "$out/validation_$label.txt"
  fi
done
if [[ ${ARCHIVE:-0} == 1 ]]; then
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out" && echo "archived: $out.tgz"
fi
