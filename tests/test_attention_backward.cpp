// The CPU attention backward where dy ends in zero rows (a fine-tune's padding
// after each sequence): kernels/cpu/attention.cpp solves each head on its rows
// before the zero suffix only. Checked against an FP64 backward written out
// here, for zeros exactly where the suffix is, and, bit for bit, against the
// kernel run on the sequence cut at the suffix (causal attention: a prefix's
// gradients do not depend on the rows after it). GQA (6 query heads, 2 kv
// heads), suffixes per head that differ within a kv group, a head with no live
// row at all, one with no suffix.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/op_args.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

constexpr int64_t kH = 6, kHkv = 2, kDh = 8, kC = kH * kDh, kCkv = kHkv * kDh;

struct Grads {
  std::vector<float> dq, dk, dv;
};

// The kernels on q, k, v, dy [B, T, *]: the forward (y, lse), then the backward.
Grads run_kernels(int64_t B, int64_t T, const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v, const std::vector<float>& dy) {
  Attrs at;
  at.set_i("n_head", kH);
  at.set_i("n_kv_head", kHkv);
  const TensorType tq{{B, T, kC}, DType::f32}, tkv{{B, T, kCkv}, DType::f32}, tl{{B, kH, T}, DType::f32};
  std::vector<float> y(B * T * kC), lse(B * kH * T);
  auto arg = [](const std::vector<float>& x, const TensorType& t) {
    return TensorArg{const_cast<float*>(x.data()), &t, static_cast<int64_t>(x.size())};
  };
  const CpuKernel fwd = find_cpu_kernel(OpCode::Attention, {DType::f32, DType::f32, DType::f32}, {DType::f32, DType::f32});
  REQUIRE(static_cast<bool>(fwd));
  OpArgs f{OpCode::Attention, &at, {arg(q, tq), arg(k, tkv), arg(v, tkv)}, {arg(y, tq), arg(lse, tl)}};
  REQUIRE(fwd(f).ok());
  Grads g{std::vector<float>(q.size(), NAN), std::vector<float>(k.size(), NAN), std::vector<float>(v.size(), NAN)};
  const CpuKernel bwd = find_cpu_kernel(OpCode::AttentionGrad, std::vector<DType>(6, DType::f32), std::vector<DType>(3, DType::f32));
  REQUIRE(static_cast<bool>(bwd));
  OpArgs b{OpCode::AttentionGrad, &at, {arg(q, tq), arg(k, tkv), arg(v, tkv), arg(y, tq), arg(lse, tl), arg(dy, tq)},
           {arg(g.dq, tq), arg(g.dk, tkv), arg(g.dv, tkv)}};
  REQUIRE(bwd(b).ok());
  return g;
}

// The backward in FP64 from its definition (causal softmax attention, GQA).
Grads reference(int64_t B, int64_t T, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& dy) {
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  const double scale = 1.0 / std::sqrt(double(kDh));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < kH; ++h) {
      const int64_t hk = h / (kH / kHkv);
      auto Q = [&](int64_t i, int64_t c) { return double(q[(b * T + i) * kC + h * kDh + c]); };
      auto K = [&](int64_t j, int64_t c) { return double(k[(b * T + j) * kCkv + hk * kDh + c]); };
      auto V = [&](int64_t j, int64_t c) { return double(v[(b * T + j) * kCkv + hk * kDh + c]); };
      auto DY = [&](int64_t i, int64_t c) { return double(dy[(b * T + i) * kC + h * kDh + c]); };
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p(i + 1), dp(i + 1);
        double m = -INFINITY, sum = 0, D = 0;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = 0;
          for (int64_t c = 0; c < kDh; ++c) p[j] += Q(i, c) * K(j, c);
          p[j] *= scale;
          m = std::max(m, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
        for (int64_t c = 0; c < kDh; ++c) {
          double yc = 0;
          for (int64_t j = 0; j <= i; ++j) yc += p[j] * V(j, c);
          D += DY(i, c) * yc;
        }
        for (int64_t j = 0; j <= i; ++j) {
          dp[j] = 0;
          for (int64_t c = 0; c < kDh; ++c) dp[j] += DY(i, c) * V(j, c);
          const double ds = p[j] * (dp[j] - D);
          for (int64_t c = 0; c < kDh; ++c) {
            dq[(b * T + i) * kC + h * kDh + c] += scale * ds * K(j, c);
            dk[(b * T + j) * kCkv + hk * kDh + c] += scale * ds * Q(i, c);
            dv[(b * T + j) * kCkv + hk * kDh + c] += p[j] * DY(i, c);
          }
        }
      }
    }
  auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  return {to_f(dq), to_f(dk), to_f(dv)};
}

