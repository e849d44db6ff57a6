// The quantizer's vectorized loops (cpu/quantize_kernels.h) against formats.h's
// scalar encode, the oracle, on every ISA path this CPU has: dense sweeps of float
// bit patterns (every sign/exponent/top-mantissa pattern with low bits at each
// format's ties and their neighbours: NaN, inf, subnormals, saturation), nearest
// and stochastic rounding, per-element multipliers, odd E2M1 starts and tails,
// and the counts; decode on every code; then the public quantize entry points
// against a scalar model. On AArch64 the paths are the portable kernels and
// quantize_neon.cpp's (scripts/test_aarch64.sh runs this suite under qemu).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/quantize.h"
#include "cpu/quantize_kernels.h"
#include "formats/formats.h"
#include "formats/fp8_tile.h"
#include "formats/hadamard.h"
#include "formats/nvfp4.h"
#include "kernel_checks.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

struct Format {
  DType t;
  fmt::Spec spec;
  int bits;
};
const Format kFormats[] = {{DType::e4m3, fmt::kE4M3, 8}, {DType::e5m2, fmt::kE5M2, 8}, {DType::e2m1, fmt::kE2M1, 4},
                           {DType::f16, fmt::kF16, 16}, {DType::bf16, fmt::kBF16, 16}};

uint32_t code_at(const std::vector<uint8_t>& q, int bits, int64_t i) {
  if (bits == 4) return (q[i >> 1] >> (4 * (i & 1))) & 0xF;
  if (bits == 8) return q[i];
  uint16_t h;
  std::memcpy(&h, q.data() + 2 * i, 2);
  return h;
}

// Every pattern of the top 16 bits with low halves at the round-off points of
// every format (f16's bit 12, bf16's bit 15, the FP8/FP4 ties sit in the top half).
std::vector<float> sweep() {
  const uint32_t lows[] = {0, 1, 0x0FFF, 0x1000, 0x1001, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x5A5A};
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) x.push_back(std::bit_cast<float>(hi << 16 | lo));
  return x;
}

struct Expect {
  std::vector<uint32_t> codes;
  int64_t saturated = 0, underflow = 0;
};

// mult_block: EncodeArgs's (0: mult[0] for all, 1: per element, B: per B elements).
Expect oracle(const Format& f, const std::vector<float>& x, const std::vector<float>& mult, int64_t mult_block,
              bool sr, uint32_t seed, int64_t i0) {
  Expect e;
  const float fmax = format_max(f.t);
  const uint32_t mag = (1u << (f.bits - 1)) - 1u;
  for (size_t j = 0; j < x.size(); ++j) {
    const float v = x[j] * mult[mult_block ? j / mult_block : 0];
    const uint32_t c = fmt::encode(f.spec, v, sr, sr ? fmt::sr_random(seed, i0 + j) : 0);
    e.codes.push_back(c);
    e.saturated += std::fabs(v) > fmax;
    e.underflow += x[j] != 0.f && (c & mag) == 0;
  }
  return e;
}

void check_encode(const quant_impl::Kernels& k, const Format& f, const std::vector<float>& x,
                  const std::vector<float>& mult, int64_t mult_block, bool sr, int64_t i0) {
  const uint32_t seed = 1234;
  const Expect e = oracle(f, x, mult, mult_block, sr, seed, i0);
  // q holds the whole tensor [0, i0 + n): the span's bytes must not touch the rest.
  const int64_t total = i0 + static_cast<int64_t>(x.size());
  // A large i0 (stochastic noise past index 2^32) stores 64 codes into q: the
  // tensor's start lies `off` codes before q (an even count, so nibbles keep their side).
  const int64_t off = i0 > 64 ? i0 - 64 : 0;
  std::vector<uint8_t> q((total - off) * f.bits / 8 + 2, 0xA5);
  const quant_impl::EncodeArgs a{x.data(), i0, static_cast<int64_t>(x.size()), mult.data(), mult_block,
                                 f.t, sr, seed, q.data() - off * f.bits / 8};
  const quant_impl::EncodeCounts c = k.encode(a);
  int64_t bad = 0;
  for (size_t j = 0; j < x.size() && bad < 5; ++j) {
    const uint32_t got = code_at(q, f.bits, i0 - off + j);
    if (got != e.codes[j]) {
      ++bad;
      CAPTURE(j);
      CAPTURE(std::bit_cast<uint32_t>(x[j]));
      CHECK(got == e.codes[j]);
    }
  }
  CHECK(bad == 0);
  CHECK(c.saturated == e.saturated);
  CHECK(c.underflow == e.underflow);
  if (f.bits == 4 && ((i0 - off) & 1)) CHECK((q[(i0 - off) >> 1] & 0xF) == 0x5);  // the neighbour's nibble
}

}  // namespace

