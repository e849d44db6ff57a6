// Number formats against the CUDA toolkit's host conversions (the independent
// oracle of NUMERICS.md §1): every code decodes identically, and a dense sweep of
// floats (ties, subnormals, ±0, ±inf, NaN, past the maximum) encodes identically.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "formats/formats.h"

using namespace sgrt::fmt;

namespace {

// Every float whose low 11 mantissa bits are zero (2^21 values: all exponents, both
// signs, ±0, ±inf, NaNs, every FP16 value and every midpoint of the 8-bit formats),
// plus a stride through all other bit patterns and neighbours of every midpoint.
std::vector<float> sweep() {
  std::vector<float> v;
  for (uint32_t hi = 0; hi < (1u << 21); ++hi) v.push_back(bits_float(hi << 11));
  for (uint64_t u = 1; u < (1ull << 32); u += 40009) v.push_back(bits_float(static_cast<uint32_t>(u)));
  const size_t n = v.size();
  for (size_t i = 0; i < n; i += 7) {
    const uint32_t u = float_bits(v[i]);
    v.push_back(bits_float(u + 1));
    v.push_back(bits_float(u - 1));
  }
  return v;
}
const std::vector<float>& inputs() {
  static const std::vector<float> v = sweep();
  return v;
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b);
}

}  // namespace

#ifdef SGRT_HAVE_CUDA_ORACLE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

namespace {
float half_raw_to_float(__half_raw h) { return __half2float(__half(h)); }
float bf16_raw_to_float(__nv_bfloat16_raw b) { return __bfloat162float(__nv_bfloat16(b)); }
}  // namespace

TEST_CASE("every FP8 / FP4 code decodes as CUDA decodes it") {
  for (uint32_t c = 0; c < 256; ++c) {
    CAPTURE(c);
    CHECK(same_float(e4m3_decode(c), half_raw_to_float(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))));
    CHECK(same_float(e5m2_decode(c), half_raw_to_float(__nv_cvt_fp8_to_halfraw(c, __NV_E5M2))));
    CHECK(same_float(e8m0_decode(c), bf16_raw_to_float(__nv_cvt_e8m0_to_bf16raw(c))));
  }
  for (uint32_t c = 0; c < 16; ++c) {
    CAPTURE(c);
    CHECK(same_float(e2m1_decode(c), half_raw_to_float(__nv_cvt_fp4_to_halfraw(c, __NV_E2M1))));
  }
}

TEST_CASE("every FP16 / BF16 code decodes as CUDA decodes it") {
  int64_t bad = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    __half_raw h; h.x = static_cast<unsigned short>(c);
    __nv_bfloat16_raw b; b.x = static_cast<unsigned short>(c);
    bad += !same_float(f16_decode(c), half_raw_to_float(h));
    bad += !same_float(bf16_decode(c), bf16_raw_to_float(b));
  }
  CHECK(bad == 0);
}

TEST_CASE("a dense float sweep encodes as CUDA encodes it") {
  int64_t bad[7] = {};
  for (float x : inputs()) {
    bad[0] += e4m3_encode(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    bad[1] += e5m2_encode(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    bad[2] += e2m1_encode(x) != __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    bad[3] += f16_encode(x) != __half_raw(__float2half_rn(x)).x;
    bad[4] += bf16_encode(x) != __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
    bad[5] += e8m0_encode(x, E8M0Round::down) != __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero);
    bad[6] += e8m0_encode(x, E8M0Round::up) != __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf);
  }
  INFO("inputs: " << inputs().size());
  for (int f = 0; f < 7; ++f) {
    CAPTURE(f);
    CHECK(bad[f] == 0);
  }
}
#else
TEST_CASE("CUDA oracle present") {
  FAIL("cuda_fp8.h not found: the format tests need the CUDA toolkit headers (SGRT_CUDA_INCLUDE)");
}
#endif

