# Functions the GPU scripts share; source it from the repository root (the scripts cd there first).

# build_gpu_tree OUT [TARGET ...]: configures build-gpu/ (Release, sm_90, Ninja where installed) and builds the
# targets (all without any), logs in OUT/configure.log and OUT/build.log; on failure prints the errors and
# exits 1. Prints the number of warnings.
build_gpu_tree() {
  local out=$1
  shift
  local generator=() targets=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  (($#)) && targets=(--target "$@")
  cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu --parallel "$(nproc)" "${targets[@]}" > "$out/build.log" 2>&1 \
    || { grep -E "error" "$out/build.log" | head -30; exit 1; }
  grep -cE "warning" "$out/build.log" | sed 's/^/build warnings: /'
}

# json_field FILE KEY: the KEY of a result file, as Python prints it (empty, with exit code 1, when the file
# cannot be read; empty when the key is missing or null): a record file (the JSON array train --json, zero_bench
# and offload_bench write; its first record) or the JSON line a reference script prints (its first line).
json_field() {
  python3 - "$1" "$2" << 'PYTHON' 2> /dev/null
import json, sys
path, key = sys.argv[1], sys.argv[2]
with open(path) as f:
    text = f.read()
try:
    value = json.loads(text)
except json.JSONDecodeError:
    value = json.loads(text.splitlines()[0])
if isinstance(value, list):
    value = value[0]
field = value.get(key)
print("" if field is None else field)
PYTHON
}
