// The GEMM at 512^3 on Vulkan: agrees with the cpu and reports GFLOP/s (on
// lavapipe in CI this measures the portable tiled shader run on the CPU).
// The 64x64 and 128x128 tiles of gemm_tiled.glsl (SGRT_VULKAN_GEMM_TILE), and
// qmatmul's operands decoded first into scratch or in the GEMM's loads
// (SGRT_VULKAN_DECODE_FIRST), give the same bits: training steps under f32 and
// every scale kind of the codes (per tensor, row and column, MX and NVFP4
// blocks, fp8-block's tiles), products with ragged edges in both tilings,
// transposes, and blockwise FP8's 128-element chunks. The shipped shaders fuse
// only the multiply-adds their source asks to fuse. Products with a side of C
// of at most 16 (gemm_thin.comp) against an f64 sum, every transpose. A scale
// or an add folded into each kind of product store (tiled, split-K's reduce,
// gemm_thin) gives the unfused bits.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "backend_compare.h"
#include "harness.h"
#include "scoped_env.h"
#include "test_vulkan_support.h"
#include "vulkan/lowering.h"
#include "vulkan/shaders.h"
#include "vulkan/table.h"

using namespace sgrt;

TEST_CASE("vulkan matmul 512^3: agrees with the cpu, GFLOP/s") {
  if (!test::vulkan_device_present()) return;
  const int64_t n = 512;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local a = sg.input("a", {512, 512})
    local b = sg.param("b", {512, 512}, {"normal", 0, 1})
    local c = sg.output("c", a:matmul(b))
    sg.loss(sg.sum(sg.max(c, 1)))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<float> a(n * n);
  for (int64_t i = 0; i < n * n; ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
  auto cpu = test::open_session(m, "cpu", 5);
  auto gpu = test::open_session(m, "vulkan", 5);
  test::write_vec(*cpu, "a", a);
  test::write_vec(*gpu, "a", a);
  test::run(*cpu, "infer");
  test::run(*gpu, "infer");  // warm-up: pipelines compiled, caches filled
  int c = m->outputs().at(0).second;
  std::vector<float> ref(n * n), got(n * n);
  REQUIRE(cpu->read(c, ref.data(), ref.size() * 4).ok());
  REQUIRE(gpu->read(c, got.data(), got.size() * 4).ok());
  double diff = 0, scale = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  CHECK(diff / scale <= 1e-5);

  const int reps = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) test::run(*gpu, "infer");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  MESSAGE("vulkan gemm 512^3 (infer program, incl. submit): " << 2.0 * n * n * n / s * 1e-9 << " GFLOP/s, "
          << s * 1e3 << " ms; normalized error " << diff / scale);
}

namespace {

// A shader's GLSL.std.450 Fma instructions and its arrays in Function storage
// (private arrays the optimizer could not turn into values). SPIR-V instruction
// words: the word count in the high half, the opcode in the low; OpExtInstImport
// 11, OpExtInst 12, OpTypeArray 28, OpTypePointer 32, OpVariable 59; storage
// class 7 is Function.
struct SpirvCounts {
  int fmas = 0, function_arrays = 0;
};
SpirvCounts count_spirv(const vk::ShaderBlob& s) {
  const uint32_t* w = s.code;
  const size_t n = s.bytes / 4;
  uint32_t glsl = 0;
  std::set<uint32_t> arrays, array_pointers;
  SpirvCounts c;
  for (size_t i = 5; i < n && (w[i] >> 16) > 0; i += w[i] >> 16) {
    const uint32_t op = w[i] & 0xFFFFu;
    if (op == 11 && std::strcmp(reinterpret_cast<const char*>(w + i + 2), "GLSL.std.450") == 0) glsl = w[i + 1];
    if (op == 12 && w[i + 3] == glsl && w[i + 4] == 50) ++c.fmas;  // 50: Fma
    if (op == 28) arrays.insert(w[i + 1]);
    if (op == 32 && w[i + 2] == 7 && arrays.count(w[i + 3])) array_pointers.insert(w[i + 1]);
    if (op == 59 && w[i + 3] == 7 && array_pointers.count(w[i + 1])) ++c.function_arrays;
  }
  return c;
}

}  // namespace

