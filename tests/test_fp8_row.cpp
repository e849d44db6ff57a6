// The fp8-row recipe (torchao's rowwise FP8) against an independent reference:
// the CUDA toolkit's host E4M3 conversions and NUMERICS' scale rule
// e = floor(log2(448 / amax)) per outer index of each GEMM operand, amax 0 keeps
// the previous exponent. One training step of a small MLP runs op by op; every
// quantize's scales and codes and every qmatmul's product (forward, data
// gradient, weight gradient) must be what the test computes itself. An all-zero
// row and a row with a huge outlier are in the input: the outlier must leave the
// other rows' products as they are (per-tensor fp8 flushes them).
#include <cmath>
#include <map>
#include <random>

#include "backend_compare.h"
#include "harness.h"
#include "sgrt/quant.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

constexpr double kE4M3Max = 448;  // NUMERICS.md §1

// The MLP with `recipe_call` (sg.recipe's) last.
std::string mlp(const std::string& recipe_call = "sg.recipe(cfg.recipe)") {
  return R"(
  local sg = require "sg"
  local cfg = sg.config{ recipe = "fp8-row", bias = true }
  local x = sg.input("x", {6, 20})
  local y = sg.input("y", {6}, "i32")
  local h = sg.nn.linear(x, 12, { name = "fc1", bias = cfg.bias })
  sg.output("h", h)
  local logits = sg.nn.linear(h:relu(), 5, { name = "fc2" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.optimizer.sgd{ lr = 0.1 }
)" + recipe_call + "\n";
}

constexpr int kZeroRow = 2, kOutlierRow = 4, kOutlierCol = 7;

// x [6, 20] ~ N(0, 1) with row 2 all zero and x[4, 7] = `outlier`; labels 0..4.
void write_inputs(Session& s, float outlier) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(6 * 20);
  for (float& v : x) v = n(rng);
  std::fill(x.begin() + kZeroRow * 20, x.begin() + (kZeroRow + 1) * 20, 0.f);
  x[kOutlierRow * 20 + kOutlierCol] = outlier;
  test::write_vec(s, "x", x);
  test::write_vec(s, "y", std::vector<int32_t>{0, 1, 2, 3, 4, 0});
}

std::shared_ptr<const Model> compile(const std::map<std::string, std::string>& set, compiler::Graph* g,
                                     bool split = false) {
  Status st = test::compile_graph(mlp(), g, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  if (split) test::split_programs(g);
  return test::load_graph(*g);
}

}  // namespace

#ifdef SGRT_HAVE_CUDA_ORACLE
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace {

uint8_t e4m3(double x) { return __nv_cvt_float_to_fp8(static_cast<float>(x), __NV_SATFINITE, __NV_E4M3); }
double e4m3_value(uint8_t c) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))); }

// One qmatmul operand as the test sees it: the f32 source in its stored [rows,
// cols] layout, and whether its outer index (M of A, N of B) is the stored row.
struct Operand {
  std::vector<float> x;
  int64_t rows = 0, cols = 0;
  bool outer_is_row = false;
  std::vector<int32_t> prev_exps;  // the scale tensor before this step's quantize
  int64_t outer() const { return outer_is_row ? rows : cols; }
  int64_t inner() const { return outer_is_row ? cols : rows; }
  double at(int64_t o, int64_t k) const { return outer_is_row ? x[o * cols + k] : x[k * cols + o]; }
};

// NUMERICS §2 per outer index, in double: floor(log2(448 / amax)); amax 0 keeps the previous.
std::vector<int32_t> expected_exponents(const Operand& op) {
  std::vector<int32_t> e(op.outer());
  for (int64_t o = 0; o < op.outer(); ++o) {
    double amax = 0;
    for (int64_t k = 0; k < op.inner(); ++k) amax = std::max(amax, std::fabs(op.at(o, k)));
    e[o] = amax > 0 ? static_cast<int32_t>(std::floor(std::log2(kE4M3Max / amax))) : op.prev_exps[o];
  }
  return e;
}

}  // namespace

