// Branch-free exp and tanh that compilers vectorize (libm's expf and tanhf are
// scalar calls and dominated a GPT step through GELU). exp: Cephes' expf
// polynomial after range reduction by ln 2, relative error < 2e-7 over the
// range above -87.3, and exactly 0 below -87.7 (there the power of two it scales
// by, 2^-127, is built as 0: softmax's far and masked entries, exp(-inf) included,
// get zeros, not FLT_MIN); tanh(x) = 1 - 2 / (exp(2x) + 1), absolute error < 1e-7.
// log: Cephes' logf polynomial on the mantissa in [sqrt(1/2), sqrt(2)), absolute
// error < 1e-7 near 1 and relative error < 2e-7 elsewhere, for normal x > 0 only.
#pragma once
#include <cstdint>
#include <cstring>

namespace sgrt::cpu {
// Internal linkage in every file that includes this: cpu/elementwise_avx512.cpp
// compiles these with AVX-512 (see elementwise_kernels.h), and a shared inline
// copy could otherwise reach the baseline files through the linker.
namespace {

// 2^e from its bits, for e in [-127, 127]; -127 gives exactly 0.
inline float pow2i(int32_t e) {
  const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float fast_exp(float x) {
  x = x > -88.0f ? x : -88.0f;  // two plain selects: compilers turn them into max/min
  x = x < 88.0f ? x : 88.0f;
  // n = round(x / ln 2) via the float rounding of a 1.5 * 2^23 offset.
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * pow2i(static_cast<int32_t>(n));
}

inline float fast_log(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 127);
  bits = (bits & 0x007FFFFFu) | 0x3F800000u;  // the mantissa, in [1, 2)
  float m;
  std::memcpy(&m, &bits, sizeof m);
  const bool high = m > 1.41421356f;  // then halve it: [sqrt(1/2), sqrt(2))
  m = high ? 0.5f * m : m;
  e = high ? e + 1.0f : e;
  const float f = m - 1.0f, z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const float y = f * z * p + e * -2.12194440e-4f - 0.5f * z;  // ln 2 split in two parts
  return f + y + e * 0.693359375f;
}

inline float fast_tanh(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

}  // namespace
}  // namespace sgrt::cpu
