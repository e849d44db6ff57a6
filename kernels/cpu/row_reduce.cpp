// The row reductions of row_reduce.h, compiled here for every kernel (on x86-64
// with AVX2 and AVX-512 copies beside the baseline: SGRT_X86_CLONES).
#include "cpu/row_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/fast_math.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

// A monotonic map of floats to int32 (negative floats' magnitude bits flipped);
// applying it twice gives the bits back.
int32_t order_key(float x) {
  int32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b ^ ((b >> 31) & 0x7fffffff);
}

float from_order_key(int32_t k) {
  k ^= (k >> 31) & 0x7fffffff;
  float x;
  std::memcpy(&x, &k, sizeof x);
  return x;
}

}  // namespace

SGRT_X86_CLONES float row_sum(const float* x, int64_t n) {
  return lane_sum(n, [x](int64_t i) { return x[i]; });
}

SGRT_X86_CLONES float row_dot(const float* a, const float* b, int64_t n) {
  return lane_sum(n, [a, b](int64_t i) { return a[i] * b[i]; });
}

SGRT_X86_CLONES float row_max(const float* x, int64_t n) {
  int32_t m = order_key(-INFINITY);
  for (int64_t i = 0; i < n; ++i) {
    int32_t k = order_key(x[i]);
    m = k > m ? k : m;
  }
  return from_order_key(m);
}

SGRT_X86_CLONES float row_logsumexp(const float* x, int64_t n) {
  float m = row_max(x, n);
  return m + std::log(lane_sum(n, [x, m](int64_t i) { return fast_exp(x[i] - m); }));
}

SGRT_X86_CLONES void rows_logsumexp(const float* x, int64_t rows, int64_t n, float* lse) {
  int64_t r0 = 0;
  if (n <= kLanes) {
    // row_logsumexp of kLanes rows, row l in lane l: the same maximum, the
    // same terms, and lane_sum's order for n <= kLanes (term j alone in
    // partial j, then the tree).
    for (; r0 + kLanes <= rows; r0 += kLanes) {
      const float* xb = x + r0 * n;
      int32_t mk[kLanes];
      for (int l = 0; l < kLanes; ++l) mk[l] = order_key(-INFINITY);
      for (int64_t j = 0; j < n; ++j)
        for (int l = 0; l < kLanes; ++l) {
          const int32_t k = order_key(xb[l * n + j]);
          mk[l] = k > mk[l] ? k : mk[l];
        }
      float m[kLanes], p[kLanes][kLanes];
      for (int l = 0; l < kLanes; ++l) m[l] = from_order_key(mk[l]);
      for (int64_t j = 0; j < kLanes; ++j)
        for (int l = 0; l < kLanes; ++l) p[j][l] = j < n ? 0.f + fast_exp(xb[l * n + j] - m[l]) : 0.f;
      for (int w = kLanes / 2; w > 0; w /= 2)
        for (int j = 0; j < w; ++j)
          for (int l = 0; l < kLanes; ++l) p[j][l] += p[j + w][l];
      for (int l = 0; l < kLanes; ++l) lse[r0 + l] = m[l] + std::log(p[0][l]);
    }
  }
  // Longer rows (a language model's vocabulary) one per call, rows across threads.
  parallel_for(rows - r0, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
    for (int64_t r = r0 + b; r < r0 + e; ++r) lse[r] = row_logsumexp(x + r * n, n);
  });
}

}  // namespace sgrt::cpu
