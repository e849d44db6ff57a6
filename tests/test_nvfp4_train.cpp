// nvfp4-train (NVIDIA's NVFP4 pre-training recipe) against independent
// references: E2M1 rounding from its value table (nearest, ties to the even
// code), E4M3 from the CUDA toolkit's host conversions, the Hadamard transform
// as an explicit 16x16 matrix product in double, and the NVFP4 definition
// (docs/numerics.md) written here with plain loops. Also the recipe's plan: which
// GEMM operand gets which granularity, transform and rounding; that forward and
// data gradient read the same quantized weight; that stochastic rounding is
// unbiased, reproducible (resumed runs too) and changes with the step; and a
// short training run.
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <random>

#include "backend_compare.h"
#include "sgrt/checkpoint.h"
#include "cpu/quantize.h"
#include "fashion.h"
#include "formats/hadamard.h"
#include "harness.h"
#include "sgrt/quant.h"
#include "test_vulkan_support.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

constexpr float kE2M1Values[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
constexpr int64_t kB = 16;

// E2M1 value of code c (sign in bit 3).
float e2m1_value(uint32_t c) { return (c & 8u ? -1.f : 1.f) * kE2M1Values[c & 7u]; }

// OCP E2M1 of x: the nearest table value, ties to the even code, saturating at 6.
float e2m1_rne_value(float x) {
  const float a = std::fabs(x);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kE2M1Values[c]), db = std::fabs(a - kE2M1Values[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return std::copysign(kE2M1Values[best], x);
}

// Element i of packed E2M1 codes (low nibble first).
uint32_t nibble(const std::vector<uint8_t>& q, int64_t i) { return (q[i / 2] >> (4 * (i & 1))) & 0xFu; }

// The transform's matrix: M[i][j] = s_i (-1)^popcount(i & j) / 4.
double hadamard_entry(int i, int j) {
  const double s = (fmt::kHadamardSigns >> i) & 1u ? -1.0 : 1.0;
  return s * (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) / 4.0;
}

// x [rows, cols] with each full 16-block of a row multiplied by M, in double.
std::vector<double> hadamard_ref(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 + kB <= cols; c0 += kB)
      for (int j = 0; j < kB; ++j) {
        double v = 0;
        for (int i = 0; i < kB; ++i) v += x[r * cols + c0 + i] * hadamard_entry(i, j);
        y[r * cols + c0 + j] = v;
      }
  return y;
}

double rel_rms(const std::vector<double>& a, const std::vector<double>& ref) {
  double e = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (a[i] - ref[i]) * (a[i] - ref[i]);
    n += ref[i] * ref[i];
  }
  return std::sqrt(e / n);
}

// Three linears: fc1 and fc2 quantized (fc2 also in its data gradient), the
// head kept in f32 (15% of 3 layers, at least one). A batch of 160 (ten
// 16-blocks) as the weight gradients' K.
const char* kMlp = R"(
  local sg = require "sg"
  local x = sg.input("x", {160, 300})
  local y = sg.input("y", {160}, "i32")
  local h = sg.nn.linear(x, 136, { name = "fc1" }):relu()
  local h2 = sg.nn.linear(h, 64, { name = "fc2" }):relu()
  local logits = sg.nn.linear(h2, 10, { name = "head" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.optimizer.sgd{ lr = 0.1 }
  sg.recipe("nvfp4-train")
)";

// The values a quantized E2M1 tensor stands for: codes x block scale x tensor scale.
std::vector<double> dequantize(const Session& s, const OpInfoLoaded& q_op) {
  const int id = q_op.out[0];
  const QuantGranularity g = q_op.quant[0].granularity;
  const int64_t cols = s.model().tensors()[id].type.shape.back();
  const int64_t n = numel(s.model().tensors()[id].type.shape), rows = n / cols, nb = (cols + kB - 1) / kB;
  const std::vector<uint8_t> q = test::bytes_of(s, id), sc = test::bytes_of(s, q_op.out[1]);
  const float ts = test::read_as<float>(s, q_op.out[2])[kStateTensorScale];
  std::vector<double> v(n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t sr = g == QuantGranularity::nvfp4_16x16 ? r / kB : r;
      v[r * cols + c] = e2m1_value(nibble(q, r * cols + c)) * fmt::e4m3_decode(sc[sr * nb + c / kB]) * static_cast<double>(ts);
    }
  return v;
}

// A fixed batch for kMlp: 160 normal inputs of 300 features, labels i mod 10.
void feed_batch(Session& s) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(160 * 300);
  for (float& v : x) v = nd(rng);
  test::write_vec(s, "x", x);
  std::vector<int32_t> labels(160);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  test::write_vec(s, "y", labels);
}

}  // namespace