TEST_CASE("vectorized encode is the scalar encode on every float pattern, every ISA") {
  const std::vector<float> x = sweep();
  const std::vector<float> one = {1.0f};
  for (Isa isa : test::isa_paths()) {
    const quant_impl::Kernels& k = quant_impl::kernels_for(isa);
    for (const Format& f : kFormats)
      for (bool sr : {false, true}) {
        CAPTURE(std::string(isa_name(isa)));
        CAPTURE(dtype_name(f.t));
        CAPTURE(sr);
        check_encode(k, f, x, one, 0, sr, 0);
      }
  }
}

TEST_CASE("vectorized encode: multipliers (one, per element, per 16 or 32), odd starts, tails, indices past 2^32") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3, 3);
  for (Isa isa : test::isa_paths()) {
    const quant_impl::Kernels& k = quant_impl::kernels_for(isa);
    for (const Format& f : kFormats)
      for (int n : {1, 2, 3, 15, 16, 17, 31, 33, 100})
        for (int64_t i0 : {int64_t{0}, int64_t{1}, int64_t{7}, (int64_t{1} << 32) - 6})
          for (int64_t mult_block : {0, 1, 16, 32})
            for (bool sr : {false, true}) {
              std::vector<float> x(n), mult(n);
              for (int j = 0; j < n; ++j) {
                x[j] = std::ldexp(u(rng), static_cast<int>(rng() % 40) - 20);
                mult[j] = std::ldexp(1.0f, static_cast<int>(rng() % 30) - 15);
              }
              if (n > 2) x[1] = 0.f, x[2] = -std::numeric_limits<float>::infinity();
              CAPTURE(std::string(isa_name(isa)));
              CAPTURE(dtype_name(f.t));
              CAPTURE(n);
              CAPTURE(i0);
              CAPTURE(mult_block);
              CAPTURE(sr);
              check_encode(k, f, x, mult, mult_block, sr, i0);
            }
  }
}

