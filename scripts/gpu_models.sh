#!/usr/bin/env bash
# The model families on a GPU host, in parts, each writing under OUTPUT_DIR:
#   check   build Release (sm_90); cuda_ops_test and cuda_training_test (every op and a training step of each family
#           against the CPU backend); the golden files made again here from Hugging Face's own classes
#           (tests/reference/make_golden.py, copied to OUTPUT_DIR) and held against the CPU (golden_test) and the GPU
#           (golden_gpu_test) backends; op_bench of Gemma-3-1B (batch 8, seq 2048) and of Mistral-7B v0.1 at seq 8192
#           (its window of 4096: the banded attention, our kernels against cuDNN's).
#   (gemma and mistral use the build that check makes.)
#   gemma   Gemma-3-1B batch 8, seq 2048 on one GPU (scripts/gpu_bench.sh, ROUNDS rounds, default 2, against the
#           reference built from transformers' Gemma3ForCausalLM).
#   mistral Mistral-7B v0.3 on every GPU, ZeRO stage 3, batch 2, seq 2048 (zero_bench, against MistralForCausalLM
#           under FSDP2: scripts/gpu_suite.sh).
# Usage: scripts/gpu_models.sh OUTPUT_DIR PART ...
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: scripts/gpu_models.sh OUTPUT_DIR PART ...}
shift
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Mistral-7B v0.1's config.json (the release with a sliding window), abridged to the fields that set the architecture.
mistral_v01_config() {
  cat > "$1" << 'JSON'
{"model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
 "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
 "tie_word_embeddings": false, "hidden_act": "silu"}
JSON
}

# run_gtest NAME: one test program of build-gpu/ (at most 400 s), its log in OUT, its passes counted and its failures
# shown; fails where the program does.
run_gtest() {
  local rc=0
  timeout 400 "build-gpu/bin/$1" > "$out/$1.log" 2>&1 || rc=1
  echo "$1: $(grep -cE '^\[       OK' "$out/$1.log") passed"
  grep -E "^\[  FAILED|Failure|Expected|which is|logits|gradient of" "$out/$1.log" | head -30
  return $rc
}

run_check() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/environment.txt"
  build_gpu_tree "$out" cuda_ops_test cuda_training_test golden_test golden_gpu_test op_bench train zero_bench sweep
  local status=0
  run_gtest cuda_ops_test || status=1
  run_gtest cuda_training_test || status=1
  # (The golden tests below then check the files made here, which the call copies back to be committed.)
  python3 tests/reference/make_golden.py > "$out/golden.log" 2>&1 || status=1
  cat "$out/golden.log"
  cp tests/reference/golden_*.safetensors "$out/"
  run_gtest golden_test || status=1
  run_gtest golden_gpu_test || status=1
  mistral_v01_config "$out/mistral-7b-v0.1.json"
  build-gpu/bin/op_bench --model gemma-3-1b --batch-size 8 --seq-length 2048 > "$out/op_bench_gemma.log" 2>&1
  build-gpu/bin/op_bench --model "$out/mistral-7b-v0.1.json" --batch-size 1 --seq-length 8192 \
    > "$out/op_bench_mistral_v01.log" 2>&1
  cat "$out/op_bench_gemma.log"
  grep -E "^op_bench|attention|choices|^sum" "$out/op_bench_mistral_v01.log"
  return $status
}

run_gemma() {
  ROUNDS=${ROUNDS:-2} scripts/gpu_bench.sh "$out/gemma" gemma-3-1b:8:2048 > "$out/gemma.log" 2>&1
  grep -E "^\[|tok/s|^GEMM|^attention" "$out/gemma.log" | head -40
  sed -n '/^---$/,$p' "$out/gemma.log"
}

run_mistral() {
  SEQ=2048 ZERO_CASES=mistral-7b:2 ZERO_ARGS="--stages 3" TORCH_MODES=fsdp scripts/gpu_suite.sh "$out/mistral" zero torch \
    > "$out/mistral.log" 2>&1
  tail -20 "$out/mistral.log"
  cat "$out"/mistral/torch_*.json
  tail -3 "$out"/mistral/torch_*.err
}

status=0
for part in "$@"; do
  case $part in
    check) run_check || status=1 ;;
    gemma) run_gemma ;;
    mistral) run_mistral ;;
    *)
      echo "gpu_models: unknown part '$part' (check, gemma, mistral)" >&2
      exit 2
      ;;
  esac
done
exit $status
