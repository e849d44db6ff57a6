// cpu/row_reduce.h's reductions and the kernels built on them (reduce, softmax,
// cross-entropy, layer norm) against FP64 references within the error bound of
// their summation order, and bit for bit against a scalar model of that order
// (docs/edge.md, "Reduction order"). The model is written here independently
// (each lane summed on its own, then the tree) and this file is compiled without
// FMA contraction like the kernels, so passing on x86-64 natively and on AArch64
// under qemu (scripts/test_aarch64.sh) means both builds give the same bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu/fast_math.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/row_reduce.h"

using namespace sgrt;
using namespace sgrt::cpu;

namespace {

const int64_t kSizes[] = {0, 1, 3, 15, 16, 17, 31, 48, 100, 257, 1000, 4099};
constexpr double kU = 0x1p-24;  // f32 unit roundoff

std::vector<float> randoms(int64_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  // Spread the magnitudes over six decades so that the order matters.
  for (int64_t i = 0; i < n; i += 7) v[i] *= 1000.f;
  return v;
}

// The documented order: lane j sums terms j, j + 16, j + 32, ... in turn; then
// p[j] += p[j + 8], += p[j + 4], += p[j + 2], += p[j + 1] for the low half each time.
float model_sum(const std::vector<float>& t) {
  float p[16];
  for (int j = 0; j < 16; ++j) {
    p[j] = 0.f;
    for (size_t i = j; i < t.size(); i += 16) p[j] += t[i];
  }
  for (int w : {8, 4, 2, 1})
    for (int j = 0; j < w; ++j) p[j] += p[j + w];
  return p[0];
}

// Error bound of that order: each term passes through at most ceil(n / 16) + 4
// additions, each off by a relative kU.
double sum_bound(int64_t n, double abs_sum) { return ((n + 15) / 16 + 4) * kU * abs_sum * 1.01; }

}  // namespace

TEST_CASE("row_sum and row_dot: the 16-lane order, bit for bit, within its FP64 bound") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> a = randoms(n, 1 + n), b = randoms(n, 2 + n), prod(n);
    double ref = 0, abs_sum = 0, dref = 0, dabs = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += a[i], abs_sum += std::fabs(a[i]);
      prod[i] = a[i] * b[i];
      dref += static_cast<double>(a[i]) * b[i], dabs += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    float s = row_sum(a.data(), n), d = row_dot(a.data(), b.data(), n);
    CHECK(std::bit_cast<uint32_t>(s) == std::bit_cast<uint32_t>(model_sum(a)));
    CHECK(std::bit_cast<uint32_t>(d) == std::bit_cast<uint32_t>(model_sum(prod)));
    CHECK(std::fabs(s - ref) <= sum_bound(n, abs_sum));
    CHECK(std::fabs(d - dref) <= sum_bound(n, dabs) + kU * dabs);  // + each product's rounding
  }
}

TEST_CASE("row_max: exact in any order, -0 < +0, a positive NaN wins") {
  for (int64_t n : kSizes) {
    std::vector<float> a = randoms(n, 3 + n);
    CHECK(row_max(a.data(), n) == (n ? *std::max_element(a.begin(), a.end()) : -INFINITY));
  }
  const float zeros[] = {-0.f, 0.f, -0.f};
  CHECK(!std::signbit(row_max(zeros, 3)));
  CHECK(std::signbit(row_max(zeros, 1)));
  const float with_nan[] = {1.f, std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY};
  CHECK(std::isnan(row_max(with_nan, 4)));
  const float infs[] = {-INFINITY, 3.f, INFINITY};
  CHECK(row_max(infs, 3) == INFINITY);
}

TEST_CASE("row_logsumexp against FP64") {
  for (int64_t n : kSizes) {
    if (n == 0) continue;
    CAPTURE(n);
    std::vector<float> a = randoms(n, 4 + n, -30.f, 30.f);
    double m = *std::max_element(a.begin(), a.end()), s = 0;
    for (float x : a) s += std::exp(x - m);
    double ref = m + std::log(s);
    // fast_exp is within 2e-7 relative; the sum's order adds sum_bound; log and the
    // final addition round once each.
    double tol = (2e-7 + sum_bound(n, 1) + kU) + 2 * kU * std::fabs(ref);
    CHECK(std::fabs(row_logsumexp(a.data(), n) - ref) <= tol);
  }
}