#ifdef SGRT_HAVE_CUDA_ORACLE
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {
uint8_t e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
float e4m3_value(uint8_t c) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))); }
}  // namespace

TEST_CASE("nvfp4_16x16: scales and codes against the definition; x and x^T quantize to the same values") {
  const int64_t rows = 40, cols = 56;  // partial blocks along both
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(rows * cols), xt(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] = (r >= 16 && r < 32 && c >= 32 && c < 48) ? 0.f : nd(rng) * std::pow(10.f, (r / 16 + c / 16) % 3 - 1.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float ts = amax / (6.f * 256.f);
  auto quantize = [](const std::vector<float>& v, int64_t r, int64_t c, std::vector<uint8_t>* q, std::vector<uint8_t>* s) {
    q->assign((r * c + 1) / 2, 0);
    s->assign(((r + kB - 1) / kB) * ((c + kB - 1) / kB), 0);
    float t = 0;
    const cpu::QuantStats st = cpu::quantize_nvfp4_16x16(v.data(), r, c, {DType::e2m1}, q->data(), s->data(), &t);
    REQUIRE(st.error == nullptr);
    return t;
  };
  std::vector<uint8_t> q, s, qt, stt;
  CHECK(quantize(x, rows, cols, &q, &s) == ts);
  CHECK(quantize(xt, cols, rows, &qt, &stt) == ts);
  const int64_t nbr = (rows + kB - 1) / kB, nbc = (cols + kB - 1) / kB;
  int64_t scale_errors = 0, code_errors = 0, transposed_errors = 0;
  for (int64_t br = 0; br < nbr; ++br)
    for (int64_t bc = 0; bc < nbc; ++bc) {
      float bmax = 0;
      for (int64_t r = br * kB; r < std::min(rows, br * kB + kB); ++r)
        for (int64_t c = bc * kB; c < std::min(cols, bc * kB + kB); ++c) bmax = std::max(bmax, std::fabs(x[r * cols + c]));
      const uint8_t code = e4m3(bmax / (6.f * ts));  // the block's amax onto E2M1's 6
      scale_errors += s[br * nbc + bc] != code;
      transposed_errors += stt[bc * nbr + br] != code;
      const float d = e4m3_value(code) * ts, mult = d > 0 ? 1.f / d : 0.f;
      for (int64_t r = br * kB; r < std::min(rows, br * kB + kB); ++r)
        for (int64_t c = bc * kB; c < std::min(cols, bc * kB + kB); ++c) {
          const float want = e2m1_rne_value(x[r * cols + c] * mult);
          code_errors += e2m1_value(nibble(q, r * cols + c)) != want;
          transposed_errors += e2m1_value(nibble(qt, c * rows + r)) != want;
        }
    }
  CHECK(scale_errors == 0);
  CHECK(code_errors == 0);
  CHECK(transposed_errors == 0);
  CHECK(s[1 * nbc + 2] == 0);  // the all-zero block
}

TEST_CASE("nvfp4-train: one training step's plan and values, GEMM by GEMM") {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::split_programs(&g);
  std::shared_ptr<const Model> m = test::load_graph(g);
  auto s = test::open_session(m, "cpu", 3);
  feed_batch(*s);

  struct Source {
    std::vector<float> x;  // the f32 input as the quantize saw it
    int64_t rows = 0, cols = 0;
    std::vector<double> deq;  // what the codes stand for
    ScaleSpec spec;
    bool weight = false, grad = false;
  };
  std::map<int, Source> src;  // by codes tensor
  std::map<int, bool> is_weight;  // transposed copies inherit their source's
  auto weight_of = [&](int id) { return is_weight.count(id) ? is_weight[id] : m->tensors()[id].role == Role::param; };
  int fwd = 0, dgrad = 0, wgrad = 0;
  std::vector<double> w_fwd, w_bwd;  // fc2.w as its forward and its data-gradient GEMM read it
  for (size_t i = 0;; ++i) {
    const int p = m->find_program("train_step#" + std::to_string(i));
    if (p < 0) break;
    const OpInfoLoaded& op = m->programs()[p].ops[0];
    if (op.code == OpCode::Transpose || op.code == OpCode::Reshape) is_weight[op.out[0]] = weight_of(op.in[0]);
    test::run(*s, "train_step#" + std::to_string(i));
    if (op.code == OpCode::Quantize) {
      Source& q = src[op.out[0]];
      q.x = test::read_as<float>(*s, op.in[0]);
      q.cols = m->tensors()[op.out[0]].type.shape.back();
      q.rows = static_cast<int64_t>(q.x.size()) / q.cols;
      q.spec = op.quant[0];
      q.weight = weight_of(op.in[0]);
      q.grad = m->tensors()[op.out[0]].role == Role::grad;
      q.deq = dequantize(*s, op);
    }
    if (op.code != OpCode::QMatMul) continue;
    INFO("qmatmul at " << op.loc);
    REQUIRE(op.attrs.i("trans_a") == 0);  // K-major on both sides
    REQUIRE(op.attrs.i("trans_b") == 1);
    const Source &a = src.at(op.in[0]), &b = src.at(op.in[3]);
    const bool has_w = a.weight || b.weight, has_g = a.grad || b.grad;
    for (const Source* o : {&a, &b}) {
      CHECK(o->spec.granularity == (o->weight ? QuantGranularity::nvfp4_16x16 : QuantGranularity::nvfp4));
      CHECK(o->spec.stochastic == o->grad);        // gradients only
      CHECK(o->spec.hadamard == (!has_w));         // the weight gradient's operands only
    }
    if (has_w && !has_g) ++fwd;
    if (has_w && has_g) ++dgrad;
    if (has_w && b.weight && b.rows == 64 && b.cols == 136) w_fwd = b.deq;  // fc2.w [64, 136]
    if (has_w && b.weight && b.rows == 136 && b.cols == 64) w_bwd = b.deq;  // its transpose
    const int64_t M = a.rows, N = b.rows, K = a.cols;
    REQUIRE(b.cols == K);
    const std::vector<float> y = test::read_as<float>(*s, op.out[0]);
    // The GEMM is the product of what the codes stand for (f32 sums of it).
    double worst = 0, err = 0, norm = 0;
    for (int64_t i2 = 0; i2 < M; ++i2)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0, exact = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += a.deq[i2 * K + k] * b.deq[n * K + k];
          mag += std::fabs(a.deq[i2 * K + k] * b.deq[n * K + k]);
          exact += static_cast<double>(a.x[i2 * K + k]) * b.x[n * K + k];
        }
        worst = std::max(worst, std::fabs(y[i2 * N + n] - ref) / (mag + 1e-30));
        err += (y[i2 * N + n] - exact) * (y[i2 * N + n] - exact);
        norm += exact * exact;
      }
    CHECK(worst < 1e-5);
    // ... and close to the f32 product of the untransformed sources: NVFP4's
    // error, not the transform's (a GEMM with one side transformed is unrelated).
    MESSAGE(std::string(has_w ? has_g ? "data gradient" : "forward" : "weight gradient") << " (K " << K << "): rel. error to the f32 product "
            << std::sqrt(err / norm));
    CHECK(std::sqrt(err / norm) < 0.35);
    if (has_w) continue;
    ++wgrad;
    CHECK(K == 160);  // along the batch
    for (const Source* o : {&a, &b}) {
      // The codes stand for the transformed source, not the source itself.
      std::vector<double> plain(o->x.begin(), o->x.end());
      const double to_rht = rel_rms(o->deq, hadamard_ref(o->x, o->rows, o->cols)), to_plain = rel_rms(o->deq, plain);
      MESSAGE("weight-gradient operand: rel. error to the transformed source " << to_rht << ", to the source " << to_plain);
      CHECK(to_rht < 0.25);
      CHECK(to_plain > 0.5);
    }
  }
  CHECK(fwd == 2);    // fc1, fc2 (the head stays f32)
  CHECK(dgrad == 1);  // fc2's (fc1's input needs none)
  CHECK(wgrad == 2);
  REQUIRE(w_fwd.size() == 64 * 136);
  REQUIRE(w_bwd.size() == 64 * 136);
  int64_t mismatches = 0;
  for (int64_t o = 0; o < 64; ++o)
    for (int64_t k = 0; k < 136; ++k) mismatches += w_fwd[o * 136 + k] != w_bwd[k * 64 + o];
  CHECK(mismatches == 0);  // forward and data gradient: the same quantized weight
}

