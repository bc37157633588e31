#!/usr/bin/env bash
# Installs the system packages the build needs (apt-get, only those missing), then configures and
# builds Release into build/ (programs in build/bin/). With the CUDA toolkit (default /usr/local/cuda, or
# CUDA_HOME / nvcc on PATH) it builds the GPU backend too, and takes NCCL from the toolkit, the system or
# NVIDIA's apt repository; without it, it says so and builds the CPU backend and every program (--device cpu).
# Usage: ./scripts/setup.sh [extra CMake arguments, e.g. -DCMAKE_CUDA_ARCHITECTURES=90]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build
          libopenmpi-dev openmpi-bin
          libboost-program-options-dev nlohmann-json3-dev libgtest-dev libaio-dev zlib1g-dev)
cuda_home=${CUDA_HOME:-/usr/local/cuda}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
apt_install() {
  echo "setup: installing $*"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
((${#missing[@]} == 0)) || apt_install "${missing[@]}"

nvcc=$(command -v nvcc || true)
[[ -n $nvcc ]] || nvcc="$cuda_home/bin/nvcc"
cuda_args=()
if [[ -x $nvcc ]]; then
  cuda_args=(-DCMAKE_CUDA_COMPILER="$nvcc" -DZB_CPU_ONLY=OFF)
  # NCCL is not part of every CUDA toolkit install: look in the toolkit and the system folders, and otherwise
  # take libnccl-dev from NVIDIA's CUDA apt repository (how the toolkit is usually installed on Debian/Ubuntu).
  nccl_found() {
    compgen -G "$cuda_home/include/nccl.h" >/dev/null || compgen -G "/usr/include/nccl.h" >/dev/null
  }
  if ! nccl_found; then
    if apt-cache show libnccl-dev >/dev/null 2>&1; then
      apt_install libnccl-dev libnccl2
    else
      echo "setup: NCCL was not found (no nccl.h in $cuda_home/include or /usr/include) and no apt source offers" >&2
      echo "       libnccl-dev. Add NVIDIA's CUDA apt repository, or set NCCL_ROOT to an NCCL install." >&2
      [[ -n ${NCCL_ROOT:-} ]] || exit 1
    fi
  fi
else
  echo "setup: the CUDA toolkit was not found (no nvcc on PATH nor at $cuda_home/bin/nvcc): building the CPU" >&2
  echo "       backend only; every program runs with --device cpu. Install CUDA 13 (or set CUDA_HOME) for GPUs." >&2
  cuda_args=(-DZB_CPU_ONLY=ON)
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "$@"
cmake --build build --parallel "$(nproc)"
echo "setup: built; programs are in build/bin/"
