// FP4 training's pieces against NUMERICS.md §4 (MS-AMP's reference vectors):
// the E2M1 quantizer per tensor and per channel, the tie rule, the DGE
// derivative, and outlier clamping.
#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/quantize.h"
#include "formats/fp4_dge.h"
#include "formats/formats.h"
#include "harness.h"

using namespace sgrt;

namespace {

float bf16(float x) { return fmt::bf16_decode(fmt::bf16_encode(x)); }

// Quantize-dequantize through the kernel the fp4 recipe uses.
std::vector<float> fake_quant(std::vector<float> x, int64_t rows, int64_t cols, cpu::QuantAxis axis) {
  for (float& v : x) v = bf16(v);
  std::vector<uint8_t> q((x.size() + 1) / 2);
  int64_t ne = axis == cpu::QuantAxis::tensor ? 1 : axis == cpu::QuantAxis::row ? rows : cols;
  std::vector<int32_t> e(ne, 0);
  cpu::QuantParams p;
  p.fmt = DType::e2m1;
  cpu::QuantStats st = cpu::quantize(x.data(), rows, cols, axis, p, true, q.data(), e.data());
  REQUIRE(st.error == nullptr);
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = r * cols + c;
      int32_t ex = e[axis == cpu::QuantAxis::tensor ? 0 : axis == cpu::QuantAxis::row ? r : c];
      out[i] = std::ldexp(fmt::e2m1_decode(q[i / 2] >> (4 * (i & 1))), -ex);
    }
  return out;
}

}  // namespace

TEST_CASE("per-tensor E2M1 quantizer matches MS-AMP's reference vector") {
  std::vector<float> x{0.001f, 0.048f, 0.0997f, 0.1503f, 0.2002f, 0.2497f, 0.2974f, 0.30699f, 0.4001f};
  std::vector<float> want{0, 0.0625f, 0.125f, 0.125f, 0.1875f, 0.25f, 0.25f, 0.25f, 0.375f};
  CHECK(fake_quant(x, 1, 9, cpu::QuantAxis::tensor) == want);  // amax 0.4001: sf = 8
}

TEST_CASE("per-channel E2M1 quantizer matches MS-AMP's reference matrix, by column and by row of the transpose") {
  std::vector<float> x{-0.01f, 0.48f, -9.67f, 1.623f, -2.222f, 24.67f, -2.874f, 3.699f, -34.57f, 0.85f, -1.343f, 18.88f};
  std::vector<float> want{0, 0.5f, -8, 1.5f, -2, 24, -3, 4, -32, 0.75f, -1.5f, 16};
  CHECK(fake_quant(x, 4, 3, cpu::QuantAxis::col) == want);
  std::vector<float> xt(12), wt(12);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) {
      xt[c * 4 + r] = x[r * 3 + c];
      wt[c * 4 + r] = want[r * 3 + c];
    }
  CHECK(fake_quant(xt, 3, 4, cpu::QuantAxis::row) == wt);
}

TEST_CASE("ties round to nearest even (OCP), not MS-AMP's toward +inf") {
  // MS-AMP: 0.25 -> 0.5, -0.25 -> 0, 5 -> 6, -5 -> -4. sgrt (RNE): 0.25 -> 0, 5 -> 4.
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(0.25f)) == 0.0f);
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(-0.25f)) == 0.0f);
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(0.75f)) == 1.0f);
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(5.0f)) == 4.0f);
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(-5.0f)) == -4.0f);
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(2.5f)) == 2.0f);
  CHECK(fmt::e2m1_decode(fmt::e2m1_encode(3.5f)) == 4.0f);
}

TEST_CASE("DGE derivative matches the reference vector on linspace(-6, 6, 20) in BF16") {
  const float ref[10] = {0.2002f, 0.4375f, 0.6055f, 0.2168f, 1.8359f, 0.2695f, 0.3027f, 0.2695f, 0.2402f, 0.5781f};
  for (int i = 0; i < 20; ++i) {
    float x = bf16(-6.0f + 12.0f * static_cast<float>(i) / 19.0f);
    float d = bf16(fmt::dge_derivative(x));
    float want = ref[i < 10 ? i : 19 - i];  // the second half mirrors the first
    CHECK_MESSAGE(d == doctest::Approx(want).epsilon(0.01), "x = " << x);
  }
  CHECK(fmt::dge_derivative(0.25f) == fmt::kDgeClamp);  // midpoint of [0, 0.5]: clamped at 3
  CHECK(fmt::dge_derivative(1.0f) == doctest::Approx(0.2));  // on the grid: 1/k
}

TEST_CASE("dge_grad scales each weight gradient by f'(W 2^e) of its column") {
  std::vector<float> dw{1, 2, 3, 4, 5, 6}, w{0.1f, -0.7f, 2.9f, 0.3f, 1.0f, -5.0f}, out(6);
  std::vector<int32_t> e{3, 1, 0};
  TensorType t2{{2, 3}, DType::f32}, te{{3}, DType::i32};
  Attrs none;
  cpu::OpArgs a{OpCode::DgeGrad, &none, {{dw.data(), &t2, 6}, {w.data(), &t2, 6}, {e.data(), &te, 3}}, {{out.data(), &t2, 6}}};
  REQUIRE(cpu::k_dge_grad(a).ok());
  for (int i = 0; i < 6; ++i) CHECK(out[i] == doctest::Approx(dw[i] * fmt::dge_derivative(std::ldexp(w[i], e[i % 3]))));
}