TEST_CASE("vectorized decode is the scalar decode on every code, every ISA") {
  for (Isa isa : test::isa_paths()) {
    const quant_impl::Kernels& k = quant_impl::kernels_for(isa);
    for (const Format& f : kFormats) {
      if (f.bits == 4 || f.t == DType::bf16) continue;
      const int64_t n = int64_t{1} << f.bits;
      std::vector<uint8_t> q(n * f.bits / 8);
      for (int64_t c = 0; c < n; ++c) {
        if (f.bits == 8) q[c] = static_cast<uint8_t>(c);
        else std::memcpy(q.data() + 2 * c, &c, 2);
      }
      for (int64_t i0 : {0, 3}) {
        const float mult = 0.25f;
        std::vector<float> out(n - i0);
        k.decode({q.data(), f.t, i0, n - i0, mult, out.data()});
        int64_t bad = 0;
        for (int64_t c = i0; c < n; ++c)
          bad += std::bit_cast<uint32_t>(out[c - i0]) != std::bit_cast<uint32_t>(fmt::decode(f.spec, c) * mult);
        CAPTURE(std::string(isa_name(isa)));
        CAPTURE(dtype_name(f.t));
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("vectorized amax: max |x| by value, NaN-sticky, every length") {
  const std::vector<float> x = sweep();
  for (Isa isa : test::isa_paths()) {
    const quant_impl::Kernels& k = quant_impl::kernels_for(isa);
    CAPTURE(std::string(isa_name(isa)));
    for (int64_t n : {0, 1, 5, 16, 33, 1000}) {
      std::vector<float> v(x.begin() + 3000, x.begin() + 3000 + n);  // finite, positive and negative
      float ref = 0;
      for (float a : v) ref = std::max(ref, std::fabs(a));
      CHECK(std::bit_cast<uint32_t>(k.amax(v.data(), n)) == std::bit_cast<uint32_t>(ref));
    }
    std::vector<float> v(37, -2.0f);
    v[36] = -std::numeric_limits<float>::infinity();
    CHECK(k.amax(v.data(), 37) == std::numeric_limits<float>::infinity());
    v[3] = std::nanf("");
    CHECK(std::isnan(k.amax(v.data(), 37)));
    // Per column, over a [3, 21] tensor.
    std::vector<float> m(63);
    for (int i = 0; i < 63; ++i) m[i] = (i % 2 ? -1.f : 1.f) * static_cast<float>((i * 37) % 61);
    std::vector<uint32_t> acc(21, 0);
    k.amax_cols(m.data(), 3, 21, acc.data());
    for (int c = 0; c < 21; ++c) {
      const float ref = std::max({std::fabs(m[c]), std::fabs(m[21 + c]), std::fabs(m[42 + c])});
      CHECK(std::bit_cast<float>(acc[c]) == ref);
    }
  }
}

TEST_CASE("block_amax: each block's amax, NaN and infinity included, every block count, every ISA") {
  const std::vector<float> x = sweep();  // every pattern: NaNs, infinities, subnormals, zeros
  for (Isa isa : test::isa_paths()) {
    const quant_impl::Kernels& k = quant_impl::kernels_for(isa);
    CAPTURE(std::string(isa_name(isa)));
    for (int64_t block : {16, 32, 128})
      for (int64_t nb : {1, 3, 16, 17, 40}) {
        CAPTURE(block);
        CAPTURE(nb);
        // Stretches of the sweep with finite values, then NaNs (the top patterns),
        // then infinities: several blocks of each kind.
        for (int64_t start : {int64_t{3000}, int64_t{0x7FC0} * 11 - block, int64_t{0x7F80} * 11 - block / 2}) {
          std::vector<float> out(nb, -1.0f);
          k.block_amax(x.data() + start, nb, block, out.data());
          int64_t bad = 0;
          for (int64_t b = 0; b < nb; ++b) {
            // The oracle: max over the bit patterns of |x| (NaNs above +inf), one element at a time.
            uint32_t ref = 0;
            for (int64_t i = 0; i < block; ++i) ref = std::max(ref, std::bit_cast<uint32_t>(x[start + b * block + i]) & 0x7FFFFFFFu);
            bad += std::bit_cast<uint32_t>(out[b]) != ref;
          }
          CHECK(bad == 0);
        }
      }
  }
}

TEST_CASE("mx_scales: scale_exponent's exponent per block, OCP's NaN scale, the kept count, every ISA") {
  std::vector<float> amax = {0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             1e-45f, 1e-40f, 0x1p-127f, std::bit_cast<float>(0x007FFFFFu), 0x1p-126f, 3e38f,
                             448.0f, std::nextafter(448.0f, 0.0f), std::nextafter(448.0f, 1e9f), 6.0f, 57344.0f};
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);  // every positive finite float
  while (amax.size() < 203) amax.push_back(std::bit_cast<float>(bits(rng)));  // ragged: 12 groups of 16 and 11
  for (float fmax : {448.0f, 57344.0f, 6.0f})
    for (int margin : {0, 1, 3})
      for (Isa isa : test::isa_paths()) {
        CAPTURE(std::string(isa_name(isa)));
        CAPTURE(fmax);
        CAPTURE(margin);
        const int64_t nb = static_cast<int64_t>(amax.size());
        std::vector<uint8_t> scales(nb, 0xAB);
        std::vector<float> mult(nb, -1.0f);
        const int64_t kept = quant_impl::kernels_for(isa).mx_scales(amax.data(), nb, fmax, margin, scales.data(), mult.data());
        int64_t want_kept = 0, bad = 0;
        for (int64_t b = 0; b < nb; ++b) {
          bool k;
          const int32_t e = scale_exponent(amax[b], fmax, margin, 0, &k);
          want_kept += k;
          const uint8_t want = k && amax[b] != 0 ? 0xFF : static_cast<uint8_t>(127 - e);
          bad += scales[b] != want || mult[b] != std::ldexp(1.0f, e);
        }
        CHECK(bad == 0);
        CHECK(kept == want_kept);
      }
}

TEST_CASE("hadamard16_blocks is formats/hadamard.h's hadamard16 on every block, to the bit, on every ISA") {
  const int64_t nb = 37;
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(nb * 16);
  for (int64_t i = 0; i < nb * 16; ++i) x[i] = std::ldexp(nd(rng), static_cast<int>(i % 41) - 20);
  x[7] = -0.0f, x[40] = std::numeric_limits<float>::infinity(), x[41] = 3e38f, x[42] = 3e38f, x[99] = 1e-44f;
  std::vector<float> want = x;
  for (int64_t b = 0; b < nb; ++b) fmt::hadamard16(want.data() + b * 16);
  for (Isa isa : test::isa_paths()) {
    CAPTURE(std::string(isa_name(isa)));
    std::vector<float> got(x.size(), -1.0f);
    quant_impl::kernels_for(isa).hadamard16_blocks(x.data(), got.data(), nb);
    int64_t bad = 0;
    for (int64_t i = 0; i < nb * 16; ++i) bad += std::memcmp(&got[i], &want[i], 4) != 0 && !(std::isnan(got[i]) && std::isnan(want[i]));
    CHECK(bad == 0);
  }
}

TEST_CASE("nvfp4_blocks: formats/nvfp4.h's four-over-six choice and encode's codes and counts, to the bit, on every ISA") {
  // Seven special blocks first, then thousands from Gaussian, heavy- and
  // light-tailed laws at 29 scales (the codes and counts of every kind of block).
  // Random blocks almost never bring the two candidates' sums within an ulp, so
  // the summation order is checked by a constructed tie (block 6, below).
  const int64_t nb = 6007;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  std::student_t_distribution<float> heavy(2.0f);
  std::uniform_real_distribution<float> uni(-1, 1);
  std::vector<float> x(nb * 16);
  for (int64_t i = 0; i < nb * 16; ++i) {
    const int64_t b = i / 16;
    const float v = b % 3 == 0 ? nd(rng) : b % 3 == 1 ? heavy(rng) : uni(rng);
    x[i] = std::ldexp(v, static_cast<int>(b % 29) - 14);
  }
  std::fill(x.begin() + 16, x.begin() + 32, 0.0f);                         // all zero
  x[2 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();                 // NaN
  x[3 * 16 + 7] = -std::numeric_limits<float>::infinity();                 // Inf
  for (int i = 0; i < 16; ++i) x[4 * 16 + i] = std::ldexp(1.0f + i, -140);  // subnormal only
  for (int i = 0; i < 16; ++i) x[5 * 16 + i] = i % 2 ? 6.0f : -4.0f;        // on both grids
  // A tie only the element order breaks (ts = 1: the scales are 1.5 for "four" and 1
  // for "six", p = 1/4): 1.0 costs four 2^-8, 0.75 costs six 2^-8, 3 + 2^-15 costs
  // both 2^-34, under half an ulp of 2^-8. In element order four's tiny squares come
  // after its 2^-8 and vanish, six's add up first and round its sum one ulp higher,
  // so four wins; summed backwards (or pairwise) six would.
  float* tie = x.data() + 6 * 16;
  std::fill(tie, tie + 16, 3.0f + 0x1p-15f);
  tie[0] = 6.0f, tie[1] = 1.0f, tie[15] = 0.75f;
  {
    const float p = 0.25f;
    auto sse = [&](uint32_t c, bool backwards) {
      const float m = fmt::nvfp4_mult(c, 1.0f), unit = fmt::mul_rn(fmt::e4m3_decode(c), p);
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) {
        const float v = tie[backwards ? 15 - k : k];
        const float d = fmt::add_rn(fmt::mul_rn(v, p), -fmt::mul_rn(fmt::e2m1_decode(fmt::e2m1_encode(fmt::mul_rn(v, m))), unit));
        sum = fmt::add_rn(sum, fmt::mul_rn(d, d));
      }
      return sum;
    };
    const uint32_t four = fmt::e4m3_encode(1.5f), six = fmt::e4m3_encode(1.0f);
    REQUIRE(fmt::nvfp4_block_scale(tie, 16, 6.0f, 1.0f) == four);
    REQUIRE(sse(four, false) < sse(six, false));
    REQUIRE(sse(four, true) > sse(six, true));
  }
  for (float ts : {1.0f, 3.7e-3f, 1e-30f}) {
    std::vector<uint8_t> want(nb), want_q(nb * 8, 0);
    int64_t want_sat = 0, want_under = 0;
    for (int64_t b = 0; b < nb; ++b) {
      float a = 0;
      for (int i = 0; i < 16; ++i) a = std::isnan(a) ? a : (std::isnan(x[b * 16 + i]) ? x[b * 16 + i] : std::max(a, std::fabs(x[b * 16 + i])));
      want[b] = static_cast<uint8_t>(fmt::nvfp4_block_scale(x.data() + b * 16, 16, a, ts));
      const float m = fmt::nvfp4_mult(want[b], ts);
      for (int i = 0; i < 16; ++i) {
        const float v = x[b * 16 + i] * m;
        const uint32_t c = fmt::e2m1_encode(v);
        want_q[b * 8 + i / 2] |= static_cast<uint8_t>(c << (4 * (i % 2)));
        want_sat += std::fabs(v) > 6.0f;
        want_under += x[b * 16 + i] != 0.0f && (c & 7u) == 0;
      }
    }
    for (Isa isa : test::isa_paths()) {
      CAPTURE(std::string(isa_name(isa)));
      CAPTURE(ts);
      for (bool codes : {false, true}) {
        CAPTURE(codes);
        std::vector<uint8_t> got(nb, 0xAB), got_q(nb * 8, 0xCD);
        quant_impl::EncodeCounts counts;
        quant_impl::kernels_for(isa).nvfp4_blocks(x.data(), nb, ts, got.data(), codes ? got_q.data() : nullptr, &counts);
        int64_t bad = 0, bad_q = 0;
        for (int64_t b = 0; b < nb; ++b) bad += got[b] != want[b];
        CHECK(bad == 0);
        if (!codes) {
          CHECK(std::count(got_q.begin(), got_q.end(), 0xCD) == nb * 8);  // untouched
          continue;
        }
        for (int64_t i = 0; i < nb * 8; ++i) bad_q += got_q[i] != want_q[i];
        CHECK(bad_q == 0);
        CHECK(counts.saturated == want_sat);
        CHECK(counts.underflow == want_under);
      }
    }
  }
}

TEST_CASE("quantize, quantize_mx and quantize_nvfp4 agree on every ISA path") {
  // The scalar model of quantize (per row, current scaling) from formats.h alone.
  const int64_t rows = 5, cols = 77;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = std::ldexp(nd(rng), static_cast<int>(i / cols) * 3 - 6);
  x[3] = 0, x[cols + 4] = 1e-30f;
  for (const Format& f : kFormats) {
    QuantParams p;
    p.fmt = f.t;
    std::vector<uint32_t> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      float a = 0;
      for (int64_t c = 0; c < cols; ++c) a = std::max(a, std::fabs(x[r * cols + c]));
      bool kept;
      const float m = fmt::exp2i(scale_exponent(a, format_max(f.t), 0, 0, &kept));
      for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = fmt::encode(f.spec, x[r * cols + c] * m);
    }
    for (Isa isa : test::isa_paths()) {
      set_isa_limit(isa);
      CAPTURE(std::string(isa_name(isa)));
      CAPTURE(dtype_name(f.t));
      std::vector<uint8_t> q(rows * cols * 2);
      std::vector<int32_t> e(rows, 0);
      quantize(x.data(), rows, cols, QuantAxis::row, p, true, q.data(), e.data());
      int64_t bad = 0;
      for (int64_t i = 0; i < rows * cols; ++i) bad += code_at(q, f.bits, i) != want[i];
      CHECK(bad == 0);
    }
  }
  // NVFP4's block scales are formats/nvfp4.h's choice, from the scalar sums.
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    CAPTURE(std::string(isa_name(isa)));
    std::vector<uint8_t> q(rows * cols, 0), s(rows * 5, 0);
    float ts = 0;
    quantize_nvfp4(x.data(), rows, cols, QuantParams{}, q.data(), s.data(), &ts);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < 5; ++b) {
        const float* xb = x.data() + r * cols + b * 16;
        const int64_t n = std::min<int64_t>(16, cols - b * 16);
        float a = 0;
        for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(xb[i]));
        bad += s[r * 5 + b] != fmt::nvfp4_block_scale(xb, n, a, ts);
      }
    CHECK(bad == 0);
  }
  // Wide rows (several 16-lane groups of whole blocks and a partial last one):
  // four-over-six batched across blocks still picks formats/nvfp4.h's scale.
  {
    const int64_t wr = 3, wc = 16 * 70 + 9, wnb = 71;
    std::vector<float> w(wr * wc);
    for (int64_t i = 0; i < wr * wc; ++i) w[i] = std::ldexp(nd(rng), static_cast<int>(i % 23) - 11);
    for (Isa isa : test::isa_paths()) {
      set_isa_limit(isa);
      CAPTURE(std::string(isa_name(isa)));
      std::vector<uint8_t> q(wr * wc, 0), s(wr * wnb, 0);
      float ts = 0;
      quantize_nvfp4(w.data(), wr, wc, QuantParams{}, q.data(), s.data(), &ts);
      int64_t bad = 0, fours = 0, sixes = 0;
      for (int64_t r = 0; r < wr; ++r)
        for (int64_t b = 0; b < wnb; ++b) {
          const float* xb = w.data() + r * wc + b * 16;
          const int64_t n = std::min<int64_t>(16, wc - b * 16);
          float a = 0;
          for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(xb[i]));
          const uint32_t want = fmt::nvfp4_block_scale(xb, n, a, ts);
          bad += s[r * wnb + b] != want;
          fours += want != fmt::nvfp4_block_scale_six(a, ts);
          sixes += want == fmt::nvfp4_block_scale_six(a, ts);
        }
      CHECK(bad == 0);
      CHECK(fours > 10);  // both choices taken, so the batched sums decided some
      CHECK(sixes > 10);
    }
  }
  // The block formats: each ISA's bytes equal the generic path's, which the
  // reference-dump tests (test_quant_reference) check against Python.
  for (int nv = 0; nv < 2; ++nv) {
    std::vector<std::vector<uint8_t>> out;
    for (Isa isa : test::isa_paths()) {
      set_isa_limit(isa);
      std::vector<uint8_t> q(rows * cols, 0), s(rows * 8, 0);
      float ts = 0;
      QuantParams p;
      if (nv) quantize_nvfp4(x.data(), rows, cols, p, q.data(), s.data(), &ts);
      else quantize_mx(x.data(), rows, cols, p, q.data(), s.data());
      q.insert(q.end(), s.begin(), s.end());
      out.push_back(q);
    }
    for (size_t i = 1; i < out.size(); ++i) CHECK(out[i] == out[0]);
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("the row-block quantizers on short rows of whole blocks (quantized as wider rows) match the scalar model") {
  // [rows, cols] with cols a multiple of the block runs as [rows / f, cols f]: the
  // codes, scales and counts must be those of the row-by-row model all the same.
  const int64_t rows = 12, cols = 256;
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = std::ldexp(nd(rng), static_cast<int>(i / 40 % 17) - 8);
  std::fill(x.begin() + 3 * cols + 32, x.begin() + 3 * cols + 64, 0.0f);  // a zero MX block (kept)
  const fmt::Spec e4m3 = fmt::spec_e4m3();
  auto row_amax = [&](int64_t i, int64_t n) {
    float a = 0;
    for (int64_t j = 0; j < n; ++j) a = std::max(a, std::fabs(x[i + j]));
    return a;
  };
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    CAPTURE(std::string(isa_name(isa)));
    QuantParams p;
    p.fmt = DType::e4m3;
    {  // MX, blocks of 32
      std::vector<uint8_t> q(rows * cols), s(rows * cols / kMxBlock);
      const QuantStats st = quantize_mx(x.data(), rows, cols, p, q.data(), s.data());
      int64_t bad = 0, kept = 0;
      for (int64_t b = 0; b < rows * cols / kMxBlock; ++b) {
        bool k;
        const int32_t e = scale_exponent(row_amax(b * kMxBlock, kMxBlock), 448.0f, 0, 0, &k);
        kept += k;
        bad += s[b] != 127 - e;
        for (int64_t j = b * kMxBlock; j < (b + 1) * kMxBlock; ++j) bad += q[j] != fmt::encode(e4m3, x[j] * std::ldexp(1.0f, e));
      }
      CHECK(bad == 0);
      CHECK(st.kept_scales == kept);
      CHECK(st.amax == row_amax(0, rows * cols));
    }
    {  // fp8 1x128 tiles
      std::vector<uint8_t> q(rows * cols);
      std::vector<float> s(rows * cols / kFp8Tile);
      const QuantStats st = quantize_fp8_tiles(x.data(), rows, cols, 1, p, q.data(), s.data());
      int64_t bad = 0;
      for (int64_t b = 0; b < rows * cols / kFp8Tile; ++b) {
        bool k;
        const float scale = fmt::fp8_tile_scale(row_amax(b * kFp8Tile, kFp8Tile), 448.0f, &k);
        bad += s[b] != scale;
        for (int64_t j = b * kFp8Tile; j < (b + 1) * kFp8Tile; ++j) bad += q[j] != fmt::encode(e4m3, x[j] * fmt::fp8_tile_mult(scale));
      }
      CHECK(bad == 0);
      CHECK(st.amax == row_amax(0, rows * cols));
    }
    {  // NVFP4 1x16: one tensor scale, the four-over-six block scales
      std::vector<uint8_t> q(rows * cols / 2), s(rows * cols / kNvfp4Block);
      float ts = 0;
      quantize_nvfp4(x.data(), rows, cols, QuantParams{}, q.data(), s.data(), &ts);
      bool k;
      CHECK(ts == fmt::nvfp4_tensor_scale(row_amax(0, rows * cols), 0.0f, &k));
      int64_t bad = 0;
      for (int64_t b = 0; b < rows * cols / kNvfp4Block; ++b) {
        const float* xb = x.data() + b * kNvfp4Block;
        const uint32_t want = fmt::nvfp4_block_scale(xb, kNvfp4Block, row_amax(b * kNvfp4Block, kNvfp4Block), ts);
        bad += s[b] != want;
        for (int64_t j = 0; j < kNvfp4Block; ++j)
          bad += code_at(q, 4, b * kNvfp4Block + j) != fmt::e2m1_encode(xb[j] * fmt::nvfp4_mult(want, ts));
      }
      CHECK(bad == 0);
    }
  }
  set_isa_limit(kTopIsa);
}

#if defined(__aarch64__)
// The sweeps above cover the NEON kernels only if Isa::neon (detected on every
// AArch64 CPU, HWCAP2_BF16 or not) maps to them rather than to the portable copy.
TEST_CASE("AArch64: the neon levels run quantize_neon.cpp's kernels, generic the portable ones") {
  CHECK(detected_isa() >= Isa::neon);
  CHECK(&quant_impl::kernels_for(Isa::neon) == &quant_impl::kNeon);
  CHECK(&quant_impl::kernels_for(Isa::neon_bf16) == &quant_impl::kNeon);
  CHECK(&quant_impl::kernels_for(Isa::generic) == &quant_impl::kGeneric);
  CHECK(&quant_impl::kNeon != &quant_impl::kGeneric);
}
#endif
