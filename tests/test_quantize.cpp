// Scaled quantization (NUMERICS.md §2, §4): exact power-of-two exponents, the
// keep-previous rule, quantize-dequantize within half an ulp after scaling,
// saturation counts, unbiased and reproducible stochastic rounding, MS-AMP's vectors.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/parallel.h"
#include "cpu/quantize.h"
#include "formats/formats.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

const fmt::Spec& spec(DType t) {
  return t == DType::e4m3 ? fmt::kE4M3 : t == DType::e5m2 ? fmt::kE5M2 : fmt::kE2M1;
}

uint32_t code_at(const std::vector<uint8_t>& q, DType t, int64_t i) {
  return t == DType::e2m1 ? (q[i >> 1] >> (4 * (i & 1))) & 0xF : q[i];
}

// One unit in the last place of format S at value v (v within range).
double ulp(const fmt::Spec& S, double v) {
  const int emin = 1 - S.bias;
  const int k = std::max(static_cast<int>(std::floor(std::log2(std::fabs(v)))), emin);
  return std::ldexp(1.0, k - S.man_bits);
}

// Rows with magnitudes spread over 2^-10 .. 2^10 so every scale differs.
std::vector<float> data(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] = u(rng) * std::ldexp(1.0f, static_cast<int>((r * 7 + c * 3) % 21) - 10);
  return x;
}

// |x * mult - decode(q)| <= ulp / 2 for every element; returns the violations.
template <class Mult>
int64_t check_half_ulp(const std::vector<float>& x, const std::vector<uint8_t>& q, DType t, int64_t cols, Mult mult) {
  int64_t bad = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    const double v = double(x[i]) * mult(i / cols, i % cols);
    const double d = fmt::decode(spec(t), code_at(q, t, i));
    bad += !(std::fabs(v - d) <= ulp(spec(t), v == 0 ? 1e-30 : v) / 2);
  }
  return bad;
}

}  // namespace

TEST_CASE("scale exponent: floor(log2(fmt_max / amax)) - margin, exactly") {
  bool kept = false;
  CHECK(scale_exponent(448.0f, 448.0f, 0, 5, &kept) == 0);
  CHECK_FALSE(kept);
  CHECK(scale_exponent(std::nextafter(448.0f, 1e9f), 448.0f, 0, 5, &kept) == -1);
  CHECK(scale_exponent(224.0f, 448.0f, 0, 5, &kept) == 1);
  CHECK(scale_exponent(1.0f, 448.0f, 0, 5, &kept) == 8);
  CHECK(scale_exponent(1.0f, 448.0f, 2, 5, &kept) == 6);
  CHECK(scale_exponent(0.4001f, 6.0f, 0, 5, &kept) == 3);  // MS-AMP: sf = 8
  CHECK(scale_exponent(1e-38f, 448.0f, 0, 5, &kept) == 127);  // clamped
  for (float bad : {0.0f, INFINITY, NAN}) {
    CHECK(scale_exponent(bad, 448.0f, 0, 5, &kept) == 5);
    CHECK(kept);
  }
}

