// Scalify's scale rules against NUMERICS.md §3's reference values, and the
// static plan they produce for a compiled model.
#include <cmath>

#include "harness.h"
#include "scalify.h"

using namespace sgrt;
using namespace sgrt::compiler;

TEST_CASE("Scalify rules reproduce the reference values") {
  CHECK(pow2_floor(4.47) == 4.0);
  CHECK(pow2_floor(0.3) == 0.25);
  CHECK(add_scale(4, 2) == 4.0);           // add with scales 4 and 2 gives 4
  CHECK(add_scale(2, 2) == 2.0);           // P(2 sqrt 2) = 2
  CHECK(matmul_scale(1, 1, 5) == 2.0);     // matmul with K = 5: r = 2
  CHECK(matmul_scale(0.5, 4, 784) == 32.0);  // P(28) = 16
  CHECK(reduce_sum_scale(1, 100) == 8.0);  // P(10) = 8
  // Dynamic rescale: scale' = scale * max(P(norm), 2^-14).
  CHECK(4 * rescale_factor({2, -3}, RescaleNorm::max) == 8.0);
  CHECK(4 * rescale_factor({1, -6}, RescaleNorm::l1) == 8.0);
  CHECK(4 * rescale_factor({4, -8}, RescaleNorm::l2) == 16.0);
  CHECK(rescale_factor({0, 0}, RescaleNorm::max) == std::exp2(-14.0));
}

namespace {

// The tensor named PREFIX...SUFFIX (op outputs are named after the op and their id).
const Tensor& find(const Graph& g, const std::string& prefix, const std::string& suffix = "") {
  for (const Tensor& t : g.tensors)
    if (t.name.rfind(prefix, 0) == 0 && t.name.size() >= prefix.size() + suffix.size() &&
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return t;
  FAIL("no tensor " << prefix << "..." << suffix);
  return g.tensors[0];
}

const char* kScaledMlp = R"(
  local sg = require "sg"
  local cfg = sg.config{ input_scale = 1.0, plan = true }
  local x = sg.input("image", {8, 784})
  local y = sg.input("label", {8}, "i32")
  local h = sg.nn.linear(x * cfg.input_scale, 32, { name = "fc1" }):relu()
  local logits = sg.nn.linear(h, 10, { name = "fc2" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.data.fashion_mnist{ image = x, label = y }
  sg.optimizer.adamw{ lr = 1e-3 }
  sg.recipe("fp8", { plan = cfg.plan })
)";

}  // namespace

TEST_CASE("the planner gives bounded tensors compile-time scales and the rest runtime sources") {
  Graph g;
  Status st = test::compile_graph(kScaledMlp, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  // The data lie in [0, 1]: 2^floor(log2(448 / 1)) = 2^8.
  const Tensor& in = find(g, "scale_", ".e4m3");
  CHECK(in.scale.mode == ScaleMode::static_pow2);
  CHECK(in.scale.static_log2 == 8);
  // Weights and hidden activations have no bound: this step's amax.
  CHECK(find(g, "fc1.w.e4m3").scale.mode == ScaleMode::current_amax);
  CHECK(find(g, "relu_", ".e4m3").scale.mode == ScaleMode::current_amax);
  // The logits' gradient is bounded by |dloss| / N = 1/8, so E5M2 gets 2^floor(log2(57344 * 8)).
  bool found = false;
  for (const Tensor& t : g.tensors)
    if (t.type.dtype == DType::e5m2 && t.name.rfind("softmax_cross_entropy_grad", 0) == 0) {
      found = true;
      CHECK(t.scale.mode == ScaleMode::static_pow2);
      CHECK(t.scale.static_log2 == 18);
    }
  CHECK(found);
}

TEST_CASE("a scaled input moves the static scale with it; without the planner everything is current amax") {
  Graph g;
  Status st = test::compile_graph(kScaledMlp, &g, {{"input_scale", "1e-5"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(find(g, "scale_", ".e4m3").scale.static_log2 == static_cast<int>(std::floor(std::log2(448 / 1e-5))));

  Graph off;
  st = test::compile_graph(kScaledMlp, &off, {{"plan", "false"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  for (const Tensor& t : off.tensors)
    if (t.type.dtype == DType::e4m3 || t.type.dtype == DType::e5m2) CHECK(t.scale.mode == ScaleMode::current_amax);
}
