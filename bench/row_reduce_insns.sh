#!/usr/bin/env bash
# Instructions per element of the CPU kernels' f32 row reductions (sums, dot products,
# maxima, the softmax's sum of exponentials), before and after cpu/row_reduce.h, on
# AArch64 (the cross compiler) and x86-64 (the host's g++, baseline ISA), counted from
# the disassembly by bench/loop_insns.py: no ARM board here, so no timing
# (bench/RESULTS.md). "before" is each loop as it was in reduce.cpp, norm.cpp,
# attention.cpp and classifier.cpp (sequential sums, the -std default contraction);
# "after" is row_reduce.h with kernels/CMakeLists.txt's flags for those files.
# Usage: bench/row_reduce_insns.sh   (needs g++-aarch64-linux-gnu, docs/edge.md)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/before.cpp" <<'CPP'
#include <cmath>
#include <cstdint>
namespace bench {
float row_sum(const float* x, int64_t n) { float s = 0.f; for (int64_t i = 0; i < n; ++i) s += x[i]; return s; }
float sqdev(const float* x, float m, int64_t n) {
  float v = 0.f; for (int64_t i = 0; i < n; ++i) v += (x[i] - m) * (x[i] - m); return v;
}
float row_dot(const float* a, const float* b, int64_t n) { float d = 0.f; for (int64_t i = 0; i < n; ++i) d += a[i] * b[i]; return d; }
float row_max(const float* x, int64_t n) {  // attention.cpp's; classifier.cpp called std::fmax
  float m = -INFINITY; for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m; return m;
}
float sumexp(const float* x, float m, int64_t n) {  // classifier.cpp and reduce.cpp: libm's expf
  float s = 0.f; for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m); return s;
}
}
CPP
# After: row_reduce.cpp's row functions, and lane_sum as norm.cpp and
# row_logsumexp instantiate it.
cat >"$work/after.cpp" <<'CPP'
#include <cmath>

#include "cpu/fast_math.h"
#include "cpu/row_reduce.h"
using namespace sgrt::cpu;
namespace bench {
float sqdev(const float* x, float m, int64_t n) { return lane_sum(n, [&](int64_t i) { return (x[i] - m) * (x[i] - m); }); }
float sumexp(const float* x, float m, int64_t n) { return lane_sum(n, [&](int64_t i) { return fast_exp(x[i] - m); }); }
}
CPP
cat kernels/cpu/row_reduce.cpp >>"$work/after.cpp"
# The AdamW step, the same source in both.
cat >"$work/adamw.cpp" <<'CPP'
namespace bench {
// optimizer_update.cpp's AdamW step on f32 state (its blocks do not alias: __restrict).
void adamw(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t n,
           float b1, float b2, float step, float bc2s, float eps, float decay) {
  for (int64_t i = 0; i < n; ++i) {
    w[i] *= decay;
    m[i] = b1 * m[i] + (1.f - b1) * g[i];
    v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
    w[i] -= step * m[i] / (std::sqrt(v[i]) / bc2s + eps);
  }
}
}
CPP
cat "$work/adamw.cpp" >>"$work/before.cpp"
cat "$work/adamw.cpp" >>"$work/after.cpp"
for arch in aarch64 x86; do
  cxx=g++ objdump=objdump
  [ $arch = aarch64 ] && cxx=aarch64-linux-gnu-g++ objdump=aarch64-linux-gnu-objdump
  for v in before after; do
    flags=(); [ $v = after ] && flags=(-ffp-contract=off -fno-math-errno -fno-trapping-math)
    $cxx -Ikernels -O3 -DNDEBUG -std=gnu++20 "${flags[@]}" -c "$work/$v.cpp" -o "$work/$arch-$v.o"
    $objdump -d --no-show-raw-insn "$work/$arch-$v.o" >"$work/$arch-$v.s"
  done
done
# Elements per iteration, read from each loop's pointer step in the listings: the
# sequential sums "before" are scalar, except where gcc vectorized the products and
# kept four in-order scalar adds (4 elements); x86 unrolls the plain sum by 4. After:
# the 16 lanes for the sums, one 16-byte vector for the integer-key max and AdamW.
# "sumexp before" also calls libm's expf once per element (not counted); "adamw
# before" on AArch64 counts its errno path (a call to sqrtf for negative inputs)
# too: 13 of its 37 instructions, placed inside the loop and not executed.
python3 bench/loop_insns.py aarch64-before="$work/aarch64-before.s" aarch64-after="$work/aarch64-after.s" \
  x86-before="$work/x86-before.s" x86-after="$work/x86-after.s" -- \
  row_sum:1,16,4,16 sqdev:4,16,4,16 row_dot:4,16,4,16 row_max:1,4,1,4 sumexp:1,16,1,16 adamw:1,4,1,4
