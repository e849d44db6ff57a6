// The f32 row reductions of the CPU kernels (sums, dot products, maxima,
// log-sum-exp), in one order on every ISA, so that x86-64 (SSE2, AVX2 or AVX-512
// builds) and AArch64 (NEON) compute the same bits (docs/edge.md, "Reduction
// order"):
//  - a sum of n terms keeps kLanes = 16 partial sums: term i is added to partial
//    i % 16, in increasing i, and the partials are then added in a fixed tree
//    (p[j] += p[j + 8], then + 4, + 2, + 1). The 16 lanes are independent, so
//    compilers vectorize them without reassociating anything (4 SSE or NEON
//    registers, 2 AVX registers, 1 AVX-512 register): every vector width gives the
//    bits of the scalar order. A sequential sum never vectorizes without
//    -ffast-math, which would let each compiler pick its own order.
//  - the files that use it are compiled with -ffp-contract=off
//    (kernels/CMakeLists.txt): a * b + c rounds twice on every ISA, where AArch64
//    compilers would otherwise fuse it and x86's baseline cannot.
//  - a maximum compares the floats' order keys as integers, a total order (-0 <
//    +0; NaNs beyond the infinities on their sign's side): exact in any order, so
//    it needs no lanes and vectorizes as an integer max.
// The row functions are compiled once (row_reduce.cpp); lane_sum takes any term
// and inlines into its kernel. On x86-64 (GCC) they, and the loops marked
// SGRT_X86_CLONES, are also built for AVX2 and AVX-512, the copy picked once at
// load by the CPU (target_clones); the order above makes every copy's bits the
// baseline's.
#pragma once
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SGRT_X86_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define SGRT_X86_CLONES
#endif

namespace sgrt::cpu {

constexpr int kLanes = 16;

// sum over i < n of term(i), in the lane order above, in term's type (float, or
// double for sums of squares).
template <class F>
inline auto lane_sum(int64_t n, F term) {
  decltype(term(int64_t{0})) p[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) p[j] += term(i + j);
  for (int j = 0; i + j < n; ++j) p[j] += term(i + j);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) p[j] += p[j + w];
  return p[0];
}

float row_sum(const float* x, int64_t n);
float row_dot(const float* a, const float* b, int64_t n);  // sum of a[i] * b[i]

float row_max(const float* x, int64_t n);  // -inf for n = 0
// log(sum exp(x[i])), shifted by the maximum; exp is fast_exp (vectorizes), the
// one log libm's.
float row_logsumexp(const float* x, int64_t n);
// lse[r] = row_logsumexp(x + r * n, n) for r < rows, the same bits. Rows of at
// most kLanes values (a 10-class head's) go kLanes rows at a time, each step
// across rows: along a row that short nothing vectorizes, and exp was a
// classifier's whole time.
void rows_logsumexp(const float* x, int64_t rows, int64_t n, float* lse);

}  // namespace sgrt::cpu
