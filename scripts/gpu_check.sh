#!/usr/bin/env bash
# One batched run on a GPU host: (optionally) regenerate the PyTorch golden files, build Release for the GPU
# present, run the whole test suite, and keep the logs.
# Usage: scripts/gpu_check.sh OUTPUT_DIR [--golden]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: scripts/gpu_check.sh OUTPUT_DIR [--golden]}
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1; g++ --version | head -1; cmake --version | head -1
} 2>&1 | tee "$out/environment.txt"

if [[ ${2:-} == --golden ]]; then
  python3 tests/reference/make_golden.py 2>&1 | tee "$out/golden.log"
  cp tests/reference/golden_*.safetensors "$out/" 2>/dev/null
fi

build_gpu_tree "$out"
ctest --test-dir build-gpu --output-on-failure -j 8 > "$out/ctest.log" 2>&1
status=$?
grep -E "tests passed|FAILED|Failure|Expected|actual|which is" "$out/ctest.log" | head -60
# few files come back from such runs: bundle the logs
tar -czf "$out/logs.tar.gz" -C "$out" environment.txt configure.log build.log ctest.log $(cd "$out" && ls golden.log 2>/dev/null) \
  && rm -f "$out"/{environment.txt,configure.log,build.log,ctest.log,golden.log}
exit $status
