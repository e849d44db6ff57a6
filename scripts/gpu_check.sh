#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds sgrt with the CUDA backend for every
# target architecture, runs the CUDA tests (cross-backend op check, training on
# Fashion-MNIST) and the FP8-vs-BF16 GEMM benchmark, in a few minutes. Prints the
# figures and, when $OUT is set, writes them there (gpu.txt, tests.txt,
# gemm_cuda.jsonl) for bench/RESULTS.md.
# Usage: [OUT=dir] [BUILD_DIR=build-gpu] [SKIP_BUILD=1] [GEMM_MAX=8192] scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-gpu}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
status=0

nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSGRT_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${SGRT_CUDA_ARCHS:-87;89;90a}" -DSGRT_VULKAN=OFF >/dev/null || exit 1
  cmake --build "$build" -j "$(nproc)" --target test_cuda_ops test_cuda_train bench_gemm_cuda || exit 1
fi

# Tests (their MESSAGEs carry the accuracies; "skipping" here means no usable device).
for t in test_cuda_ops test_cuda_train; do
  echo "== $t" | tee -a "$out/tests.txt"
  "$build/tests/$t" 2>&1 | tee -a "$out/tests.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done

echo "== bench_gemm_cuda" | tee -a "$out/tests.txt"
"$build/bench/bench_gemm_cuda" "${GEMM_MAX:-8192}" 30 | tee "$out/gemm_cuda.jsonl"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "figures in $out"
exit $status