// The tiled GEMM fuses only what its source asks: the k loop's fma(), one per
// k (16 a step) and vec4 of the invocation's block (4R x R). glslc's optimizer
// (SPIRV-Tools before its issue 5902's fix) unrolled blockwise FP8's `precise`
// promotion keeping NoContraction on the first copy only and folded the other
// copies' a*b + c into Fma, which NVIDIA's driver fused: 64x64 and 128x128
// tiles then rounded different elements once instead of twice. And its
// accumulators are values, not an array in function memory (a GPU's local
// memory, for the whole k loop), as they were while the epilogue indexed them
// in a loop the optimizer did not unroll; so are dequant_matmul's.
// gemm_thin's k loop: one fma per thin index, 16.
TEST_CASE("the shipped GEMM SPIR-V fuses only the k loop's multiply-adds, accumulators in registers") {
  // dequant_matmul's sums are not `precise` (-1): fusing is its driver's choice.
  for (const auto& [name, fmas] : {std::pair<const char*, int>{"gemm_tiled64", 16 * 4}, {"gemm_tiled", 16 * 4 * 4},
                                   {"gemm_tiled64_addr", 16 * 4}, {"gemm_tiled_addr", 16 * 4 * 4}, {"gemm_thin", 16},
                                   {"gemm_thin_addr", 16}, {"dequant_matmul", -1}, {"dequant_matmul_addr", -1}}) {
    const std::string shader = name;
    CAPTURE(shader);
    const vk::ShaderBlob* s = vk::find_shader(shader);
    REQUIRE(s != nullptr);
    const SpirvCounts c = count_spirv(*s);
    if (fmas >= 0) CHECK(c.fmas == fmas);
    CHECK(c.function_arrays == 0);
  }
}

namespace {

// Three products of ragged sizes (several 64x64 tiles, two 128x128 ones), one
// with a transposed weight; K = 150 and 130 span two of fp8-block's chunks.
std::string tiles_model(const std::string& recipe) {
  return R"(
  local sg = require "sg"
  local x = sg.input("x", {130, 150})
  local y = sg.input("y", {130}, "i32")
  local w1 = sg.param("w1", {150, 140}, {"normal", 0, 0.1})
  local w2 = sg.param("w2", {140, 140}, {"normal", 0, 0.1})
  local w3 = sg.param("w3", {140, 10}, {"normal", 0, 0.1})
  local h = x:matmul(w1):relu()
  local g = sg.matmul(h, w2, { trans_b = true }):gelu()
  local logits = g:matmul(w3)
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.output("logits", logits)
  sg.recipe ")" + recipe + "\"\n  sg.optimizer.adamw{ lr = 1e-2 }\n";
}

// Two training steps on Vulkan with every product on `tile`, qmatmul operands
// decoded first or not (`decode`: SGRT_VULKAN_DECODE_FIRST); the bytes of every
// parameter and optimizer state afterwards, and of the logits, by name.
std::vector<std::pair<std::string, std::vector<uint8_t>>> train_with_tile(const std::shared_ptr<const Model>& m, const char* tile,
                                                                          const char* decode) {
  std::unique_ptr<Session> s;
  {
    test::ScopedEnv forced("SGRT_VULKAN_GEMM_TILE", tile), decoding("SGRT_VULKAN_DECODE_FIRST", decode);
    s = test::open_session(m, "vulkan", 3);
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(130 * 150);
  std::vector<int32_t> y(130);
  for (float& v : x) v = normal(rng);
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % 10);
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "y", y);
  test::run(*s, "train_step");
  test::run(*s, "train_step");
  std::vector<std::pair<std::string, std::vector<uint8_t>>> bytes;
  const std::vector<TensorInfo>& ts = m->tensors();
  for (size_t id = 0; id < ts.size(); ++id)
    if (ts[id].role == Role::param || ts[id].role == Role::opt_state || static_cast<int>(id) == m->outputs().at(0).second) {
      bytes.emplace_back(ts[id].name, std::vector<uint8_t>(ts[id].bytes));
      REQUIRE(s->read(static_cast<int>(id), bytes.back().second.data(), bytes.back().second.size()).ok());
    }
  return bytes;
}

}  // namespace