TEST_CASE("fp8-row: one training step's scales, codes and three GEMMs against an independent quantization") {
  compiler::Graph g;
  std::shared_ptr<const Model> m = compile({}, &g, true);
  auto s = test::open_session(m, "cpu", 3);
  write_inputs(*s, 3e4f);
  std::map<int, Operand> sources;  // quantized tensor -> its source
  int gemms = 0, row_outer = 0, column_outer = 0, zero_slices = 0;
  for (size_t i = 0;; ++i) {
    const int p = m->find_program("train_step#" + std::to_string(i));
    if (p < 0) break;
    const OpInfoLoaded& op = m->programs()[p].ops[0];
    if (op.code == OpCode::Quantize) {
      const TensorInfo& q = m->tensors()[op.out[0]];
      INFO(q.name);
      CHECK(q.type.dtype == DType::e4m3);
      CHECK(op.quant[0].mode == ScaleMode::current_amax);
      Operand& src = sources[op.out[0]];
      src.x = test::read_as<float>(*s, op.in[0]);
      src.cols = q.type.shape.back();
      src.rows = static_cast<int64_t>(src.x.size()) / src.cols;
      // A previous exponent no amax here gives (|x| near 2^28), so a kept one shows.
      src.prev_exps.assign(m->tensors()[op.out[1]].bytes / sizeof(int32_t), -20);
      REQUIRE(s->write(op.out[1], src.prev_exps.data(), m->tensors()[op.out[1]].bytes).ok());
    }
    const bool gemm = op.code == OpCode::QMatMul;
    std::vector<std::vector<uint8_t>> codes;
    if (gemm)
      for (int side = 0; side < 2; ++side) codes.push_back(test::bytes_of(*s, op.in[side * 3]));
    test::run(*s, "train_step#" + std::to_string(i));
    if (!gemm) continue;
    ++gemms;
    // op(A) [M, K] · op(B) [K, N]: A's outer index is M, B's is N.
    Operand* side[2];
    std::vector<int32_t> exps[2];
    std::vector<std::vector<uint8_t>> mine(2);
    for (int t = 0; t < 2; ++t) {
      const TensorInfo& q = m->tensors()[op.in[t * 3]];
      INFO("qmatmul at " << op.loc << ", operand " << q.name);
      REQUIRE(sources.count(op.in[t * 3]) == 1);
      side[t] = &sources[op.in[t * 3]];
      const bool trans = op.attrs.i(t == 0 ? "trans_a" : "trans_b") != 0;
      side[t]->outer_is_row = t == 0 ? !trans : trans;
      (side[t]->outer_is_row ? row_outer : column_outer)++;
      exps[t] = expected_exponents(*side[t]);
      CHECK(test::read_as<int32_t>(*s, op.in[t * 3 + 1]) == exps[t]);
      for (int64_t o = 0; o < side[t]->outer(); ++o) {
        bool zero = true;
        for (int64_t k = 0; k < side[t]->inner(); ++k) zero = zero && side[t]->at(o, k) == 0;
        zero_slices += zero;
      }
      mine[t].resize(side[t]->x.size());
      for (int64_t r = 0; r < side[t]->rows; ++r)
        for (int64_t c = 0; c < side[t]->cols; ++c) {
          const int32_t e = exps[t][side[t]->outer_is_row ? r : c];
          mine[t][r * side[t]->cols + c] = e4m3(std::ldexp(static_cast<double>(side[t]->x[r * side[t]->cols + c]), e));
        }
      CHECK(codes[t] == mine[t]);
    }
    // The product of the test's own codes, each term times 2^-(eA[m] + eB[n]).
    const Operand &a = *side[0], &b = *side[1];
    REQUIRE(a.inner() == b.inner());
    std::vector<float> y = test::read_as<float>(*s, op.out[0]);
    REQUIRE(static_cast<int64_t>(y.size()) == a.outer() * b.outer());
    auto code = [&](int t, const Operand& o, int64_t outer, int64_t k) {
      return mine[t][o.outer_is_row ? outer * o.cols + k : k * o.cols + outer];
    };
    double worst = 0;
    for (int64_t mi = 0; mi < a.outer(); ++mi)
      for (int64_t n = 0; n < b.outer(); ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < a.inner(); ++k) {
          const double term = e4m3_value(code(0, a, mi, k)) * e4m3_value(code(1, b, n, k));
          ref += term;
          mag += std::fabs(term);
        }
        ref = std::ldexp(ref, -(exps[0][mi] + exps[1][n]));
        mag = std::ldexp(mag, -(exps[0][mi] + exps[1][n]));
        worst = std::max(worst, std::fabs(y[mi * b.outer() + n] - ref) / (mag + 1e-30));
      }
    INFO("qmatmul at " << op.loc);
    CHECK(worst < 1e-5);  // f32 accumulation of the same products in another order
  }
  // fc1 and fc2 forward, fc2's data gradient, both weight gradients; scales along both axes.
  CHECK(gemms == 5);
  CHECK(row_outer > 0);
  CHECK(column_outer > 0);
  CHECK(zero_slices > 0);  // x's zero row: its previous scale kept, codes zero
}
#else
TEST_CASE("CUDA oracle present") {
  FAIL("cuda_fp8.h not found: the fp8-row tests need the CUDA toolkit headers (SGRT_CUDA_INCLUDE)");
}
#endif

