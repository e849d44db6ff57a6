#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test through ctest.
# Usage: scripts/test.sh [ctest args...]   (BUILD_DIR defaults to build)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${BUILD_DIR:-build}
# Where the CUDA toolkit is installed (CI: no GPU), build the CUDA backend too, for
# one architecture (~40 s more on 2 cores); its tests compile, link and skip. Not
# under the sanitizers. scripts/gpu_check.sh builds every architecture on a GPU.
if [ -x /usr/local/cuda/bin/nvcc ] && [ "${SANITIZE:-0}" != 1 ]; then
  SGRT_CMAKE_ARGS="-DSGRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${SGRT_CI_CUDA_ARCHS:-90a} ${SGRT_CMAKE_ARGS:-}"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SGRT_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