TEST_CASE("scale exponent: every binade of amax, subnormals included, against ilogb of the FP64 quotient") {
  // The quotient of two floats in FP64 is a power of two exactly when it is one, and
  // otherwise at least 2^-24 away from it, so ilogb gives floor(log2) exactly.
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7F7FFFFFu);
  bool kept = false;
  for (float fmax : {448.0f, 57344.0f, 6.0f, 65504.0f, 3.3895314e38f})
    for (int margin : {0, 2}) {
      int64_t bad = 0;
      for (int i = 0; i < 20000; ++i) {
        float amax = std::bit_cast<float>(i < 64 ? static_cast<uint32_t>(i + 1) << (i % 23) : bits(rng));
        if (i >= 64 && i < 192) amax = std::ldexp(fmax, -(i % 64) - 1);  // fmax's own mantissa
        if (i >= 128 && i < 192) amax = std::nextafter(amax, i % 2 ? 0.0f : 1e30f);
        const int want = std::clamp(std::ilogb(static_cast<double>(fmax) / amax) - margin, -126, 127);
        bad += scale_exponent(amax, fmax, margin, 0, &kept) != want;
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("quantize-dequantize is within half an ulp after scaling, for every granularity") {
  const int64_t rows = 37, cols = 71;  // odd: E2M1 bytes straddle rows
  const std::vector<float> x = data(rows, cols, 1);
  for (DType t : {DType::e4m3, DType::e5m2, DType::e2m1}) {
    CAPTURE(int(t));
    QuantParams p;
    p.fmt = t;
    std::vector<uint8_t> q(dtype_bytes(t, rows * cols));
    for (QuantAxis axis : {QuantAxis::tensor, QuantAxis::row, QuantAxis::col}) {
      CAPTURE(int(axis));
      std::vector<int32_t> e(axis == QuantAxis::row ? rows : axis == QuantAxis::col ? cols : 1, 99);
      const QuantStats s = quantize(x.data(), rows, cols, axis, p, true, q.data(), e.data());
      REQUIRE(s.error == nullptr);
      CHECK(s.saturated == 0);
      CHECK(s.kept_scales == 0);
      CHECK(std::isfinite(s.amax));
      CHECK(check_half_ulp(x, q, t, cols, [&](int64_t r, int64_t c) {
              const int32_t ex = axis == QuantAxis::row ? e[r] : axis == QuantAxis::col ? e[c] : e[0];
              return std::ldexp(1.0, ex);
            }) == 0);
    }
    // MX: E8M0 block scales of 32 along rows.
    std::vector<uint8_t> sc(rows * ((cols + 31) / 32));
    const QuantStats s = quantize_mx(x.data(), rows, cols, p, q.data(), sc.data());
    CHECK(s.saturated == 0);
    CHECK(check_half_ulp(x, q, t, cols, [&](int64_t r, int64_t c) {
            return 1.0 / fmt::e8m0_decode(sc[r * ((cols + 31) / 32) + c / 32]);
          }) == 0);
  }
  // NVFP4: E4M3 block scales of 16 times an FP32 tensor scale.
  std::vector<uint8_t> q(dtype_bytes(DType::e2m1, rows * cols)), sc(rows * ((cols + 15) / 16));
  float ts = 0;
  const QuantStats s = quantize_nvfp4(x.data(), rows, cols, QuantParams{}, q.data(), sc.data(), &ts);
  CHECK(ts == doctest::Approx(s.amax / 1536.0));
  // Block scales are rounded to nearest, so a block's largest element may clamp
  // at ±6; which scale each block gets is checked in test_quant_reference.
  CHECK(check_half_ulp(x, q, DType::e2m1, cols, [&](int64_t r, int64_t c) {
          return 1.0f / (fmt::e4m3_decode(sc[r * ((cols + 15) / 16) + c / 16]) * ts);
        }) == 0);
}

TEST_CASE("amax 0 / inf / NaN keeps the previous scale and counts it") {
  QuantParams p;
  std::vector<float> x(4 * 8, 0.0f);
  std::vector<uint8_t> q(x.size());
  int32_t e = 3;
  QuantStats s = quantize(x.data(), 4, 8, QuantAxis::tensor, p, true, q.data(), &e);
  CHECK(e == 3);
  CHECK(s.kept_scales == 1);
  x[5] = NAN;
  s = quantize(x.data(), 4, 8, QuantAxis::tensor, p, true, q.data(), &e);
  CHECK(e == 3);
  CHECK(std::isnan(s.amax));
  CHECK(q[5] == 0x7F);
  // Per row: only the bad rows keep theirs.
  x[5] = 0;
  x[8] = 2.0f;   // row 1: amax 2
  x[16] = INFINITY;  // row 2: inf
  std::vector<int32_t> er = {-1, -1, -1, -1};
  s = quantize(x.data(), 4, 8, QuantAxis::row, p, true, q.data(), er.data());
  CHECK(er == std::vector<int32_t>{-1, 7, -1, -1});
  CHECK(s.kept_scales == 3);
  CHECK(s.saturated == 1);  // the inf
  CHECK(q[16] == 0x7E);     // satfinite
}

TEST_CASE("delayed scaling uses the given exponent, measures amax, counts saturation") {
  QuantParams p;
  std::vector<float> x = {1.0f, -0.5f, 0.25f, 0.3f};
  std::vector<uint8_t> q(4);
  int32_t e = 9;  // 1.0 * 512 > 448: one saturates
  const QuantStats s = quantize(x.data(), 1, 4, QuantAxis::tensor, p, false, q.data(), &e);
  CHECK(e == 9);
  CHECK(s.amax == 1.0f);
  CHECK(s.saturated == 1);
  CHECK(q[0] == 0x7E);
  CHECK(fmt::e4m3_decode(q[1]) == -256.0f);

  // A static scale (no history to feed) skips the amax: the same codes, no amax.
  p.measure_amax = false;
  std::vector<uint8_t> q2(4);
  const QuantStats st = quantize(x.data(), 1, 4, QuantAxis::tensor, p, false, q2.data(), &e);
  CHECK(st.amax == 0.0f);
  CHECK(st.saturated == 1);
  CHECK(q2 == q);
}

TEST_CASE("MS-AMP's FP4 reference vectors (NUMERICS.md §4) under RNE") {
  auto bf16 = [](float v) { return fmt::bf16_decode(fmt::bf16_encode(v)); };
  QuantParams p;
  p.fmt = DType::e2m1;
  const float in[] = {0.001f, 0.048f, 0.0997f, 0.1503f, 0.2002f, 0.2497f, 0.2974f, 0.30699f, 0.4001f};
  const float want[] = {0, 0.0625f, 0.125f, 0.125f, 0.1875f, 0.25f, 0.25f, 0.25f, 0.375f};
  std::vector<float> x;
  for (float v : in) x.push_back(bf16(v));
  std::vector<uint8_t> q(5);
  int32_t e = 0;
  quantize(x.data(), 1, 9, QuantAxis::tensor, p, true, q.data(), &e);
  CHECK(e == 3);
  for (int i = 0; i < 9; ++i) CHECK(fmt::e2m1_decode(code_at(q, DType::e2m1, i)) / 8 == want[i]);

  const float m[12] = {-0.01f, 0.48f, -9.67f, 1.623f, -2.222f, 24.67f, -2.874f, 3.699f, -34.57f, 0.85f, -1.343f, 18.88f};
  const float mw[12] = {0, 0.5f, -8, 1.5f, -2, 24, -3, 4, -32, 0.75f, -1.5f, 16};
  std::vector<float> xm, xt(12);
  for (float v : m) xm.push_back(bf16(v));
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) xt[c * 4 + r] = xm[r * 3 + c];
  std::vector<int32_t> ec(3), er(3);
  std::vector<uint8_t> qc(6), qr(6);
  quantize(xm.data(), 4, 3, QuantAxis::col, p, true, qc.data(), ec.data());
  quantize(xt.data(), 3, 4, QuantAxis::row, p, true, qr.data(), er.data());  // transpose, per row
  CHECK(ec == er);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) {
      CHECK(std::ldexp(fmt::e2m1_decode(code_at(qc, DType::e2m1, r * 3 + c)), -ec[c]) == mw[r * 3 + c]);
      CHECK(std::ldexp(fmt::e2m1_decode(code_at(qr, DType::e2m1, c * 4 + r)), -er[c]) == mw[r * 3 + c]);
    }
}

