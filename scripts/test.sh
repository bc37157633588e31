#!/usr/bin/env bash
# Runs the whole test suite through ctest (tests that need a GPU skip themselves where none is found).
# Usage: ./scripts/test.sh [extra ctest arguments, e.g. -R Golden]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d build ]] || { echo "test: no build/ folder; run ./scripts/setup.sh first" >&2; exit 1; }
ctest --test-dir build --output-on-failure --timeout 900 -j "$(nproc)" "$@"
