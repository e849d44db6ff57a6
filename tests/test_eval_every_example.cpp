// Evaluation counts every example whatever the batch: Fashion-MNIST's 10,000
// test images with batch 128 (78 full batches and 16 left over) give the same
// loss and accuracy as batch 16, which divides 10,000 and needs no last partial
// batch; and `sgrt train --steps 0` is refused instead of meaning "the default".
#include "fashion.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

std::unique_ptr<Session> mlp_session(int batch) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(test::fashion_mlp_lua(), &m, {{"batch", std::to_string(batch)}, {"hidden", "32"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  return test::open_session(m, "cpu", 5);
}

}  // namespace

TEST_CASE("eval over 10,000 test images with batch 128 counts all 10,000, as batch 16 does") {
  REQUIRE(test::fashion().size(Split::test) == 10000);
  auto ragged = mlp_session(128), even = mlp_session(16);
  // A few training steps, then the same weights in both sessions.
  TrainOptions o;
  o.steps = 30;
  o.seed = 3;
  TrainResult tr;
  Status st = train(*ragged, test::fashion(), o, &tr);
  REQUIRE_MESSAGE(st.ok(), st.message());
  for (const TensorInfo& t : ragged->model().tensors())
    if (t.role == Role::param) test::write_vec(*even, t.name, test::read_f32(*ragged, t.name));

  EvalReport a, b;
  REQUIRE(evaluate(*ragged, test::fashion(), Split::test, &a).ok());
  REQUIRE(evaluate(*even, test::fashion(), Split::test, &b).ok());
  CHECK(a.samples == 10000);
  CHECK(b.samples == 10000);
  CHECK(a.loss == doctest::Approx(b.loss).epsilon(1e-5));
  REQUIRE(a.metrics.size() == 1);
  REQUIRE(b.metrics.size() == 1);
  // Accuracy is k / 10000: the two agree to well under one image.
  CHECK(std::abs(a.metrics[0].second - b.metrics[0].second) < 0.5 / 10000);
}

TEST_CASE("sgrt train --steps 0 is refused (exit 2), not the model's default length") {
  test::ToolResult r = test::run_tool({"train", SGRT_SOURCE_DIR "/models/fashion_mlp.lua", "--steps", "0", "--quiet"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--steps must be at least 1") != std::string::npos);
}