TEST_CASE("stochastic quantization is unbiased, reproducible and thread-count independent") {
  const int64_t n = 1 << 20;
  std::vector<float> x(n, 0.3f);  // E2M1 after scaling by 2^4: 4.8, between 4 and 6
  std::vector<uint8_t> q(n / 2), q2(n / 2);
  QuantParams p;
  p.fmt = DType::e2m1;
  p.stochastic = true;
  p.seed = 11;
  auto mean = [&](const std::vector<uint8_t>& qq, int32_t e) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::ldexp(fmt::e2m1_decode(code_at(qq, DType::e2m1, i)), -e);
    return s / n;
  };
  int32_t e = 0;
  set_num_threads(1);
  quantize(x.data(), 1024, 1024, QuantAxis::tensor, p, true, q.data(), &e);
  set_num_threads(2);
  quantize(x.data(), 1024, 1024, QuantAxis::tensor, p, true, q2.data(), &e);
  set_num_threads(0);
  CHECK(e == 4);
  CHECK(q == q2);
  // Rounds up with p = 0.4 between 4/16 and 6/16: standard error 0.125 * sqrt(.24 / n).
  const double bound = 5 * 0.125 * std::sqrt(0.24 / n);
  const float x0 = 0.3f;
  CHECK(std::fabs(mean(q, e) - x0) < bound);
  p.stochastic = false;  // nearest-even rounds every element to 4/16: biased
  quantize(x.data(), 1024, 1024, QuantAxis::tensor, p, true, q.data(), &e);
  CHECK(std::fabs(mean(q, e) - x0) > bound);
  p.stochastic = true;
  p.seed = 12;
  quantize(x.data(), 1024, 1024, QuantAxis::tensor, p, true, q2.data(), &e);
  CHECK(q != q2);
}

TEST_CASE("bad formats are rejected") {
  float x = 1;
  uint8_t q = 0, sc = 0;
  int32_t e = 0;
  QuantParams p;
  p.fmt = DType::i32;
  CHECK(quantize(&x, 1, 1, QuantAxis::tensor, p, true, &q, &e).error != nullptr);
  p.fmt = DType::f16;
  CHECK(quantize_mx(&x, 1, 1, p, &q, &sc).error != nullptr);
}
