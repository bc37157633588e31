#!/usr/bin/env bash
# The comparison programs on every GPU of one host, as a user runs them, with the PyTorch reference in the same
# call; each part writes its results (JSON records) under OUTPUT_DIR and the script ends with one table read from
# them (scripts/summarise_results.py).
# Usage: scripts/gpu_suite.sh OUTPUT_DIR PART ...
#   build     configure and build Release into build-gpu/ (sm_90), then the ctest tests matching TESTS (default:
#             the per-rank and multi-GPU tests)
#   gtests    the MPI GPU tests of cuda_zero_test matching GTEST_FILTER (default "CudaZeroPipelined*") on GPUS ranks
#   zero      mpirun -np GPUS zero_bench at its defaults for each of ZERO_CASES (MODEL:BATCH, seq SEQ; default
#             "gpt2-xl:8 llama-2-7b:2"); LABEL (default empty) names its output folders
#   torch     torchrun of scripts/reference/torch_reference.py for TORCH_MODES (default "fsdp ddp") on each of
#             ZERO_CASES, TORCH_STEPS (12) timed after TORCH_WARMUP (4)
#   offload   offload_bench for each of OFFLOAD_CASES (MODEL:BATCH:RANKS; default "llama-2-7b:2:1 llama-2-13b:2:1
#             llama-2-13b:2:GPUS"), strategies none cpu_optimizer cpu_full (and nvme, its files in NVME_DIR, where
#             that is set), OFFLOAD_STEPS timed (default 4) after 2
#   scaling   zero_bench stages 1-3 on 1, 2, 4, ... GPUs for each of SCALING_CASES (default "gpt2-xl:8 llama-2-7b:2")
#   efficiency  ROUNDS (default 2) alternating rounds of one GPU's best (stages 0 and 1) and GPUS GPUs' stages 1
#             and 2, for each of SCALING_CASES: the scaling efficiency against one GPU's best on the same host
#   checkpointing  zero_bench with --activation-checkpointing none full selective: one GPU, stage 0, gpt2-xl at seq
#             1024 and each of CKPT_BATCHES (default "8 24 32 48": where none runs out of memory and full still fits);
#             then GPUS GPUs, stage 3, Llama-2-7b at seq 2048, batch CKPT_LLAMA_BATCH (default 2)
#   lora      one GPU, Llama-2-7b, batch 8, seq 512 (LORA_MODEL, LORA_BATCH, LORA_SEQ): train with --lora-rank
#             LORA_RANK (default 16), train without LoRA (full fine-tuning: 127 GB, an H200), and the PyTorch reference
#             with the same adapters, ROUNDS (default 1) alternating rounds
# GPUS (default: all visible), STEPS (20) and WARMUP (5) set the zero and scaling runs; ZERO_ARGS adds flags to them.
# SEQ (default 1024) is the sequence length of the zero and torch parts (their files are named _t<SEQ> where not 1024).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: scripts/gpu_suite.sh OUTPUT_DIR PART ...}
shift
gpus=${GPUS:-$(nvidia-smi -L | wc -l)} steps=${STEPS:-20} warmup=${WARMUP:-5} seq=${SEQ:-1024}
seq_part=; [[ $seq != 1024 ]] && seq_part=_t$seq
mkdir -p "$out"
mpi=(mpirun --bind-to none --oversubscribe)

# Each program runs as a background job that the script waits for, so that a TERM (a `timeout` around the script)
# reaches the program at once and ends it with the script: a program left running would hold its GPUs and CPUs
# through the next parts and skew them.
child=
on_term() {
  [[ -n $child ]] && kill -TERM "$child" 2> /dev/null
  wait
  exit 143
}
trap on_term TERM INT
launch() {
  "$@" &
  child=$!
  wait "$child"
  local rc=$?
  child=
  return $rc
}
reference=scripts/reference/torch_reference.py

# torch_reference.py knows the Llama models by their short names.
short_name() { case $1 in meta-llama/Llama-2-7b-hf) echo llama-2-7b ;; meta-llama/Llama-2-13b-hf) echo llama-2-13b ;; *) echo "$1" ;; esac; }
# A model's name as part of a file name (a Hugging Face name's "/" would make a folder).
file_part() { echo "${1//\//_}"; }