TEST_CASE("rows_logsumexp equals row_logsumexp row by row, to the bit") {
  // Rows of at most 16 values go 16 rows at a time across rows; longer ones and
  // the leftover rows row by row. Infinities and NaNs must come out as the row
  // function's: a row of -inf (its max), a +inf, a NaN.
  for (int64_t n : {1, 2, 10, 15, 16, 17, 33, 1000}) {  // 1000: rows across threads, 16 a chunk
    for (int64_t rows : {1, 15, 16, 17, 100}) {
      CAPTURE(n);
      CAPTURE(rows);
      std::vector<float> x = randoms(rows * n, 40 + n * rows, -30.f, 30.f);
      if (rows > 3) {
        for (int64_t j = 0; j < n; ++j) x[j] = -INFINITY;
        x[n] = INFINITY;
        x[2 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
      }
      std::vector<float> lse(rows);
      rows_logsumexp(x.data(), rows, n, lse.data());
      int64_t differ = 0;
      for (int64_t r = 0; r < rows; ++r)
        differ += std::bit_cast<uint32_t>(lse[r]) != std::bit_cast<uint32_t>(row_logsumexp(x.data() + r * n, n));
      CHECK(differ == 0);
    }
  }
}

namespace {

// One op through its CPU kernel; every tensor is stored as floats (i32 labels by
// their bits).
struct Op {
  std::vector<TensorType> in_t, out_t;
  std::vector<std::vector<float>> in, out;
  Attrs attrs;
  Op(std::vector<TensorType> ins, std::vector<TensorType> outs) : in_t(std::move(ins)), out_t(std::move(outs)) {
    for (auto& t : in_t) in.emplace_back(numel(t.shape));
    for (auto& t : out_t) out.emplace_back(numel(t.shape));
  }
  static size_t numel(const Shape& s) {
    size_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  Status run(OpCode code, Status (*kernel)(const OpArgs&)) {
    OpArgs a;
    a.code = code;
    a.attrs = &attrs;
    for (size_t i = 0; i < in.size(); ++i) a.in.push_back({in[i].data(), &in_t[i], static_cast<int64_t>(in[i].size())});
    for (size_t i = 0; i < out.size(); ++i)
      a.out.push_back({out[i].data(), &out_t[i], static_cast<int64_t>(out[i].size())});
    return kernel(a);
  }
};
TensorType f32(Shape s) { return {std::move(s), DType::f32}; }

}  // namespace

TEST_CASE("reduce_sum and reduce_mean over a contiguous and a strided axis") {
  const int64_t R = 37, C = 203;  // x [R, C]
  std::vector<float> x = randoms(R * C, 5);
  for (int axis : {1, 0}) {
    for (OpCode code : {OpCode::ReduceSum, OpCode::ReduceMean}) {
      CAPTURE(axis);
      int64_t outs = axis == 1 ? R : C, n = axis == 1 ? C : R;
      Op op({f32({R, C})}, {f32({outs})});
      op.attrs.set_i("axis", axis);
      op.in[0] = x;
      REQUIRE(op.run(code, k_reduce).ok());
      for (int64_t o = 0; o < outs; ++o) {
        double ref = 0, abs_sum = 0;
        std::vector<float> row(n);
        for (int64_t k = 0; k < n; ++k) {
          row[k] = axis == 1 ? x[o * C + k] : x[k * C + o];
          ref += row[k], abs_sum += std::fabs(row[k]);
        }
        float div = code == OpCode::ReduceMean ? static_cast<float>(n) : 1.f;
        // The contiguous axis sums in the lane order; a strided one in k order.
        float order = 0.f;
        if (axis == 1) order = model_sum(row);
        else for (float v : row) order += v;
        CHECK(std::bit_cast<uint32_t>(op.out[0][o]) == std::bit_cast<uint32_t>(order / div));
        CHECK(std::fabs(op.out[0][o] - ref / div) <= (n * kU * abs_sum + kU * std::fabs(ref)) / div);
      }
    }
  }
}

TEST_CASE("softmax, log_softmax and softmax cross-entropy against FP64") {
  const int64_t R = 9, C = 1000;  // a vocabulary-sized row
  std::vector<float> z = randoms(R * C, 6, -8.f, 8.f);
  std::vector<double> lse(R);
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max<double>(m, z[r * C + j]);
    for (int64_t j = 0; j < C; ++j) s += std::exp(z[r * C + j] - m);
    lse[r] = m + std::log(s);
  }
  for (OpCode code : {OpCode::Softmax, OpCode::LogSoftmax}) {
    Op op({f32({R, C})}, {f32({R, C})});
    op.in[0] = z;
    REQUIRE(op.run(code, k_reduce).ok());
    for (int64_t i = 0; i < R * C; ++i) {
      double ref = z[i] - lse[i / C];
      // Probabilities below e^-87 (about FLT_MIN) come out as 0.
      if (code == OpCode::Softmax) CHECK(std::fabs(op.out[0][i] - std::exp(ref)) <= 1e-5 * std::exp(ref) + 2e-38);
      else CHECK(std::fabs(op.out[0][i] - ref) <= 2e-6 * (std::fabs(z[i]) + std::fabs(lse[i / C])));
    }
  }
  Op xent({f32({R, C}), {{R}, DType::i32}}, {f32({1})});
  xent.in[0] = z;
  double loss = 0;
  for (int64_t r = 0; r < R; ++r) {
    int32_t label = static_cast<int32_t>((r * 97) % C);
    xent.in[1][r] = std::bit_cast<float>(label);
    loss += (lse[r] - z[r * C + label]) / R;
  }
  REQUIRE(xent.run(OpCode::SoftmaxXent, k_classifier).ok());
  CHECK(std::fabs(xent.out[0][0] - loss) <= 1e-5 * std::fabs(loss) + 1e-6);
}

namespace {

// softmax_cross_entropy and its gradient over logits z of R rows of C classes
// against FP64: dz = dloss * (softmax(z) - onehot) / R.
void check_xent_against_fp64(int64_t R, int64_t C, const std::vector<float>& z) {
  CAPTURE(R);
  CAPTURE(C);
  const float dloss = 0.75f;
  Op xent({f32({R, C}), {{R}, DType::i32}}, {f32({1})});
  Op grad({f32({R, C}), {{R}, DType::i32}, f32({1})}, {f32({R, C})});
  xent.in[0] = grad.in[0] = z;
  grad.in[2][0] = dloss;
  double loss = 0;
  std::vector<double> ref(R * C);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t label = static_cast<int32_t>((r * 7) % C);
    xent.in[1][r] = grad.in[1][r] = std::bit_cast<float>(label);
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max<double>(m, z[r * C + j]);
    for (int64_t j = 0; j < C; ++j) s += std::exp(z[r * C + j] - m);
    loss += (m + std::log(s) - z[r * C + label]) / R;
    for (int64_t j = 0; j < C; ++j) ref[r * C + j] = dloss * (std::exp(z[r * C + j] - m) / s - (j == label)) / R;
  }
  REQUIRE(xent.run(OpCode::SoftmaxXent, k_classifier).ok());
  CHECK(std::fabs(xent.out[0][0] - loss) <= 1e-5 * std::fabs(loss) + 1e-6);
  REQUIRE(grad.run(OpCode::SoftmaxXentGrad, k_classifier).ok());
  int64_t off = 0;
  for (int64_t i = 0; i < R * C; ++i) off += !(std::fabs(grad.out[0][i] - ref[i]) <= 1e-6 * dloss / R + 1e-5 * std::fabs(ref[i]));
  CHECK(off == 0);
}

}  // namespace