std::vector<float> uniform(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  std::vector<float> x(n);
  for (float& e : x) e = u(rng);
  return x;
}

}  // namespace

TEST_CASE("attention's backward over a zero suffix of dy: FP64's values, zeros there, a cut sequence's bits") {
  const int64_t B = 3, T = 37;
  std::mt19937 rng(21);
  const std::vector<float> q = uniform(B * T * kC, rng), k = uniform(B * T * kCkv, rng), v = uniform(B * T * kCkv, rng);
  std::vector<float> dy = uniform(B * T * kC, rng);
  // live[b][h]: the rows before head h's zero suffix in batch b.
  const int64_t live[B][kH] = {{25, 25, 25, 25, 25, 25},  // every head: a padded sequence
                               {30, 30, 30, 37, 10, 22},  // kv head 1's group differs within itself
                               {37, 37, 37, 0, 0, 0}};    // kv head 1's group has no live row
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = live[b][h]; i < T; ++i)
        for (int64_t c = 0; c < kDh; ++c) dy[(b * T + i) * kC + h * kDh + c] = c % 2 ? -0.0f : 0.0f;
  const Grads g = run_kernels(B, T, q, k, v, dy), r = reference(B, T, q, k, v, dy);

  int64_t off = 0, not_zero = 0;
  auto close = [&](const std::vector<float>& x, const std::vector<float>& ref) {
    for (size_t i = 0; i < x.size(); ++i) off += !(std::fabs(x[i] - ref[i]) <= 1e-4f + 1e-4f * std::fabs(ref[i]));
  };
  close(g.dq, r.dq), close(g.dk, r.dk), close(g.dv, r.dv);
  CHECK(off == 0);
  const float plus_zero = 0.0f;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t h = 0; h < kH; ++h)
        if (i >= live[b][h]) not_zero += std::memcmp(&g.dq[(b * T + i) * kC + h * kDh], &plus_zero, 4) != 0;
      for (int64_t hk = 0; hk < kHkv; ++hk) {
        int64_t reach = 0;  // the kv head's keys past every query head's live rows
        for (int64_t h = hk * (kH / kHkv); h < (hk + 1) * (kH / kHkv); ++h) reach = std::max(reach, live[b][h]);
        if (i >= reach)
          for (int64_t c = 0; c < kDh; ++c) {
            const int64_t at = (b * T + i) * kCkv + hk * kDh + c;
            not_zero += std::memcmp(&g.dk[at], &plus_zero, 4) != 0;
            not_zero += std::memcmp(&g.dv[at], &plus_zero, 4) != 0;
          }
      }
    }
  CHECK(not_zero == 0);

  // Batch 0 cut after its 25 live rows, alone: the same bits in those rows.
  const int64_t n = live[0][0];
  auto cut = [&](const std::vector<float>& x, int64_t width) {
    return std::vector<float>(x.begin(), x.begin() + n * width);
  };
  const Grads c = run_kernels(1, n, cut(q, kC), cut(k, kCkv), cut(v, kCkv), cut(dy, kC));
  CHECK(std::memcmp(c.dq.data(), g.dq.data(), sizeof(float) * c.dq.size()) == 0);
  CHECK(std::memcmp(c.dk.data(), g.dk.data(), sizeof(float) * c.dk.size()) == 0);
  CHECK(std::memcmp(c.dv.data(), g.dv.data(), sizeof(float) * c.dv.size()) == 0);
}
