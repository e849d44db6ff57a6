// The f32 GEMM's skinny path (kernels/cpu/gemm_skinny.h): products with a side of
// at most 16, the shapes of a LoRA adapter's six products at rank 8 and others at
// ranks 3, 5, 13 and 16, every layout it takes (K short, N >= 128; N short with
// A's rows contiguous, K >= 128; A stored [K, M] and B [K, N] with M or N short). Checked against
// FP64, across the ISA paths (the sums' order does not depend on the vector width),
// across thread counts, and for what it skips: A's all-zero rows must leave every
// other row's bits alone, and a k whose short-side values are all zero must give
// exactly the product over the other k.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "kernel_checks.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

struct Dims {
  int64_t M, N, K;
  bool ta, tb;
};

// LoRA at rank 8 on SmolLM2's widths (x A^T, (x A^T) B^T, dy B, d_low A, dy^T low,
// d_low^T x), then ranks 16, 5, 3, 13 and the odd widths past whole vectors.
const Dims kShapes[] = {
    {256, 1536, 8, false, true}, {256, 576, 8, false, false}, {256, 8, 576, false, true},
    {256, 8, 1536, false, false}, {8, 576, 256, true, false}, {1536, 8, 256, true, false},
    {70, 130, 16, false, false}, {33, 200, 3, true, true},     {37, 5, 1601, false, true},
    {130, 16, 300, false, false}, {9, 70, 33, true, false},    {50, 13, 200, true, false}};

// op(A) [M, K] stored [M, K] or [K, M] (ta); op(B) [K, N] stored [K, N] or [N, K] (tb).
struct Product {
  Dims s;
  std::vector<float> a, b, bias;
  float a_at(int64_t i, int64_t k) const { return s.ta ? a[k * s.M + i] : a[i * s.K + k]; }
  float b_at(int64_t k, int64_t j) const { return s.tb ? b[j * s.K + k] : b[k * s.N + j]; }
  float& a_ref(int64_t i, int64_t k) { return s.ta ? a[k * s.M + i] : a[i * s.K + k]; }
  // C [M, N + 1] (its last column must stay untouched) after the product.
  std::vector<float> run(float beta, bool with_bias, bool relu, const std::vector<float>& c0) const {
    std::vector<float> c = c0;
    gemm_f32(s.ta, s.tb, s.M, s.N, s.K, 1.5f, a.data(), s.ta ? s.M : s.K, b.data(), s.tb ? s.K : s.N, beta, c.data(),
             s.N + 1, with_bias ? bias.data() : nullptr, Triangle::none, Activation{relu, nullptr});
    return c;
  }
};

Product make(const Dims& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Product p{s, std::vector<float>(s.M * s.K), std::vector<float>(s.K * s.N), std::vector<float>(s.N)};
  for (auto* v : {&p.a, &p.b, &p.bias})
    for (float& x : *v) x = u(rng);
  return p;
}

}  // namespace

