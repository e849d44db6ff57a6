#!/usr/bin/env bash
# Instructions per element of the quantizer's AArch64 inner loops (cpu/quantize_simd.h),
# portable (quantize_generic.cpp) vs NEON (quantize_neon.cpp), counted from the cross
# compiler's disassembly: no ARM board here, so no timing (bench/RESULTS.md).
# Each loop is compiled alone, with kernels/CMakeLists.txt's flags for those files,
# and bench/loop_insns.py counts each function's main loop (4 elements an iteration).
# Usage: bench/quantize_neon_insns.sh   (needs g++-aarch64-linux-gnu, docs/edge.md)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
loops=(
  "enc_e4m3 EncodeCounts encode_span<4, fmt::spec_e4m3(), false>"
  "enc_e4m3_sr EncodeCounts encode_span<4, fmt::spec_e4m3(), true>"
  "enc_e2m1 EncodeCounts encode_span<4, fmt::spec_e2m1(), false>"
  "enc_f16 EncodeCounts encode_span<4, fmt::spec_f16(), false>"
  "enc_bf16 EncodeCounts encode_span<4, fmt::spec_bf16(), false>"
  "dec_e4m3 void decode_span<4, fmt::spec_e4m3()>"
  "dec_f16 void decode_span<4, fmt::spec_f16()>"
)
for path in portable neon; do
  {
    [ "$path" = neon ] && echo '#define SGRT_QUANT_NEON 1'
    echo '#include "cpu/quantize_simd.h"'
    echo 'namespace sgrt::cpu::quant_impl {'
    for l in "${loops[@]}"; do
      read -r name ret fn <<<"$l"
      args=EncodeArgs; [ "$ret" = void ] && args=DecodeArgs
      echo "$ret $name(const $args& a) { return $fn(a); }"
    done
    echo '}'
  } >"$work/$path.cpp"
  aarch64-linux-gnu-g++ -Ikernels -Icore/include -O3 -DNDEBUG -std=gnu++20 -ffp-contract=off \
    -c "$work/$path.cpp" -o "$work/$path.o"
  aarch64-linux-gnu-objdump -d --no-show-raw-insn "$work/$path.o" >"$work/$path.s"
done
names=()
for l in "${loops[@]}"; do read -r name _ <<<"$l"; names+=("$name"); done
python3 bench/loop_insns.py portable="$work/portable.s" neon="$work/neon.s" -- "${names[@]}"