TEST_CASE("vulkan's 64x64 and 128x128 GEMM tiles, operands decoded first or as they load: the same bits") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(tiles_model("fp32"), &m).ok());
  std::unique_ptr<Session> s;
  Status st = test::vulkan_session_with("SGRT_VULKAN_GEMM_TILE", "32", m, &s);
  CHECK(st.message().find("SGRT_VULKAN_GEMM_TILE is 64 or 128, not '32'") != std::string::npos);

  // f32; E4M3/E5M2 codes per tensor; per row and column (inner scales); MX
  // blocks; E2M1 per row / column; K chunks; NVFP4 blocks.
  for (const std::string recipe : {"fp32", "fp8", "fp8-row", "mxfp8", "fp4", "fp8-block", "nvfp4"}) {
    CAPTURE(recipe);
    REQUIRE(test::compile_lua(tiles_model(recipe), &m).ok());
    const auto large = train_with_tile(m, "128", "0");
    for (const std::string decode : {"0", "1"}) {
      CAPTURE(decode);
      const auto small = train_with_tile(m, "64", decode.c_str());
      REQUIRE(small.size() == large.size());
      for (size_t i = 0; i < small.size(); ++i) {
        const std::vector<uint8_t>& a = small[i].second;
        const size_t first = std::mismatch(a.begin(), a.end(), large[i].second.begin()).first - a.begin();
        INFO(small[i].first << ": first differing byte " << first << " of " << a.size());
        CHECK(a == large[i].second);
      }
    }
  }
}

namespace {

// The FP16 values next to x below and above (equal when x is one): a device
// may round a conversion either way (Vulkan leaves its direction open), so a
// product of rounded operands lies between its corners' products.
std::pair<double, double> f16_neighbors(float x) {
  const _Float16 r = static_cast<_Float16>(x);  // the compiler's conversion, not ours
  const double d = static_cast<double>(r);
  if (d == x) return {d, d};
  uint16_t bits;
  std::memcpy(&bits, &r, sizeof bits);
  const bool above = d > x, positive = (bits & 0x8000) == 0;
  uint16_t other = (bits & 0x7FFF) == 0 ? (x < 0 ? 0x8001 : 0x0001) : above == positive ? bits - 1 : bits + 1;
  _Float16 o;
  std::memcpy(&o, &other, sizeof o);
  return std::minmax(d, static_cast<double>(o));
}

// Whether got is sum_k x_k y_k with each operand rounded to FP16 either way
// and the products added in f32 (at most K ulps of sum |x y|).
bool f16_product_ok(double got, const std::vector<float>& x, const std::vector<float>& y) {
  double lo = 0, hi = 0, abs_sum = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    auto [xl, xh] = f16_neighbors(x[k]);
    auto [yl, yh] = f16_neighbors(y[k]);
    const double corner[4] = {xl * yl, xl * yh, xh * yl, xh * yh};
    lo += *std::min_element(corner, corner + 4);
    hi += *std::max_element(corner, corner + 4);
    abs_sum += std::max(std::fabs(corner[0]), std::max(std::fabs(corner[1]), std::max(std::fabs(corner[2]), std::fabs(corner[3]))));
  }
  const double tol = static_cast<double>(x.size()) * std::ldexp(abs_sum, -23);
  return got >= lo - tol && got <= hi + tol;
}

}  // namespace

// SGRT_VULKAN_COOP=1 (gemm_coop.comp): operands rounded to FP16, products
// accumulated in f32, checked element by element against that (above) on
// ragged shapes (100 x 70 by 70 x 90, and a transposed product of its
// result) that end mid-tile. Row 0 of a is 1 + 2^-12 and row 0 of b is 1:
// c[0][0] is then 70 or 70 (1 + 2^-10), never the unrounded 70 (1 + 2^-12) the
// tiled shader gives, so the check also shows the cooperative path ran. A
// device without cooperative matrices (lavapipe) must refuse the switch at
// prepare, naming it.
TEST_CASE("SGRT_VULKAN_COOP=1: FP16 operands, f32 sums where the device has cooperative matrices, an error where not") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(R"(
    local sg = require "sg"
    local a = sg.input("a", {100, 70})
    local b = sg.input("b", {90, 70})
    local w = sg.param("w", {90}, "zeros")
    local c = sg.output("c", sg.matmul(a, b, { trans_b = true }))
    sg.output("d", sg.matmul(a, c, { trans_a = true }))
    sg.loss(sg.sum(sg.sum(c + w)))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m).ok());
  std::unique_ptr<Session> s;
  Status st = test::vulkan_session_with("SGRT_VULKAN_COOP", "1", m, &s);
  if (!st.ok()) {
    CHECK(st.message().find("SGRT_VULKAN_COOP=1, but") != std::string::npos);
    CHECK(st.message().find("cooperative matrices") != std::string::npos);
    MESSAGE("skipping the cooperative-matrix product: " << st.message());
    return;
  }
  REQUIRE(s->init(1, 1).ok());
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> a(100 * 70), b(90 * 70);
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  std::fill(a.begin(), a.begin() + 70, 1.f + std::ldexp(1.f, -12));
  std::fill(b.begin(), b.begin() + 70, 1.f);
  test::write_vec(*s, "a", a);
  test::write_vec(*s, "b", b);
  test::run(*s, "infer");
  const std::vector<float> c = test::read_output(*s, "c"), d = test::read_output(*s, "d");
  CHECK(std::fabs(c[0] - 70 * (1 + std::ldexp(1.0, -12))) > 1e-3);  // the cooperative path rounded
  auto row = [](const std::vector<float>& v, int r, int n) { return std::vector<float>(v.begin() + r * n, v.begin() + (r + 1) * n); };
  auto column = [](const std::vector<float>& v, int col, int rows, int n) {
    std::vector<float> out(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) out[static_cast<size_t>(r)] = v[static_cast<size_t>(r * n + col)];
    return out;
  };
  int bad = 0;
  for (int i = 0; i < 100; ++i)  // c[i][j] = sum_k a[i][k] b[j][k]
    for (int j = 0; j < 90; ++j) bad += !f16_product_ok(c[i * 90 + j], row(a, i, 70), row(b, j, 70));
  for (int k = 0; k < 70; ++k)  // d[k][j] = sum_i a[i][k] c[i][j]
    for (int j = 0; j < 90; ++j) bad += !f16_product_ok(d[k * 90 + j], column(a, k, 100, 70), column(c, j, 100, 90));
  CHECK(bad == 0);
}