TEST_CASE("softmax cross-entropy and its gradient on a 10-class head against FP64") {
  // A classifier's short rows run 16 at a time (rows_logsumexp); 37 rows leave
  // 5 to the row-by-row path; the gradient is one flat loop.
  check_xent_against_fp64(37, 10, randoms(37 * 10, 8, -6.f, 6.f));
}

TEST_CASE("softmax cross-entropy and its gradient on vocabulary-wide rows against FP64") {
  // Rows of kWideRow (256) classes or more: log-sum-exps and the gradient a row
  // at a time, rows across the threads. Logits as a language model's head gives
  // them (randoms' thousandfold spread would put a row's lse where a float's
  // ulp exceeds the other classes' share, beyond this bound for any order).
  for (int64_t c : {256, 5000}) {
    std::mt19937 rng(static_cast<uint32_t>(c));
    std::vector<float> z(static_cast<size_t>(21 * c));
    for (float& v : z) v = std::uniform_real_distribution<float>(-8.f, 8.f)(rng);
    check_xent_against_fp64(21, c, z);
  }
}

TEST_CASE("softmax and reduce_max along a strided axis equal those of the transposed rows") {
  const int64_t R = 33, C = 7;  // x [R, C] along axis 0; xt [C, R] along its last axis
  std::vector<float> x = randoms(R * C, 11, -5.f, 5.f), xt(R * C);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) xt[c * R + r] = x[r * C + c];
  for (OpCode code : {OpCode::Softmax, OpCode::LogSoftmax, OpCode::ReduceMax}) {
    bool reduce = code == OpCode::ReduceMax;
    Op strided({f32({R, C})}, {f32(reduce ? Shape{C} : Shape{R, C})});
    Op rows({f32({C, R})}, {f32(reduce ? Shape{C} : Shape{C, R})});
    strided.attrs.set_i("axis", 0);
    rows.attrs.set_i("axis", 1);
    strided.in[0] = x, rows.in[0] = xt;
    REQUIRE(strided.run(code, k_reduce).ok());
    REQUIRE(rows.run(code, k_reduce).ok());
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < (reduce ? 1 : R); ++r) {
        float a = reduce ? strided.out[0][c] : strided.out[0][r * C + c], b = reduce ? rows.out[0][c] : rows.out[0][c * R + r];
        CHECK(std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b));
      }
  }
}