TEST_CASE("fp8-row: an outlier row leaves the other rows' products bit for bit; per-tensor fp8 flushes them") {
  // h = x · W1^T, no bias: each row against the exact product of the f32 operands.
  auto rows_error = [](const std::string& recipe, float outlier, std::vector<float>* h) {
    compiler::Graph g;
    auto s = test::open_session(compile({{"recipe", recipe}, {"bias", "false"}}, &g), "cpu", 3);
    write_inputs(*s, outlier);
    std::vector<float> x = test::read_f32(*s, "x"), w = test::read_f32(*s, "fc1.w");
    test::run(*s, "infer");
    *h = test::read_output(*s, "h");
    double err = 0;  // the largest relative L2 error over the rows without the outlier
    for (int r = 0; r < 6; ++r) {
      if (r == kOutlierRow) continue;
      double d = 0, n = 0;
      for (int o = 0; o < 12; ++o) {
        double ref = 0;
        for (int k = 0; k < 20; ++k) ref += static_cast<double>(x[r * 20 + k]) * w[o * 20 + k];
        d += (ref - (*h)[r * 12 + o]) * (ref - (*h)[r * 12 + o]);
        n += ref * ref;
      }
      if (r == kZeroRow) CHECK(d == 0);
      else err = std::max(err, std::sqrt(d / n));
    }
    return err;
  };
  std::vector<float> with, without, per_tensor;
  const double row_err = rows_error("fp8-row", 1e6f, &with);
  rows_error("fp8-row", 0.f, &without);
  const double tensor_err = rows_error("fp8", 1e6f, &per_tensor);
  MESSAGE("other rows' relative error with x[4, 7] = 1e6: fp8-row " << row_err << ", fp8 per tensor " << tensor_err);
  // E4M3 rounds each operand within 2^-4 relatively: the product stays within a few percent.
  CHECK(row_err < 0.06);
  // Per tensor the scale is 2^-12: every other element is under half of 2^-9, flushed to zero.
  CHECK(tensor_err > 0.9);
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 12 && r != kOutlierRow; ++o) CHECK(with[r * 12 + o] == without[r * 12 + o]);
}

TEST_CASE("fp8-row: sgrt info shows each GEMM operand's axis; granularity = tensor switches it off") {
  test::TempFile script(".lua", mlp());
  test::ToolResult r = test::run_tool({"info", script.path, "--recipe", "fp8-row", "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  // y = x · W^T per layer. Forward: x and W per row (M, N); data gradient dh = dy · W:
  // W per column (N = in); weight gradient dW = dy^T · x: both per column.
  for (auto [name, axis] : {std::pair<const char*, const char*>{"x.e4m3.row", "row"},
                            {"x.e4m3.column", "column"},
                            {"fc1.w.e4m3.row", "row"},
                            {"fc2.w.e4m3.row", "row"},
                            {"fc2.w.e4m3.column", "column"}}) {
    INFO(name);
    const size_t at = r.out.find("\"name\":\"" + std::string(name) + "\"");
    REQUIRE(at != std::string::npos);
    const std::string entry = r.out.substr(at, r.out.find("\"source\"", at) - at);
    CHECK(entry.find("\"dtype\":\"e4m3\"") != std::string::npos);
    CHECK(entry.find("\"mode\":\"current_amax\",\"granularity\":\"" + std::string(axis) + "\"") != std::string::npos);
  }
  CHECK(r.out.find("\"name\":\"fc1.w.e4m3.column\"") == std::string::npos);  // x is an input: no data gradient

  compiler::Graph g;
  Status st = test::compile_graph(mlp("sg.recipe('fp8-row', { granularity = 'tensor' })"), &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  int quantizes = 0;
  for (const compiler::Program& p : g.programs)
    for (const compiler::Op& op : p.ops)
      if (op.code == OpCode::Quantize) {
        ++quantizes;
        CHECK(g.tensors[op.out[0]].scale.granularity == QuantGranularity::tensor);
      }
  CHECK(quantizes > 0);
  compiler::Graph dge;
  st = test::compile_graph(mlp("sg.recipe('fp8-row', { dge = true })"), &dge);
  CHECK(st.message().find("recipe 'fp8-row': 'dge' applies to E2M1 weights") != std::string::npos);
}