namespace {

// C [m, n] = op(A) op(B), inputs stored as op's transposes ask.
struct ThinCase {
  int64_t m, n, k;
  bool ta, tb;
};

// N thin (1, 5 and 16 columns: LoRA's x A^T, dy^T low), M thin (dlow^T x),
// both, K of 1, and a 17 x 17 product just past the thin side, which stays tiled.
const ThinCase kThinCases[] = {{70, 1, 33, false, false}, {45, 5, 300, false, true}, {130, 16, 77, true, false},
                               {20, 9, 50, true, true},   {8, 90, 41, true, false},  {3, 200, 19, false, true},
                               {7, 5, 64, false, false},  {33, 2, 1, false, false},  {17, 17, 20, false, false}};

std::string thin_model() {
  std::string lua = "local sg = require \"sg\"\nlocal w = sg.param(\"w\", {1}, \"zeros\")\nlocal loss = w\n";
  for (size_t i = 0; i < std::size(kThinCases); ++i) {
    const ThinCase& c = kThinCases[i];
    const std::string n = std::to_string(i), a = c.ta ? "{" + std::to_string(c.k) + ", " + std::to_string(c.m) + "}"
                                                     : "{" + std::to_string(c.m) + ", " + std::to_string(c.k) + "}";
    const std::string b = c.tb ? "{" + std::to_string(c.n) + ", " + std::to_string(c.k) + "}"
                               : "{" + std::to_string(c.k) + ", " + std::to_string(c.n) + "}";
    lua += "local c" + n + " = sg.output(\"c" + n + "\", sg.matmul(sg.input(\"a" + n + "\", " + a + "), sg.input(\"b" + n +
           "\", " + b + "), { trans_a = " + (c.ta ? "true" : "false") + ", trans_b = " + (c.tb ? "true" : "false") + " }))\n";
  }
  return lua + "sg.loss(sg.sum(w))\nsg.optimizer.sgd{ lr = 0.1 }\n";
}

}  // namespace