TEST_CASE("stochastic rounding: unbiased in the mean, nearest-even biased, within 5 standard errors") {
  // A block [6, 4 x 7, 2.3 x 8]: four over six keeps the scale that maps 6 onto
  // E2M1's 6 (4 and 6 lie on its grid; mapped to 4, 4 and 2.3 err more), so 2.3
  // sits between the codes 2 and 3 (up with probability 0.3).
  std::vector<float> x(16, 2.3f);
  x[0] = 6.f;
  std::fill(x.begin() + 1, x.begin() + 8, 4.f);
  constexpr int kFirst = 8;  // the 2.3s
  std::vector<uint8_t> q(8), sc(1);
  double sum = 0;
  int64_t count = 0, ups = 0;
  const int seeds = 2000;
  for (int seed = 0; seed < seeds; ++seed) {
    float ts = 0;
    cpu::QuantParams p{DType::e2m1};
    p.stochastic = true;
    p.seed = static_cast<uint32_t>(seed);
    REQUIRE(cpu::quantize_nvfp4(x.data(), 1, 16, p, q.data(), sc.data(), &ts).error == nullptr);
    const double unit = e4m3_value(sc[0]) * static_cast<double>(ts);
    REQUIRE(6.0 / unit == doctest::Approx(6.0).epsilon(0.07));  // "six" (E4M3's rounding of the scale)
    for (int i = kFirst; i < 16; ++i) {
      const float v = e2m1_value(nibble(q, i));
      REQUIRE((v == 2.f || v == 3.f));
      ups += v == 3.f;
      sum += v * unit;
      ++count;
    }
  }
  const double mean = sum / count, se = std::sqrt(0.3 * 0.7 / count);  // in units of the 1.0 step
  MESSAGE("mean of " << count << " stochastic encodes of 2.3: " << mean << " (standard error " << se << ")");
  CHECK(std::fabs(mean - 2.3) < 5 * se + 1e-3);  // + the scale's E4M3 rounding
  CHECK(std::fabs(static_cast<double>(ups) / count - 0.3) < 5 * se);
  float ts = 0;
  REQUIRE(cpu::quantize_nvfp4(x.data(), 1, 16, {DType::e2m1}, q.data(), sc.data(), &ts).error == nullptr);
  for (int i = kFirst; i < 16; ++i) CHECK(e2m1_value(nibble(q, i)) == 2.f);  // nearest: always down
}
#else
TEST_CASE("CUDA oracle present") {
  FAIL("cuda_fp8.h not found: the nvfp4-train tests need the CUDA toolkit headers (SGRT_CUDA_INCLUDE)");
}
#endif

