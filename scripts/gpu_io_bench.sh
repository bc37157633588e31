#!/usr/bin/env bash
# NVMe offload I/O on a GPU host: dd with O_DIRECT sets the disk's write and read GB/s, aio_bench (our
# AioFile over a grid of DeepSpeed aio settings) is set beside it; the requirement is aio >= 90% of dd.
# Usage: scripts/gpu_io_bench.sh OUTPUT_DIR DIR [aio_bench flags ...]   (DIR: a folder on the disk to test)
# Needs a Release build in build-gpu/ (scripts/gpu_check.sh makes one). Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu_io_bench.sh OUTPUT_DIR DIR [aio_bench flags ...]"
out=${1:?$usage}
dir=${2:?$usage}
shift 2
mkdir -p "$out"

# GB/s (1e9 bytes) of one dd run, from the bytes and seconds on its summary line ("N bytes ... copied, S s, ...").
dd_gbps() {
  local log="$out/dd_$1.log"
  shift
  dd "$@" 2> "$log" || { cat "$log"; return 1; }
  awk '/copied,/ { for (i = 1; i < NF; ++i) if ($i == "copied,") printf "%.3f", $1 / $(i + 1) / 1e9 }' "$log"
}
dd_write=$(dd_gbps write if=/dev/zero of="$dir/dd.bin" bs=8M count=256 oflag=direct)
dd_read=$(dd_gbps read if="$dir/dd.bin" of=/dev/null bs=8M iflag=direct)
rm -f "$dir/dd.bin"

rm -f "$out/aio_bench.json"  # no stale results if this run fails
bytes=(--bytes 2147483648); [[ " $* " == *" --bytes "* ]] && bytes=()  # extra flags may set their own
build-gpu/bin/aio_bench --path "$dir" "${bytes[@]}" --json "$out/aio_bench.json" "$@" 2>&1 | tee "$out/aio_bench.log"
read -r aio_write aio_read < <(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
print('%.3f %.3f' % (max(x['write_gbps_best'] for x in r), max(x['read_gbps_best'] for x in r)))" "$out/aio_bench.json" 2>/dev/null)

# One table row: direction, dd GB/s, aio_bench GB/s, and their ratio (n/a where either is missing).
row() {
  local ratio=n/a
  [[ -n $2 && -n $3 ]] && ratio=$(python3 -c "print(f'{$3 / $2:.2f}')" 2>/dev/null || echo n/a)
  printf '%-5s dd %8s GB/s | aio_bench %8s GB/s | aio/dd %s (needs >= 0.90)\n' "$1" "${2:-n/a}" "${3:-n/a}" "$ratio"
}
echo ---
row write "$dd_write" "${aio_write:-}"
row read "$dd_read" "${aio_read:-}"