TEST_CASE("dge_grad's vectorized f' stays within 1e-6 of the formula in FP64 on every interval") {
  // The kernel's power is exp(p ln u) from fast_math.h, not powf: compare it with
  // NUMERICS.md's formula evaluated in double, densely over [-7, 7].
  const int64_t n = 28001;
  std::vector<float> dw(n, 1.0f), w(n), out(n);
  for (int64_t i = 0; i < n; ++i) w[i] = -7.0f + 14.0f * static_cast<float>(i) / (n - 1);
  std::vector<int32_t> e{0};
  TensorType t{{n, 1}, DType::f32}, te{{1}, DType::i32};
  Attrs none;
  cpu::OpArgs a{OpCode::DgeGrad, &none, {{dw.data(), &t, n}, {w.data(), &t, n}, {e.data(), &te, 1}}, {{out.data(), &t, n}}};
  REQUIRE(cpu::k_dge_grad(a).ok());
  for (int64_t i = 0; i < n; ++i) {
    const double ax = std::fabs(static_cast<double>(w[i]));
    double want = 0.2;
    if (ax < 6) {
      const double d = ax < 2 ? 0.5 : ax < 4 ? 1 : 2, lo = ax < 4 ? std::floor(ax / d) * d : 4;
      const double u = std::fabs(2 * (ax - lo) / d - 1);
      want = u == 0 ? 3.0 : std::min(3.0, std::pow(u, 1.0 / 5 - 1) / 5);
    }
    REQUIRE_MESSAGE(std::fabs(out[i] - want) <= 1e-6 * want, "w = " << w[i] << ": " << out[i] << " vs " << want);
  }
}

TEST_CASE("dge_grad is exactly dW f'(ldexp(W, e)) at the ends of the exponent range") {
  std::vector<float> dw(8, 1.5f), w{1e-30f, 3.0f, -2.5e-39f, 0.75f, 1e30f, -1.0f, 6e-3f, -4.0f}, out(8);
  std::vector<int32_t> e{-126, 127, 126, -3};
  TensorType t2{{2, 4}, DType::f32}, te{{4}, DType::i32};
  Attrs none;
  cpu::OpArgs a{OpCode::DgeGrad, &none, {{dw.data(), &t2, 8}, {w.data(), &t2, 8}, {e.data(), &te, 4}}, {{out.data(), &t2, 8}}};
  REQUIRE(cpu::k_dge_grad(a).ok());
  for (int i = 0; i < 8; ++i) CHECK(out[i] == dw[i] * fmt::dge_derivative(std::ldexp(w[i], e[i % 4])));
}

TEST_CASE("outlier clamping keeps the central quantiles and a sparse residual that adds back exactly") {
  const int64_t rows = 4, cols = 1000;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(rows * cols), xc(x.size()), res(x.size());
  for (float& v : x) v = nd(rng);
  x[17] = 80.f;  // an outlier
  TensorType t{{rows, cols}, DType::f32};
  Attrs at;
  at.set_f("alpha", 0.99);
  cpu::OpArgs a{OpCode::ClampOutliers, &at, {{x.data(), &t, rows * cols}}, {{xc.data(), &t, rows * cols}, {res.data(), &t, rows * cols}}};
  REQUIRE(cpu::k_clamp_outliers(a).ok());
  int64_t nonzero = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    CHECK(xc[i] + res[i] == x[i]);
    nonzero += res[i] != 0.f;
  }
  // About 2 (1 - alpha) of the entries: 1% above the 0.99 quantile and 1% below 0.01.
  CHECK(nonzero == doctest::Approx(0.02 * rows * cols).epsilon(0.15));
  CHECK(res[17] > 70.f);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(x.begin() + r * cols, x.begin() + (r + 1) * cols);
    std::sort(row.begin(), row.end());
    float hi = *std::max_element(xc.begin() + r * cols, xc.begin() + (r + 1) * cols);
    float lo = *std::min_element(xc.begin() + r * cols, xc.begin() + (r + 1) * cols);
    const size_t hi_k = static_cast<size_t>(std::floor(0.99 * (cols - 1)));
    CHECK(hi == row[hi_k]);
    CHECK(lo == row[cols - 1 - hi_k]);
  }
}

