#!/usr/bin/env bash
# Installs the system packages the build needs (apt-get, only those missing), then configures and
# builds Release into build/ (programs in build/bin/). Assumes the CUDA toolkit is installed
# (default /usr/local/cuda, or CUDA_HOME / nvcc on PATH).
# Usage: ./scripts/setup.sh [extra CMake arguments, e.g. -DCMAKE_CUDA_ARCHITECTURES=90]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config
          libopenmpi-dev openmpi-bin
          libboost-program-options-dev nlohmann-json3-dev libgtest-dev libaio-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_home=${CUDA_HOME:-/usr/local/cuda}
nvcc=$(command -v nvcc || true)
[[ -n $nvcc ]] || nvcc="$cuda_home/bin/nvcc"
if [[ ! -x $nvcc ]]; then
  echo "setup: the CUDA toolkit was not found (no nvcc on PATH nor at $cuda_home/bin/nvcc)." >&2
  echo "       Install CUDA 13 or set CUDA_HOME to its folder." >&2
  exit 1
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" "$@"
cmake --build build --parallel "$(nproc)"
echo "setup: built; programs are in build/bin/"
