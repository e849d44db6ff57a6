// The GEMM at 512^3 on Vulkan: agrees with the cpu and reports GFLOP/s (on
// lavapipe in CI this measures the portable tiled shader run on the CPU).
// The 64x64 and 128x128 tiles of gemm_tiled.glsl (SGRT_VULKAN_GEMM_TILE) give
// the same bits: training steps under fp32, fp8, fp8-block and nvfp4, products with ragged
// edges in both tilings, transposes, and blockwise FP8's 128-element chunks.
#include <chrono>
#include <cmath>
#include <random>

#include "harness.h"
#include "scoped_env.h"
#include "test_vulkan_support.h"

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

// Two training steps on Vulkan with every product on `tile`; the bytes of
// every parameter and optimizer state afterwards, and of the logits.
std::vector<std::vector<uint8_t>> train_with_tile(const std::shared_ptr<const Model>& m, const char* tile) {
  std::unique_ptr<Session> s;
  {
    test::ScopedEnv forced("SGRT_VULKAN_GEMM_TILE", tile);
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
  std::vector<std::vector<uint8_t>> bytes;
  const std::vector<TensorInfo>& ts = m->tensors();
  for (size_t id = 0; id < ts.size(); ++id)
    if (ts[id].role == Role::param || ts[id].role == Role::opt_state || static_cast<int>(id) == m->outputs().at(0).second) {
      bytes.emplace_back(ts[id].bytes);
      REQUIRE(s->read(static_cast<int>(id), bytes.back().data(), bytes.back().size()).ok());
    }
  return bytes;
}

}  // namespace

TEST_CASE("vulkan's 64x64 and 128x128 GEMM tiles train to the same bits, f32 and quantized products") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua(tiles_model("fp32"), &m).ok());
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend("vulkan", &be).ok());
  std::unique_ptr<Session> s;
  Status st;
  {
    test::ScopedEnv bad("SGRT_VULKAN_GEMM_TILE", "32");
    st = Session::create(m, std::move(be), &s);
  }
  CHECK(st.message().find("SGRT_VULKAN_GEMM_TILE is 64 or 128, not '32'") != std::string::npos);

  for (const char* recipe : {"fp32", "fp8", "fp8-block", "nvfp4"}) {  // f32, E4M3/E5M2 codes, K chunks, block scales
    CAPTURE(recipe);
    REQUIRE(test::compile_lua(tiles_model(recipe), &m).ok());
    std::vector<std::vector<uint8_t>> small = train_with_tile(m, "64"), large = train_with_tile(m, "128");
    REQUIRE(small.size() == large.size());
    for (size_t i = 0; i < small.size(); ++i) CHECK(small[i] == large[i]);
  }
}
