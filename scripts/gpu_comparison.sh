#!/usr/bin/env bash
# The comparison suite on a GPU host, as its users run it: zero_bench over every GPU of the host (the ZeRO
# stages), then offload_bench on GPU 0 (the offload strategies, nvme included), each with the given model and
# otherwise its defaults. Builds build-gpu/ first if needed. Results, charts and logs land in OUTPUT_DIR.
# Usage: scripts/gpu_comparison.sh OUTPUT_DIR NVME_DIR [MODEL [BATCH [SEQ]]]   (default gpt2-xl 8 1024 for
#   zero_bench; offload_bench keeps its own defaults, batch 4 and sequence 512, unless OFFLOAD_ARGS says more)
# Time: gpt2-xl takes about a minute for zero_bench on 2 H200s; offload_bench's nvme strategy moves the whole
# optimizer state through the disk every step (about 15 s a step on a virtio disk, 25 steps by default).
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu_comparison.sh OUTPUT_DIR NVME_DIR [MODEL [BATCH [SEQ]]]"
out=${1:?$usage} nvme=${2:?$usage} model=${3:-gpt2-xl} batch=${4:-8} seq=${5:-1024}
mkdir -p "$out" "$nvme"
if [[ ! -x build-gpu/bin/zero_bench || ! -x build-gpu/bin/offload_bench ]]; then
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" 2>&1 &&
    cmake --build build-gpu --parallel "$(nproc)" --target zero_bench offload_bench > "$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -20; exit 1; }
fi
gpus=$(nvidia-smi -L | wc -l)
mpirun -np "$gpus" --bind-to none build-gpu/bin/zero_bench --model "$model" --batch-size "$batch" \
  --seq-length "$seq" --output-dir "$out/zero" 2> "$out/zero_progress.log" | tee "$out/zero.log"
zero=${PIPESTATUS[0]}
CUDA_VISIBLE_DEVICES=0 build-gpu/bin/offload_bench --model "$model" --nvme-path "$nvme" ${OFFLOAD_ARGS:-} \
  --output-dir "$out/offload" 2> "$out/offload_progress.log" | tee "$out/offload.log"
offload=${PIPESTATUS[0]}
echo "zero_bench exit $zero, offload_bench exit $offload"
((zero == 0 && offload == 0))
