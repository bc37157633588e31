#!/usr/bin/env bash
# One performance iteration on a GPU host: build build-gpu/ (Release, sm_90), check the GPU ops against the CPU
# (cuda_ops_test), time the ops of one model (op_bench), then each case against the PyTorch reference in the
# same call (scripts/gpu_bench.sh). Prints the op table and the throughput table last.
# Usage: scripts/gpu_perf.sh OUTPUT_DIR [MODEL:BATCH[:SEQ] ...]
#   OP_BENCH="--model gpt2 --batch-size 16" by default; OP_BENCH=none skips it.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: scripts/gpu_perf.sh OUTPUT_DIR [MODEL:BATCH[:SEQ] ...]}
shift
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/environment.txt"
build_gpu_tree "$out" cuda_ops_test op_bench train
build-gpu/bin/cuda_ops_test > "$out/cuda_ops_test.log" 2>&1
tests=$?
grep -E "PASSED|FAILED|Failure|Expected|which is" "$out/cuda_ops_test.log" | head -30
if [[ ${OP_BENCH:-} != none ]]; then
  # shellcheck disable=SC2086
  build-gpu/bin/op_bench ${OP_BENCH:---model gpt2 --batch-size 16} > "$out/op_bench.log" 2>&1 || tail -5 "$out/op_bench.log"
fi
scripts/gpu_bench.sh "$out/bench" "$@" > "$out/bench.log" 2>&1
[[ -f $out/op_bench.log ]] && cat "$out/op_bench.log"
sed -n '/^---$/,$p' "$out/bench.log"  # the table gpu_bench.sh prints last, however many rows (and ROUNDS's note)
exit $tests
