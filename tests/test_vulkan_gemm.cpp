// The GEMM at 512^3 on Vulkan: agrees with the cpu and reports GFLOP/s (on
// lavapipe in CI this measures the portable tiled shader run on the CPU).
#include <chrono>
#include <cmath>

#include "harness.h"
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