TEST_CASE("layer_norm and rms_norm forward against FP64") {
  const int64_t R = 13, D = 771;
  std::vector<float> x = randoms(R * D, 7), g = randoms(D, 8), b = randoms(D, 9);
  for (float& v : x) v += 3.f;  // an offset the mean must remove
  for (bool layer : {true, false}) {
    CAPTURE(layer);
    Op op({f32({R, D}), f32({D})}, {f32({R, D}), f32({R})});
    op.in[0] = x, op.in[1] = g;
    if (layer) op.in.push_back(b), op.in_t.push_back(f32({D})), op.out.emplace_back(R), op.out_t.push_back(f32({R}));
    op.attrs.set_f("eps", 1e-5);
    REQUIRE(op.run(layer ? OpCode::LayerNorm : OpCode::RmsNorm, k_norm).ok());
    for (int64_t r = 0; r < R; ++r) {
      double m = 0, v = 0;
      if (layer) {
        for (int64_t c = 0; c < D; ++c) m += x[r * D + c];
        m /= D;
      }
      for (int64_t c = 0; c < D; ++c) v += (x[r * D + c] - m) * (x[r * D + c] - m);
      double rs = 1 / std::sqrt(v / D + 1e-5);
      for (int64_t c = 0; c < D; ++c) {
        double ref = (x[r * D + c] - m) * rs * g[c] + (layer ? b[c] : 0.);
        // f32 mean, variance and the products: a few hundred ulps of the row's scale.
        CHECK(std::fabs(op.out[0][r * D + c] - ref) <= 1e-4 * (std::fabs(g[c]) + 1.));
      }
    }
  }
}

TEST_CASE("row reductions: results do not depend on the thread count") {
  const int64_t R = 64, C = 4096;
  std::vector<float> x = randoms(R * C, 10);
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    Op op({f32({R, C})}, {f32({R, C})});
    op.in[0] = x;
    REQUIRE(op.run(OpCode::Softmax, k_reduce).ok());
    outs.push_back(op.out[0]);
  }
  set_num_threads(0);
  CHECK(outs[0] == outs[1]);
}

TEST_CASE("row_logsumexp and the wide cross-entropy gradient: the library's bits equal this file's baseline build") {
  // On x86-64 the library runs its AVX2 or AVX-512 copy of these loops
  // (SGRT_X86_CLONES); this file is built for the baseline. Same expressions,
  // the same lane order, no contraction: the same bits.
  auto lse_here = [](const float* x, int64_t n) {
    const float m = *std::max_element(x, x + n);
    return m + std::log(lane_sum(n, [&](int64_t i) { return fast_exp(x[i] - m); }));
  };
  for (int64_t n : {17, 1000, 4099}) {
    CAPTURE(n);
    std::vector<float> x = randoms(n, 90 + n, -30.f, 30.f);
    CHECK(std::bit_cast<uint32_t>(row_logsumexp(x.data(), n)) == std::bit_cast<uint32_t>(lse_here(x.data(), n)));
  }
  const int64_t R = 6, C = 1000;
  const float dloss = 0.5f;
  std::vector<float> z(R * C);
  std::mt19937 rng(5);
  for (float& v : z) v = std::uniform_real_distribution<float>(-8.f, 8.f)(rng);
  Op grad({f32({R, C}), {{R}, DType::i32}, f32({1})}, {f32({R, C})});
  grad.in[0] = z;
  grad.in[2][0] = dloss;
  for (int64_t r = 0; r < R; ++r) grad.in[1][r] = std::bit_cast<float>(static_cast<int32_t>(r * 151 % C));
  REQUIRE(grad.run(OpCode::SoftmaxXentGrad, k_classifier).ok());
  const float g = dloss / static_cast<float>(R);
  int64_t differ = 0;
  for (int64_t r = 0; r < R; ++r) {
    const float l = lse_here(z.data() + r * C, C);
    for (int64_t j = 0; j < C; ++j) {
      const bool label = j == r * 151 % C;
      const float want = label ? g * (fast_exp(z[r * C + j] - l) - 1.f) : g * fast_exp(z[r * C + j] - l);
      differ += std::bit_cast<uint32_t>(grad.out[0][r * C + j]) != std::bit_cast<uint32_t>(want);
    }
  }
  CHECK(differ == 0);
}