TEST_CASE("named values from NUMERICS.md §1") {
  CHECK(e4m3_decode(0x7E) == 448.0f);
  CHECK(e4m3_decode(0x08) == std::ldexp(1.0f, -6));
  CHECK(e4m3_decode(0x01) == std::ldexp(1.0f, -9));
  CHECK(std::isnan(e4m3_decode(0x7F)));
  CHECK(e5m2_decode(0x7B) == 57344.0f);
  CHECK(e5m2_decode(0x01) == std::ldexp(1.0f, -16));
  CHECK(std::isinf(e5m2_decode(0x7C)));
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 8; ++c) {
    CHECK(e2m1_decode(c) == e2m1[c]);
    CHECK(e2m1_decode(c | 8) == -e2m1[c]);
  }
  CHECK(e8m0_decode(254) == std::ldexp(1.0f, 127));
  CHECK(e8m0_decode(0) == std::ldexp(1.0f, -127));
  CHECK(e4m3_encode(1e9f) == 0x7E);  // satfinite
  CHECK(e4m3_encode(-INFINITY) == 0xFE);
  CHECK(e2m1_encode(0.25f) == 0x0);  // RNE tie to even (MS-AMP would give 0.5)
  CHECK(e2m1_encode(5.0f) == 0x6);   // 5 -> 4 under RNE
}

TEST_CASE("every code round-trips through decode and encode") {
  for (uint32_t c = 0; c < 256; ++c) {
    if (!std::isnan(e4m3_decode(c))) CHECK(e4m3_encode(e4m3_decode(c)) == c);
    if (std::isfinite(e5m2_decode(c))) CHECK(e5m2_encode(e5m2_decode(c)) == c);
    if (c < 255) CHECK(e8m0_encode(e8m0_decode(c)) == c);
  }
  for (uint32_t c = 0; c < 16; ++c) CHECK(e2m1_encode(e2m1_decode(c)) == c);
}

namespace {
// Mean of n stochastically rounded copies of x, with noise optionally forced to
// have `bias_bit` set (a deliberately biased rounding).
double sr_mean(const Spec& S, float x, int n, uint32_t bias_bit) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += decode(S, encode(S, x, true, sr_random(1234, i) | bias_bit));
  return sum / n;
}
}  // namespace

TEST_CASE("stochastic rounding is unbiased, and the test would catch a biased one") {
  struct Case { const Spec* s; float x; float lo, hi; uint32_t bias_bit; };
  // Values between grid points lo < x < hi; bias_bit is 1/16 of an ulp of noise
  // (expected noise +1/32 ulp), a bias of about 30 standard errors at n = 2^20.
  const Case cases[] = {
      {&kE4M3, 1.3f, 1.25f, 1.375f, 1u << 16},
      {&kE4M3, -0.004f, -0.00390625f, -0.005859375f, 1u << 16},  // subnormal
      {&kE5M2, 3.3f, 3.0f, 3.5f, 1u << 17},
      {&kE2M1, 2.3f, 2.0f, 3.0f, 1u << 18},
      {&kE2M1, 0.1f, 0.0f, 0.5f, 1u << 20},
      {&kBF16, 1.00123f, 1.0f, 1.0078125f, 1u << 12},
  };
  const int n = 1 << 20;
  for (const Case& c : cases) {
    CAPTURE(c.x);
    const double ulp = std::fabs(c.hi - c.lo), p = (c.x - c.lo) / (c.hi - c.lo);
    const double stderr_ = ulp * std::sqrt(p * (1 - p) / n);
    const double bound = 5 * stderr_;
    CHECK(std::fabs(sr_mean(*c.s, c.x, n, 0) - c.x) < bound);
    CHECK(std::fabs(sr_mean(*c.s, c.x, n, c.bias_bit) - c.x) > bound);
    // Only the two neighbours ever come out.
    for (int i = 0; i < 1000; ++i) {
      const float y = decode(*c.s, encode(*c.s, c.x, true, sr_random(7, i)));
      CHECK((y == c.lo || y == c.hi));
    }
  }
  // Exact values are never perturbed, and saturation still applies.
  for (int i = 0; i < 1000; ++i) {
    CHECK(e4m3_encode_sr(1.25f, sr_random(3, i)) == e4m3_encode(1.25f));
    CHECK(e4m3_encode_sr(1e6f, sr_random(3, i)) == 0x7E);
  }
}

TEST_CASE("sr_random is reproducible and spreads over the word") {
  CHECK(sr_random(1, 5) == sr_random(1, 5));
  CHECK(sr_random(1, 5) != sr_random(2, 5));
  CHECK(sr_random(1, 5) != sr_random(1, 6));
  CHECK(sr_random(1, 5) != sr_random(1, 5 + (1ull << 32)));
  int bits[32] = {};
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i)
    for (int b = 0; b < 32; ++b) bits[b] += (sr_random(9, i) >> b) & 1;
  for (int b = 0; b < 32; ++b) CHECK(std::abs(bits[b] - n / 2) < 6 * 128);  // 6 sigma
}
