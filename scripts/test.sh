#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test through ctest.
# Usage: scripts/test.sh [ctest args...]   (BUILD_DIR defaults to build)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SGRT_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