TEST_CASE("outlier clamping finds the quantiles of sorted, reversed, tied and tiny rows") {
  // The one-pass tail selection (quantiles within 32 of the ends) meets its worst
  // orders here: every element of an ascending row displaces the current k-th.
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> few(-3, 3);
  for (int64_t cols : {1, 2, 3, 40, 256, 1024}) {
    std::vector<std::vector<float>> rows(4, std::vector<float>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      rows[0][c] = static_cast<float>(c) * 0.5f;
      rows[1][c] = -static_cast<float>(c);
      rows[2][c] = static_cast<float>(few(rng));  // many ties
      rows[3][c] = static_cast<float>(std::ldexp(1.0, few(rng) * 10)) * (c % 2 ? -1.f : 1.f);
    }
    std::vector<float> x;
    for (auto& r : rows) x.insert(x.end(), r.begin(), r.end());
    std::vector<float> xc(x.size()), res(x.size());
    TensorType t{{4, cols}, DType::f32};
    for (double alpha : {0.6, 0.99, 0.999}) {
      Attrs at;
      at.set_f("alpha", alpha);
      cpu::OpArgs a{OpCode::ClampOutliers, &at, {{x.data(), &t, 4 * cols}}, {{xc.data(), &t, 4 * cols}, {res.data(), &t, 4 * cols}}};
      REQUIRE(cpu::k_clamp_outliers(a).ok());
      const size_t hi_k = static_cast<size_t>(std::floor(alpha * static_cast<double>(cols - 1))), lo_k = cols - 1 - hi_k;
      for (int64_t r = 0; r < 4; ++r) {
        std::vector<float> sorted = rows[r];
        std::sort(sorted.begin(), sorted.end());
        for (int64_t c = 0; c < cols; ++c)
          REQUIRE(xc[r * cols + c] == std::min(std::max(rows[r][c], sorted[lo_k]), sorted[hi_k]));
      }
    }
  }
}

TEST_CASE("the compensation matmul of an outlier residual matches FP64, on any thread count") {
  // The residual is ~2% non-zero: the CPU multiplies only its non-zeros (a dense A
  // takes the blocked GEMM); both must give x @ W^T and x @ W to FP64's accuracy.
  // The second shape's transposed W (2.4 M floats) is copied in two panels.
  for (auto [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{96, 256, 72}, {6, 4096, 600}}) {
    std::mt19937 rng(10);
    std::normal_distribution<float> nd;
    std::vector<float> x(rows * k), xc(x.size()), res(x.size()), w(n * k);
    for (float& v : x) v = nd(rng);
    for (float& v : w) v = nd(rng);
    TensorType tx{{rows, k}, DType::f32};
    Attrs at;
    at.set_f("alpha", 0.99);
    cpu::OpArgs clamp{OpCode::ClampOutliers, &at, {{x.data(), &tx, rows * k}}, {{xc.data(), &tx, rows * k}, {res.data(), &tx, rows * k}}};
    REQUIRE(cpu::k_clamp_outliers(clamp).ok());
    for (std::vector<float>* a : {&res, &x})
      for (int trans_b : {1, 0}) {
        TensorType tw{trans_b ? Shape{n, k} : Shape{k, n}, DType::f32}, ty{{rows, n}, DType::f32};
        Attrs mm;
        mm.set_i("trans_b", trans_b);
        std::vector<float> y1(rows * n), y2(rows * n);
        for (auto [threads, y] : {std::pair{1, &y1}, std::pair{2, &y2}}) {
          cpu::set_num_threads(threads);
          cpu::OpArgs op{OpCode::MatMul, &mm, {{a->data(), &tx, rows * k}, {w.data(), &tw, n * k}}, {{y->data(), &ty, rows * n}}};
          REQUIRE(cpu::k_matmul_f32(op).ok());
        }
        cpu::set_num_threads(0);
        CHECK(std::equal(y1.begin(), y1.end(), y2.begin()));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t c = 0; c < k; ++c) {
              double p = static_cast<double>((*a)[r * k + c]) * w[trans_b ? j * k + c : c * n + j];
              ref += p;
              mag += std::fabs(p);
            }
            REQUIRE(std::fabs(y1[r * n + j] - ref) <= 1e-6 * mag + 1e-30);
          }
      }
  }
}

TEST_CASE("outlier clamping below alpha 0.5 clamps to the sorted row's quantiles too") {
  const int64_t rows = 3, cols = 101;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  std::vector<float> x(rows * cols), xc(x.size()), res(x.size());
  for (float& v : x) v = nd(rng);
  TensorType t{{rows, cols}, DType::f32};
  for (double alpha : {0.3, 0.5, 0.9}) {
    Attrs at;
    at.set_f("alpha", alpha);
    cpu::OpArgs a{OpCode::ClampOutliers, &at, {{x.data(), &t, rows * cols}}, {{xc.data(), &t, rows * cols}, {res.data(), &t, rows * cols}}};
    REQUIRE(cpu::k_clamp_outliers(a).ok());
    const size_t hi_k = static_cast<size_t>(std::floor(alpha * (cols - 1))), lo_k = cols - 1 - hi_k;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> row(x.begin() + r * cols, x.begin() + (r + 1) * cols);
      std::sort(row.begin(), row.end());
      for (int64_t c = 0; c < cols; ++c) CHECK(xc[r * cols + c] == std::min(std::max(x[r * cols + c], row[lo_k]), row[hi_k]));
    }
  }
}