TEST_CASE("vulkan products with a side of at most 16 run on gemm_thin and agree with an f64 sum") {
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(thin_model(), &m).ok());
  // Which shader each product lowers to (no device needed), on and off.
  for (bool thin : {true, false}) {
    vk::KernelOptions opts;
    opts.gemm_thin = thin;
    vk::Scratch scratch;
    int on_thin = 0, products = 0;
    for (const ProgramInfo& p : m->programs()) {
      if (p.name != "infer") continue;
      for (size_t i = 0; i < p.ops.size(); ++i) {
        std::vector<vk::Dispatch> ds;
        REQUIRE(vk::lower_op(p.ops[i], m->tensors(), static_cast<uint32_t>(i), opts, &scratch, &ds).ok());
        if (p.ops[i].code != OpCode::MatMul) continue;
        ++products;
        on_thin += ds.back().shader == "gemm_thin";
        const TensorType& c = m->tensors()[p.ops[i].out[0]].type;
        CHECK((ds.back().shader == "gemm_thin") == (thin && std::min(c.shape[0], c.shape[1]) <= vk::kThinSide));
      }
    }
    CHECK(products == static_cast<int>(std::size(kThinCases)));
    CHECK(on_thin == (thin ? products - 1 : 0));
  }

  if (!test::vulkan_device_present()) return;
  auto s = test::open_session(m, "vulkan", 3);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> as, bs;
  for (size_t i = 0; i < std::size(kThinCases); ++i) {
    const ThinCase& c = kThinCases[i];
    as.emplace_back(c.m * c.k);
    bs.emplace_back(c.k * c.n);
    for (float& v : as.back()) v = uniform(rng);
    for (float& v : bs.back()) v = uniform(rng);
    test::write_vec(*s, "a" + std::to_string(i), as.back());
    test::write_vec(*s, "b" + std::to_string(i), bs.back());
  }
  test::run(*s, "infer");
  for (size_t i = 0; i < std::size(kThinCases); ++i) {
    const ThinCase& c = kThinCases[i];
    CAPTURE(i);
    const std::vector<float> got = test::read_output(*s, "c" + std::to_string(i));
    REQUIRE(got.size() == static_cast<size_t>(c.m * c.n));
    int bad = 0;
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t col = 0; col < c.n; ++col) {
        double ref = 0, abs_sum = 0;
        for (int64_t k = 0; k < c.k; ++k) {
          const double x = as[i][c.ta ? k * c.m + r : r * c.k + k], y = bs[i][c.tb ? col * c.k + k : k * c.n + col];
          ref += x * y;
          abs_sum += std::fabs(x * y);
        }
        // f32 products summed in f32: at most K roundings of sum |x y|.
        bad += std::fabs(got[r * c.n + col] - ref) > static_cast<double>(c.k) * std::ldexp(abs_sum, -23) + 1e-30;
      }
    CHECK(bad == 0);
  }
}

namespace {

// Products that take a scale (forward: x W1 on gemm_thin, its gradient dy W1^T
// tiled) and an add (x W2 + x W3: the second product adds the first), K = 600:
// split-K when it is forced.
const char* kEpilogueModel = R"(
  local sg = require "sg"
  local x = sg.input("x", {70, 600})
  local w1 = sg.param("w1", {600, 8}, {"normal", 0, 0.05})
  local w2 = sg.param("w2", {600, 40}, {"normal", 0, 0.05})
  local w3 = sg.param("w3", {600, 40}, {"normal", 0, 0.05})
  local low = sg.scale(sg.matmul(x, w1), 0.375)
  local y = sg.matmul(x, w2) + sg.matmul(x, w3)
  sg.loss(sg.sum(sg.sum(y * y)) + sg.sum(sg.sum(low * low)))
  sg.output("y", y)
  sg.optimizer.sgd{ lr = 1e-3 }
)";

}  // namespace

TEST_CASE("a scale and an add in every product store (tiled, split-K, gemm_thin): the unfused bits") {
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(kEpilogueModel, &m).ok());
  const ProgramInfo& step = m->programs()[m->find_program("train_step")];
  CHECK(find_scale_fusions(*m, step).size() >= 1);
  CHECK(find_addend_fusions(*m, step, {}).size() >= 1);
  if (!test::vulkan_device_present()) return;
  std::vector<float> x(70 * 600);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  for (const std::string split : {"0", "1"}) {
    CAPTURE(split);
    test::ScopedEnv splitting("SGRT_VULKAN_SPLIT_K", split.c_str());
    std::unique_ptr<Session> s[2];
    for (int fuse = 0; fuse < 2; ++fuse) {
      REQUIRE(test::vulkan_session_with("SGRT_VULKAN_FUSE", fuse ? "1" : "0", m, &s[fuse]).ok());
      REQUIRE(s[fuse]->init(3, 100).ok());
      test::write_vec(*s[fuse], "x", x);
      test::run(*s[fuse], "train_step");
    }
    for (const std::string name : {"w1", "w2", "w3"}) {
      CAPTURE(name);
      CHECK(test::bytes_of(*s[0], test::tensor_id(*s[0], name)) == test::bytes_of(*s[1], test::tensor_id(*s[1], name)));
    }
    test::run(*s[0], "infer");
    test::run(*s[1], "infer");
    CHECK(test::read_output(*s[0], "y") == test::read_output(*s[1], "y"));
  }
}