TEST_CASE("the Hadamard transform: the definition's matrix, orthogonal, a GEMM's product unchanged") {
  const int64_t rows = 6, cols = 100;  // six full 16-blocks and a tail of 4
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> a(rows * cols), b(9 * cols), ha(a.size()), hb(b.size());
  for (float& v : a) v = nd(rng);
  for (float& v : b) v = nd(rng) * 1e-3f;
  cpu::hadamard_rows(a.data(), rows, cols, ha.data());
  cpu::hadamard_rows(b.data(), 9, cols, hb.data());
  const std::vector<double> want = hadamard_ref(a, rows, cols);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(ha[i] - want[i]));
  CHECK(worst < 1e-5);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 96; c < cols; ++c) CHECK(ha[r * cols + c] == a[r * cols + c]);  // the tail as is
  // M M^T = I exactly: the transform of e_i is row i of M, every entry ±1/4.
  std::vector<float> eye(kB * kB, 0.f), m(kB * kB);
  for (int i = 0; i < kB; ++i) eye[i * kB + i] = 1.f;
  cpu::hadamard_rows(eye.data(), kB, kB, m.data());
  for (int i = 0; i < kB; ++i)
    for (int j = 0; j < kB; ++j) {
      CHECK(std::fabs(m[i * kB + j]) == 0.25f);
      double dot = 0;
      for (int k = 0; k < kB; ++k) dot += m[i * kB + k] * m[j * kB + k];
      CHECK(dot == (i == j ? 1.0 : 0.0));
    }
  // a b^T, transformed or not: the same to f32 rounding.
  double err = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < 9; ++j) {
      double plain = 0, rotated = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        plain += static_cast<double>(a[i * cols + k]) * b[j * cols + k];
        rotated += static_cast<double>(ha[i * cols + k]) * hb[j * cols + k];
        mag += std::fabs(static_cast<double>(a[i * cols + k]) * b[j * cols + k]);
      }
      err = std::max(err, std::fabs(plain - rotated) / mag);
    }
  CHECK(err < 1e-6);
}

