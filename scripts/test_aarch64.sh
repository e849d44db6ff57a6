#!/usr/bin/env bash
# AArch64 under emulation (docs/edge.md): cross-builds the runtime side with
# cmake/aarch64-linux-gnu.cmake into build-aarch64 and runs, under qemu-aarch64:
#   - its test suites (layering, formats, GEMM, quantize and the optimizer updates
#     with each path, the row reductions' order) and the size report of the aarch64 libsgrt,
#   - the deployment check: a graph compiled, trained and exported by this machine's
#     build (`sgrt export`) is fine-tuned 3 steps and run by examples/edge (the C API)
#     on aarch64, which must print the same predictions as the x86 build and losses
#     equal to a relative 1e-5, and (x86 on its AVX2 GEMM) the same fine-tuned weights
#     to the bit (see below).
# Installs the cross compiler, qemu-user and arm64 zlib (multiarch) if missing.
# Usage: scripts/test_aarch64.sh   (HOST_BUILD: the host build with sgrt and edge,
# default build; BUILD_DIR: the cross build, default build-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
host=${HOST_BUILD:-build}
cross=${BUILD_DIR:-build-aarch64}

packages=(g++-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user zlib1g-dev:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test_aarch64: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  dpkg --print-foreign-architectures | grep -qx arm64 || "${sudo_cmd[@]}" dpkg --add-architecture arm64
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ -f "$host/build.ninja" ] || cmake -S . -B "$host" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$host" -j "$(nproc)" --target sgrt edge
cmake -S . -B "$cross" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build "$cross" -j "$(nproc)"

qemu=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
# qemu-user here hangs in a second guest thread's start (even a bare std::thread), so
# the emulated runs stay on one thread and skip the suites' thread-pool cases; the
# thread-count independence is tested natively.
export SGRT_NUM_THREADS=1
single_thread='*thread count*,*thread-count*,parallel_for*'
for t in test_layering test_formats test_quantize test_quantize_simd test_row_reduce test_optimizer_fast test_dequant_matmul test_gemm_skinny; do
  "${qemu[@]}" "$cross/tests/$t" -tce="$single_thread" >/dev/null
done
# test_gemm on the default CPU (qemu's "max", with BF16) covers every path (portable,
# neon, neon_bf16, forced by set_isa_limit); a Cortex-A53 (no BF16: detected as neon)
# runs the bit-identity check and the FP8 cases; SGRT_ISA=generic forces the
# portable kernel from the environment.
"${qemu[@]}" "$cross/tests/test_gemm" -tce="$single_thread" >/dev/null
QEMU_CPU=cortex-a53 "${qemu[@]}" "$cross/tests/test_gemm" -tc='NEON*,FP8*' >/dev/null
SGRT_ISA=generic "${qemu[@]}" "$cross/tests/test_gemm" -tc='gemm_f32*' >/dev/null
# The quantizer likewise: test_quantize_simd above sweeps the portable and NEON
# kernels against formats.h's scalar encode/decode on the default CPU (~5 s); the
# Cortex-A53 run checks the dispatch and the public entry points without BF16, and
# SGRT_ISA=generic runs the public quantize tests on the portable kernels.
QEMU_CPU=cortex-a53 "${qemu[@]}" "$cross/tests/test_quantize_simd" -tc='AArch64*,quantize? quantize_mx*' >/dev/null
SGRT_ISA=generic "${qemu[@]}" "$cross/tests/test_quantize" -tce="$single_thread" >/dev/null
scripts/size_report.sh --check "$cross"
echo "test_aarch64: suites pass under qemu-aarch64"

# Deployment: compile, train and export on this machine; run the same file on both.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$host/tools/sgrt" compile models/fashion_mlp.lua -o "$work/mlp.sg"
"$host/tools/sgrt" train "$work/mlp.sg" --steps 20 --checkpoint "$work/ck" --quiet >/dev/null
"$host/tools/sgrt" export "$work/mlp.sg" --checkpoint "$work/ck" -o "$work/deploy.sg"
mkdir "$work/data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  gunzip -c "/usr/share/datasets/fashion-mnist/$f.gz" >"$work/data/$f"
done
"$host/examples/edge/edge" "$work/deploy.sg" "$work/data" 3 1 >"$work/x86.txt"
"${qemu[@]}" "$cross/examples/edge/edge" "$work/deploy.sg" "$work/data" 3 1 "$work/arm_tuned.sg" >"$work/arm.txt"
SGRT_ISA=generic "${qemu[@]}" "$cross/examples/edge/edge" "$work/deploy.sg" "$work/data" 3 1 >"$work/arm_portable.txt"
"${qemu[@]}" "$cross/examples/edge/edge_static" "$work/deploy.sg" "$work/data" 3 1 >"$work/arm_static.txt"
cmp "$work/arm.txt" "$work/arm_static.txt"
cmp "$work/arm.txt" "$work/arm_portable.txt"  # NEON and portable GEMMs agree to the bit
# The x86 run uses this machine's best GEMM (AVX-512 here), whose K sums may be
# ordered otherwise than NEON's, and each libm its own logf: a GEMM output is then
# off by a few ulps (~1e-7 relative); three AdamW steps grow that to well under 1e-5
# of the loss, while a wrong kernel or a misread file moves it by far more.
# Predictions must be equal.
awk '
  FNR == NR { x86[FNR] = $0; next }
  {
    if ($1 == "step") {
      split(x86[FNR], a, " ")
      d = $4 - a[4]; if (d < 0) d = -d
      printf "aarch64 vs x86: step %s loss %s vs %s (relative difference %.2g)\n", $2, $4, a[4], d / a[4]
      if (a[1] != "step" || d > 1e-5 * a[4]) bad = 1
    } else if ($0 != x86[FNR]) { print "aarch64 differs from x86: " $0 " vs " x86[FNR]; bad = 1 }
  }
  END { exit bad }' "$work/x86.txt" "$work/arm.txt"
grep accuracy "$work/arm.txt"
# Bit for bit: the element-wise, reduction and optimizer kernels round alike on both
# ISAs (no FMA contraction; cpu/row_reduce.h's summation order, docs/edge.md) and
# x86's AVX2 GEMM sums K in the order of the NEON and aarch64-portable ones, so the
# fine-tuned weights must be the same bytes. (x86's AVX-512 and portable GEMMs sum
# in other orders: the losses above, not the bytes, compare those.)
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  SGRT_ISA=avx2 "$host/examples/edge/edge" "$work/deploy.sg" "$work/data" 3 1 "$work/x86_tuned.sg" >/dev/null
  cmp "$work/x86_tuned.sg" "$work/arm_tuned.sg"
  echo "aarch64 vs x86 (AVX2 GEMM): fine-tuned weights identical"
else
  echo "test_aarch64: no AVX2+FMA here, the bit-for-bit weights check is skipped"
fi
echo "test_aarch64: ok"
