#!/usr/bin/env bash
# One performance iteration on a GPU host: build build-gpu/ (Release, sm_90), check the GPU ops against the CPU
# (cuda_ops_test), time the ops of one model (op_bench), then each case against the PyTorch reference in the
# same call (scripts/gpu_bench.sh). Prints the op table and the throughput table last.
# Usage: scripts/gpu_perf.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH[:SEQ] ...]
#   OP_BENCH="--model gpt2 --batch-size 16" by default; OP_BENCH=none skips it.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_perf.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH[:SEQ] ...]}
reference=${2:?usage: scripts/gpu_perf.sh OUTPUT_DIR TORCH_REFERENCE [MODEL:BATCH[:SEQ] ...]}
shift 2
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/environment.txt"
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu --parallel "$(nproc)" --target cuda_ops_test op_bench train > "$out/build.log" 2>&1 \
  || { grep -E "error" "$out/build.log" | head -30; exit 1; }
build-gpu/bin/cuda_ops_test > "$out/cuda_ops_test.log" 2>&1
tests=$?
grep -E "PASSED|FAILED|Failure|Expected|which is" "$out/cuda_ops_test.log" | head -30
if [[ ${OP_BENCH:-} != none ]]; then
  # shellcheck disable=SC2086
  build-gpu/bin/op_bench ${OP_BENCH:---model gpt2 --batch-size 16} > "$out/op_bench.log" 2>&1 || tail -5 "$out/op_bench.log"
fi
scripts/gpu_bench.sh "$out/bench" "$reference" "$@" > "$out/bench.log" 2>&1
[[ -f $out/op_bench.log ]] && cat "$out/op_bench.log"
sed -n '/^---$/,$p' "$out/bench.log"  # the table gpu_bench.sh prints last, however many rows (and ROUNDS's note)
exit $tests