TEST_CASE("nvfp4-train: stochastic rounding in the graph is unbiased, reproducible and new every step") {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  test::split_programs(&g);
  std::shared_ptr<const Model> m = test::load_graph(g);
  // The data gradient's incoming gradient: stochastic, no transform.
  int program = -1;
  for (size_t i = 0; program < 0; ++i) {
    const int p = m->find_program("train_step#" + std::to_string(i));
    REQUIRE(p >= 0);
    const OpInfoLoaded& op = m->programs()[p].ops[0];
    if (op.code == OpCode::Quantize && op.quant[0].stochastic && !op.quant[0].hadamard) program = static_cast<int>(i);
  }
  auto prepare = [&](Session& s) {
    feed_batch(s);
    for (int i = 0; i < program; ++i) test::run(s, "train_step#" + std::to_string(i));
  };
  auto s1 = test::open_session(m, "cpu", 3), s2 = test::open_session(m, "cpu", 3);
  prepare(*s1);
  prepare(*s2);
  const OpInfoLoaded& op = m->programs()[m->find_program("train_step#" + std::to_string(program))].ops[0];
  const std::string name = "train_step#" + std::to_string(program);
  const std::vector<float> xs = test::read_as<float>(*s1, op.in[0]);
  const std::vector<double> ref(xs.begin(), xs.end());
  std::vector<double> mean(xs.size(), 0.0);
  const int runs = 64;
  double single = 0;
  std::vector<uint8_t> prev;
  for (int r = 0; r < runs; ++r) {  // the same input encoded as at steps 1, 2, ...
    test::run(*s1, name);
    test::run(*s2, name);
    const std::vector<uint8_t> codes = test::bytes_of(*s1, op.out[0]);
    CHECK(codes == test::bytes_of(*s2, op.out[0]));  // the same random words in both sessions
    if (r > 0) CHECK(codes != prev);                 // and new ones each step
    prev = codes;
    const std::vector<double> d = dequantize(*s1, op);
    if (r == 0) single = rel_rms(d, ref);
    for (size_t i = 0; i < d.size(); ++i) mean[i] += d[i] / runs;
  }
  const double averaged = rel_rms(mean, ref);
  MESSAGE("relative RMS error: one stochastic encode " << single << ", the mean of " << runs << ": " << averaged);
  // Unbiased: the error of the mean falls like 1/sqrt(runs) (1/8 here), up to
  // the flushed elements' bias below half the smallest step (a few %).
  CHECK(single > 0.1);
  CHECK(averaged < single / 4);
}

TEST_CASE("nvfp4-train: the last 15% of the linear layers stay f32; hadamard and stochastic switch off") {
  auto quantized = [](const std::string& opts, const std::string& recipe = "nvfp4-train", int layers = 8) {
    std::string lua = "local sg = require 'sg'\nlocal h = sg.input('x', {32, 48})\nlocal y = sg.input('y', {32}, 'i32')\n";
    for (int i = 1; i < layers; ++i) lua += "h = sg.nn.linear(h, 48, { name = 'fc" + std::to_string(i) + "' }):relu()\n";
    lua += "sg.loss(sg.softmax_cross_entropy(sg.nn.linear(h, 10, { name = 'head' }), y))\nsg.optimizer.sgd{ lr = 0.1 }\n";
    lua += "sg.recipe('" + recipe + "', {" + opts + "})\n";
    compiler::Graph g;
    Status st = test::compile_graph(lua, &g);
    std::map<std::string, int> r;
    if (!st.ok()) {
      r[st.message()] = -1;
      return r;
    }
    for (const compiler::Tensor& t : g.tensors) {
      if (t.scale.mode == ScaleMode::none) continue;
      r["hadamard"] += t.scale.hadamard;
      r["stochastic"] += t.scale.stochastic;
    }
    for (int i = 1; i < layers; ++i) r["fc" + std::to_string(i)] = g.find_tensor("fc" + std::to_string(i) + ".w.e2m1") >= 0;
    r["head"] = g.find_tensor("head.w.e2m1") >= 0;
    return r;
  };
  std::map<std::string, int> on = quantized("");
  for (int i = 1; i <= 6; ++i) CHECK(on["fc" + std::to_string(i)] == 1);
  CHECK(on["fc7"] == 0);  // 8 linears: ceil(1.2) = 2 stay f32
  CHECK(on["head"] == 0);
  CHECK(on["hadamard"] == 12);    // 6 weight gradients x 2 operands
  CHECK(on["stochastic"] == 11);  // 5 data gradients + 6 weight gradients
  std::map<std::string, int> no_rht = quantized("hadamard = false"), no_sr = quantized("stochastic = false");
  CHECK(no_rht["hadamard"] == 0);
  CHECK(no_rht["stochastic"] == 11);
  CHECK(no_sr["hadamard"] == 12);
  CHECK(no_sr["stochastic"] == 0);
  std::map<std::string, int> bad = quantized("hadamard = false", "nvfp4");
  REQUIRE(bad.size() == 1);
  CHECK(bad.begin()->first.find("recipe 'nvfp4' has no Hadamard transform for 'hadamard' to switch") != std::string::npos);
  bad = quantized("stochastic = 1");
  REQUIRE(bad.size() == 1);
  CHECK(bad.begin()->first.find("stochastic must be true or false") != std::string::npos);
}