run_build() {
  build_gpu_tree "$out"
  ctest --test-dir build-gpu --output-on-failure -R "${TESTS:-RankSteps|NodeThroughput|RankSpread|RankResultJson|FormatRanks|GpuTelemetry|comm_test_np4|ZeroBenchOnTwoGpus}" \
    > "$out/ctest.log" 2>&1
  grep -E "tests passed|FAILED|Failure|Expected|actual|which is" "$out/ctest.log" | head -40
}

run_gtests() {
  launch "${mpi[@]}" -np "$gpus" build-gpu/bin/cuda_zero_test --gtest_filter="${GTEST_FILTER:-CudaZeroPipelined*}" \
    > "$out/gtests.log" 2>&1
  grep -E "OK \]|FAILED|PASSED|Failure|Expected|which is" "$out/gtests.log" | sort | uniq -c | head -30
}

run_zero() {
  for c in ${ZERO_CASES:-gpt2-xl:8 llama-2-7b:2}; do
    local model=${c%%:*} batch=${c##*:}
    local dir="$out/zero_$(file_part "$model")_b${batch}${seq_part}_np${gpus}${LABEL:+_$LABEL}"
    # shellcheck disable=SC2086
    launch "${mpi[@]}" -np "$gpus" build-gpu/bin/zero_bench --model "$model" --batch-size "$batch" --seq-length "$seq" \
      --num-steps "$steps" --warmup-steps "$warmup" --output-dir "$dir" ${ZERO_ARGS:-} > "$dir.log" 2>&1 \
      || tail -5 "$dir.log"
  done
}

run_torch() {
  for c in ${ZERO_CASES:-gpt2-xl:8 llama-2-7b:2}; do
    local model=${c%%:*} batch=${c##*:}
    for mode in ${TORCH_MODES-fsdp ddp}; do
      PYTHONUNBUFFERED=1 launch torchrun --standalone --nproc_per_node "$gpus" "$reference" --model "$(short_name "$model")" \
        -B "$batch" -T "$seq" --steps "${TORCH_STEPS:-12}" --warmup "${TORCH_WARMUP:-4}" --mode "$mode" \
        > "$out/torch_$(file_part "$model")_b${batch}${seq_part}_${mode}_np${gpus}.json" \
        2> "$out/torch_$(file_part "$model")_b${batch}${seq_part}_${mode}_np${gpus}.err"
    done
  done
}

run_offload() {
  local cases=${OFFLOAD_CASES:-llama-2-7b:2:1 llama-2-13b:2:1}
  [[ -z ${OFFLOAD_CASES:-} ]] && ((gpus > 1)) && cases+=" llama-2-13b:2:$gpus"
  for c in $cases; do
    IFS=: read -r model batch ranks <<< "$c"
    local dir="$out/offload_$(file_part "$model")_b${batch}_np${ranks}"
    local nvme=()
    [[ -n ${NVME_DIR:-} ]] && nvme=(--nvme-path "$NVME_DIR" --strategies none cpu_optimizer cpu_full nvme)
    launch "${mpi[@]}" -np "$ranks" build-gpu/bin/offload_bench --model "$model" --batch-size "$batch" --seq-length 1024 \
      --num-steps "${OFFLOAD_STEPS:-4}" --warmup-steps 2 --output-dir "$dir" "${nvme[@]}" > "$dir.log" 2>&1 \
      || tail -5 "$dir.log"
  done
}

run_scaling() {
  for c in ${SCALING_CASES:-gpt2-xl:8 llama-2-7b:2}; do
    local model=${c%%:*} batch=${c##*:} n=1
    while ((n <= gpus)); do
      # One GPU: every stage is plain training, so it runs once.
      local stages="1 2 3" dir="$out/scaling_$(file_part "$model")_b${batch}_np${n}"
      ((n == 1)) && stages=1
      # shellcheck disable=SC2086
      launch "${mpi[@]}" -np "$n" build-gpu/bin/zero_bench --model "$model" --batch-size "$batch" --seq-length 1024 \
        --num-steps "$steps" --warmup-steps "$warmup" --stages $stages --output-dir "$dir" ${ZERO_ARGS:-} \
        > "$dir.log" 2>&1 || tail -5 "$dir.log"
      n=$((n * 2))
    done
  done
}

run_efficiency() {
  for c in ${SCALING_CASES:-gpt2-xl:8 llama-2-7b:2}; do
    local model=${c%%:*} batch=${c##*:}
    for ((round = 1; round <= ${ROUNDS:-2}; ++round)); do
      local counts=(1)
      ((gpus > 1)) && counts+=("$gpus")
      for n in "${counts[@]}"; do
        local stages="1 2" dir="$out/efficiency_$(file_part "$model")_b${batch}_np${n}_round${round}"
        ((n == 1)) && stages="0 1"
        # shellcheck disable=SC2086
        launch "${mpi[@]}" -np "$n" build-gpu/bin/zero_bench --model "$model" --batch-size "$batch" --seq-length 1024 \
          --num-steps "$steps" --warmup-steps "$warmup" --stages $stages --output-dir "$dir" ${ZERO_ARGS:-} \
          > "$dir.log" 2>&1 || tail -5 "$dir.log"
      done
    done
  done
}

run_checkpointing() {
  local modes=(--activation-checkpointing none full selective)
  for batch in ${CKPT_BATCHES:-8 24 32 48}; do
    local dir="$out/checkpointing_gpt2-xl_b${batch}_np1"
    launch "${mpi[@]}" -np 1 build-gpu/bin/zero_bench --model gpt2-xl --batch-size "$batch" --seq-length 1024 \
      --stages 0 "${modes[@]}" --num-steps "$steps" --warmup-steps "$warmup" --output-dir "$dir" > "$dir.log" 2>&1 \
      || tail -5 "$dir.log"
  done
  local batch=${CKPT_LLAMA_BATCH:-2} dir="$out/checkpointing_llama-2-7b_b${CKPT_LLAMA_BATCH:-2}_t2048_np$gpus"
  launch "${mpi[@]}" -np "$gpus" build-gpu/bin/zero_bench --model meta-llama/Llama-2-7b-hf --batch-size "$batch" \
    --seq-length 2048 --stages 3 "${modes[@]}" --num-steps "$steps" --warmup-steps "$warmup" --output-dir "$dir" \
    > "$dir.log" 2>&1 || tail -5 "$dir.log"
}

run_lora() {
  local model=${LORA_MODEL:-meta-llama/Llama-2-7b-hf} batch=${LORA_BATCH:-8} seq=${LORA_SEQ:-512} rank=${LORA_RANK:-16}
  local common=(--model "$model" --batch-size "$batch" --seq-length "$seq" --num-steps "$steps" --warmup-steps "$warmup")
  for ((round = 1; round <= ${ROUNDS:-1}; ++round)); do
    launch build-gpu/bin/train "${common[@]}" --lora-rank "$rank" --json "$out/train_lora_r${rank}_round$round.json" \
      > "$out/lora_r${rank}_round$round.log" 2>&1 || tail -5 "$out/lora_r${rank}_round$round.log"
    PYTHONUNBUFFERED=1 launch python3 "$reference" --model "$(short_name "$model")" -B "$batch" -T "$seq" \
      --steps "${TORCH_STEPS:-12}" --warmup "${TORCH_WARMUP:-4}" --lora-rank "$rank" \
      > "$out/torch_lora_r${rank}_round$round.json" 2> "$out/torch_lora_r${rank}_round$round.err"
    launch build-gpu/bin/train "${common[@]}" --json "$out/train_full_round$round.json" > "$out/full_round$round.log" 2>&1 \
      || tail -5 "$out/full_round$round.log"
  done
}

for part in "$@"; do
  case $part in
    build) run_build ;;
    gtests) run_gtests ;;
    zero) run_zero ;;
    torch) run_torch ;;
    offload) run_offload ;;
    scaling) run_scaling ;;
    efficiency) run_efficiency ;;
    checkpointing) run_checkpointing ;;
    lora) run_lora ;;
    *)
      echo "gpu_suite: unknown part '$part' (build, gtests, zero, torch, offload, scaling, efficiency, checkpointing, lora)" >&2
      exit 2
      ;;
  esac
done
echo "---"
python3 scripts/summarise_results.py "$out"