TEST_CASE("skinny products match FP64 on every ISA path, each path the same bits") {
  std::mt19937 rng(5);
  for (const Dims& s : kShapes) {
    const Product p = make(s, rng);
    const int64_t ldc = s.N + 1;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> c0(s.M * ldc);
    for (float& x : c0) x = u(rng);
    for (float beta : {0.0f, 0.5f}) {
      std::vector<float> first;
      for (Isa isa : test::isa_paths()) {
        set_isa_limit(isa);
        CAPTURE(std::string(isa_name(isa)));
        CAPTURE(s.M); CAPTURE(s.N); CAPTURE(s.K); CAPTURE(s.ta); CAPTURE(s.tb); CAPTURE(beta);
        const std::vector<float> c = p.run(beta, false, false, c0);
        int64_t bad = 0;
        for (int64_t i = 0; i < s.M; ++i) {
          CHECK(c[i * ldc + s.N] == c0[i * ldc + s.N]);
          for (int64_t j = 0; j < s.N; ++j) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < s.K; ++k) {
              const double t = double(p.a_at(i, k)) * p.b_at(k, j);
              ref += t, mag += std::fabs(t);
            }
            const double c_in = beta * double(c0[i * ldc + j]);
            ref = 1.5 * ref + c_in;
            const double tol = (s.K + 4) * std::ldexp(1.0, -24) * (1.5 * mag + std::fabs(c_in)) + 1e-30;
            bad += !(std::fabs(c[i * ldc + j] - ref) <= tol);
          }
        }
        CHECK(bad == 0);
        // Every path with fused multiply-adds sums in one order (x86's portable
        // kernel is built without FMA instructions); beta's merge is fused in
        // vectors and not in the columns past them, so only beta = 0 compares.
#if defined(__x86_64__)
        if (isa == Isa::generic || beta != 0.0f) continue;
#else
        if (beta != 0.0f) continue;
#endif
        if (first.empty()) first = c;
        else CHECK(test::differing_floats(c, first) == 0);
      }
    }
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("skinny products skip A's zero rows and the short side's zero k without changing a bit") {
  std::mt19937 rng(9);
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (const Dims& s : kShapes)
      for (int v = 0; v < 3; ++v) {  // nothing, a bias, a bias and relu
        CAPTURE(std::string(isa_name(isa)));
        CAPTURE(s.M); CAPTURE(s.N); CAPTURE(s.K); CAPTURE(s.ta); CAPTURE(v);
        Product p = make(s, rng);
        const int64_t ldc = s.N + 1;
        const std::vector<float> c0(s.M * ldc, 1234.5f);
        const bool k_major = s.ta && !s.tb && s.K > 16 && (s.M <= 16 || s.N <= 16);
        if (!k_major) {
          // A's rows 11..15 of every 16 (a sequence's padding) are zero: -0 and +0.
          // The full product holds a small value there instead; every other row
          // must come out the same, a zero row as the empty sum (+0, the bias, relu).
          Product full = p;
          auto zero = [](int64_t i) { return i % 16 >= 11; };
          for (int64_t i = 0; i < s.M; ++i)
            if (zero(i))
              for (int64_t k = 0; k < s.K; ++k) p.a_ref(i, k) = k % 2 ? -0.0f : 0.0f, full.a_ref(i, k) = 0x1p-20f;
          const std::vector<float> got = p.run(0.0f, v > 0, v == 2, c0), want = full.run(0.0f, v > 0, v == 2, c0);
          int64_t differ = 0, zero_rows_wrong = 0;
          for (int64_t i = 0; i < s.M; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const float g = got[i * ldc + j];
              if (j == s.N) differ += g != 1234.5f;
              else if (!zero(i)) differ += std::memcmp(&g, &want[i * ldc + j], 4) != 0;
              else {
                float e = v ? 0.0f + p.bias[j] : 0.0f;
                if (v == 2) e = e > 0.0f ? e : 0.0f;
                zero_rows_wrong += std::memcmp(&g, &e, 4) != 0;
              }
            }
          CHECK(differ == 0);
          CHECK(zero_rows_wrong == 0);
          continue;
        }
        // A stored [K, M], B [K, N]: the short side's rows k % 16 >= 11 (padding
        // tokens) are zero. The result must be, to the bit, the product over the
        // other k alone (both operands without those rows).
        const bool short_a = s.M <= 16;
        std::vector<float>& sv = short_a ? p.a : p.b;
        const int64_t ns = short_a ? s.M : s.N;
        std::vector<int64_t> kept;
        for (int64_t k = 0; k < s.K; ++k) {
          if (k % 16 < 11) {
            kept.push_back(k);
            continue;
          }
          for (int64_t t = 0; t < ns; ++t) sv[k * ns + t] = t % 2 ? -0.0f : 0.0f;
        }
        Product less = p;
        less.s.K = static_cast<int64_t>(kept.size());
        less.a.assign(s.M * less.s.K, 0.0f);
        less.b.assign(less.s.K * s.N, 0.0f);
        for (int64_t t = 0; t < less.s.K; ++t) {
          std::memcpy(&less.a[t * s.M], &p.a[kept[t] * s.M], sizeof(float) * s.M);
          std::memcpy(&less.b[t * s.N], &p.b[kept[t] * s.N], sizeof(float) * s.N);
        }
        CHECK(test::differing_floats(p.run(0.0f, v > 0, v == 2, c0), less.run(0.0f, v > 0, v == 2, c0)) == 0);
      }
  }
  set_isa_limit(kTopIsa);
}

TEST_CASE("skinny products: the thread count does not change a bit") {
  std::mt19937 rng(13);
  for (const Dims& s : kShapes) {
    CAPTURE(s.M); CAPTURE(s.N); CAPTURE(s.K); CAPTURE(s.ta); CAPTURE(s.tb);
    const Product p = make(s, rng);
    const std::vector<float> c0(s.M * (s.N + 1), 0.25f);
    set_num_threads(1);
    const std::vector<float> one = p.run(0.5f, true, true, c0);
    set_num_threads(2);
    const std::vector<float> two = p.run(0.5f, true, true, c0);
    set_num_threads(0);
    CHECK(test::differing_floats(one, two) == 0);
  }
}

TEST_CASE("a product with few columns sums each row as that row alone does (the matrix-vector order)") {
  // N <= 16 with A's rows contiguous runs as dot products in gemv's order, so a
  // row's bits do not depend on the rows beside it: each row of the product equals
  // the one-row product of that row (gemv where B is stored [N, K]).
  std::mt19937 rng(17);
  for (Isa isa : test::isa_paths()) {
    set_isa_limit(isa);
    for (const Dims& s : {Dims{53, 10, 300, false, true}, Dims{53, 16, 1601, false, false}, Dims{20, 1, 140, false, true}}) {
      CAPTURE(std::string(isa_name(isa)));
      CAPTURE(s.N); CAPTURE(s.K); CAPTURE(s.tb);
      const Product p = make(s, rng);
      const std::vector<float> all = p.run(0.5f, true, false, std::vector<float>(s.M * (s.N + 1), 0.75f));
      int64_t differ = 0;
      for (int64_t i = 0; i < s.M; ++i) {
        Product row = p;
        row.s.M = 1;
        row.a.assign(p.a.begin() + i * s.K, p.a.begin() + (i + 1) * s.K);
        const std::vector<float> one = row.run(0.5f, true, false, std::vector<float>(s.N + 1, 0.75f));
        differ += std::memcmp(one.data(), &all[i * (s.N + 1)], sizeof(float) * (s.N + 1)) != 0;
      }
      CHECK(differ == 0);
    }
  }
  set_isa_limit(kTopIsa);
}
