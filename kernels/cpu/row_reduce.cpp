// The row reductions of row_reduce.h, one compiled copy for every kernel.
#include "cpu/row_reduce.h"

#include <cmath>
#include <cstring>

#include "cpu/fast_math.h"

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

float row_sum(const float* x, int64_t n) {
  return lane_sum(n, [x](int64_t i) { return x[i]; });
}

float row_dot(const float* a, const float* b, int64_t n) {
  return lane_sum(n, [a, b](int64_t i) { return a[i] * b[i]; });
}

float row_max(const float* x, int64_t n) {
  int32_t m = order_key(-INFINITY);
  for (int64_t i = 0; i < n; ++i) {
    int32_t k = order_key(x[i]);
    m = k > m ? k : m;
  }
  return from_order_key(m);
}

float row_logsumexp(const float* x, int64_t n) {
  float m = row_max(x, n);
  return m + std::log(lane_sum(n, [x, m](int64_t i) { return fast_exp(x[i] - m); }));
}

}  // namespace sgrt::cpu