TEST_CASE("nvfp4-train trains the Fashion-MNIST MLP within a point of fp32, reproducibly") {
  const float ref = test::mlp_recipe_accuracy("fp32"), nt = test::mlp_recipe_accuracy("nvfp4-train"),
              again = test::mlp_recipe_accuracy("nvfp4-train");
  MESSAGE("300 steps, batch 100: fp32 " << ref << ", nvfp4-train " << nt);
  CHECK(ref > 0.80f);
  CHECK(nt > ref - 0.01f);
  CHECK(nt == again);  // the same random words: the same run
}

TEST_CASE("the Vulkan backend refuses nvfp4-train when the model is loaded, naming the recipe") {
  if (!test::vulkan_device_present()) return;
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend("vulkan", &be).ok());
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kMlp, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Session> s;
  st = Session::create(m, std::move(be), &s);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("recipe nvfp4-train") != std::string::npos);
  CHECK(st.message().find("not implemented on Vulkan") != std::string::npos);
}

TEST_CASE("nvfp4-train: a run resumed from a checkpoint goes on with the same random words, bit for bit") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kMlp, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto steps = [](Session& s, int n) {
    for (int i = 0; i < n; ++i) test::run(s, "train_step");
  };
  auto straight = test::open_session(m, "cpu", 3);
  feed_batch(*straight);
  steps(*straight, 4);
  test::TempDir dir;
  auto first = test::open_session(m, "cpu", 3);
  feed_batch(*first);
  steps(*first, 2);
  REQUIRE(save_checkpoint(*first, dir.path + "/ck", 2).ok());
  // resumed: the checkpoint as saved; restarted: the same, with every stochastic
  // quantization's count of encodes back at 0 (the random words of step 1 again).
  std::vector<float> restarted_w;
  for (bool restart : {false, true}) {
    auto s = test::open_session(m, "cpu", 9);
    int64_t step = 0;
    REQUIRE(load_checkpoint(*s, dir.path + "/ck", &step).ok());
    CHECK(step == 2);
    if (restart)
      for (const OpInfoLoaded& op : m->programs()[m->find_program("train_step")].ops)
        if (op.code == OpCode::Quantize && op.quant[0].stochastic) {
          std::vector<float> state = test::read_as<float>(*s, op.out[2]);
          CHECK(state[kStateHistoryPos] == 2.f);
          state[kStateHistoryPos] = 0.f;
          REQUIRE(s->write(op.out[2], state.data(), state.size() * sizeof(float)).ok());
        }
    feed_batch(*s);
    steps(*s, 2);
    for (const char* w : {"fc1.w", "fc2.w", "head.w"}) {
      INFO(w << (restart ? ", restarted" : ", resumed"));
      if (!restart) CHECK(test::read_f32(*s, w) == test::read_f32(*straight, w));
    }
    if (restart) restarted_w = test::read_f32(*s, "fc1.w");
  }
  CHECK(restarted_w != test::read_f32(*straight, "fc1.w"));  // the count is what made them equal
}
