#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test through ctest.
# Usage: [SANITIZE=1] scripts/test.sh [ctest args...]   (BUILD_DIR defaults to build-test:
# its own folder, so it never reconfigures the build/ of the README's first command)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${BUILD_DIR:-build-test}
cmake_args=(-DCMAKE_BUILD_TYPE=Release)
# SANITIZE=1: ASan + UBSan in build-asan (docs/reliability.md), any report fails
# its test; no benchmarks, and without the tests that train on the real data
# set, run on Vulkan (lavapipe is not instrumented), measure release binaries or
# run the 135M-parameter SmolLM2 against its reference (minutes under ASan).
if [ "${SANITIZE:-0}" = 1 ]; then
  build=${BUILD_DIR:-build-asan}
  cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSGRT_SANITIZE=ON -DSGRT_BENCH=OFF)
  set -- -E '^(size_report|test_determinism|test_edge_example|test_vulkan_.*|test_formats_glsl|test_llama_reference)$' "$@"
fi
# Where the CUDA toolkit is installed (CI: no GPU), build the CUDA backend too;
# its tests compile, link and skip. One architecture, Hopper's sm_90a, proves
# the kernels compile (they have no per-architecture code, and each more
# architecture is another device compile of every kernel);
# SGRT_CI_CUDA_ARCHS="87;89;90a" builds the default set. Not under the sanitizers. scripts/gpu_check.sh builds for the GPU it runs on.
if [ -x /usr/local/cuda/bin/nvcc ] && [ "${SANITIZE:-0}" != 1 ]; then
  SGRT_CMAKE_ARGS="-DSGRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${SGRT_CI_CUDA_ARCHS:-90a} ${SGRT_CMAKE_ARGS:-}"
fi
cmake -S . -B "$build" -G Ninja "${cmake_args[@]}" ${SGRT_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
