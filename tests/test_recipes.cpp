// Every recipe trains the Fashion-MNIST MLP close to FP32 (short runs: the
// full-length comparison is scripts/recipes_table.sh), and the scale plan
// rescues a badly scaled model that a naive cast to FP8 cannot train.
#include "fashion.h"
#include "sgrt/quant.h"

using namespace sgrt;

namespace {

const char* kMlp = R"(
  local sg = require "sg"
  local cfg = sg.config{ recipe = "fp32", input_scale = 1.0 }
  local x = sg.input("image", {100, 784})
  local y = sg.input("label", {100}, "i32")
  -- input_scale moves the first layer's input far from unit scale and the
  -- next op moves it back: the same function in exact arithmetic.
  local b1 = sg.param("fc1.b", {128}, {"uniform", -1 / 28, 1 / 28})
  local h = sg.nn.linear(x * cfg.input_scale, 128, { name = "fc1", bias = false }) * (1 / cfg.input_scale) + b1
  local logits = sg.nn.linear(h:relu(), 10, { name = "fc2" })
  sg.loss(sg.softmax_cross_entropy(logits, y))
  sg.metric("accuracy", sg.accuracy(logits, y))
  sg.data.fashion_mnist{ image = x, label = y }
  sg.optimizer.adamw{ lr = 2e-3, weight_decay = 0 }
  sg.recipe(cfg.recipe)
)";

float accuracy_of(compiler::Graph& g, int64_t steps) {
  std::unique_ptr<Model> m;
  Status st = Model::load_bytes(compiler::serialize(g), "recipes.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(std::shared_ptr<const Model>(std::move(m)));
  return test::trained_accuracy(*s, steps, 3);
}

float train_recipe(const std::string& recipe, const std::string& input_scale = "1.0") {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g, {{"recipe", recipe}, {"input_scale", input_scale}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  return accuracy_of(g, 300);
}

}  // namespace

TEST_CASE("each recipe trains close to fp32 in a short run") {
  float ref = train_recipe("fp32");
  MESSAGE("fp32 accuracy after 300 steps: " << ref);
  CHECK(ref > 0.80f);
  for (const char* r : {"bf16", "fp8", "fp8-delayed", "mxfp8"}) {
    float acc = train_recipe(r);
    MESSAGE(std::string(r) << ": " << acc);
    CHECK_MESSAGE(acc > ref - 0.015f, r);
  }
  for (const char* r : {"fp4", "nvfp4"}) {
    float acc = train_recipe(r);
    MESSAGE(std::string(r) << ": " << acc);
    CHECK_MESSAGE(acc > ref - 0.03f, r);
  }
}

TEST_CASE("a badly scaled model trains under fp8 with the plan; a naive cast without scales does not") {
  // Inputs times 1e-5: below E4M3's smallest subnormal (2^-9) without a scale.
  float ref = train_recipe("fp32", "1e-5");
  float planned = train_recipe("fp8", "1e-5");
  compiler::Graph naive;
  Status st = test::compile_graph(kMlp, &naive, {{"recipe", "fp8"}, {"input_scale", "1e-5"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  for (compiler::Program& p : naive.programs)
    for (compiler::Op& op : p.ops)
      if (op.code == OpCode::Quantize) {
        ScaleSpec& spec = naive.tensors[op.out[0]].scale;
        spec.mode = ScaleMode::static_pow2;
        spec.static_log2 = 0;
      }
  float cast = accuracy_of(naive, 300);
  MESSAGE("inputs x 1e-5: fp32 " << ref << ", fp8 planned " << planned << ", fp8 naive cast " << cast);
  CHECK(planned > ref - 0.015f);
  CHECK(cast < ref - 0.2f);
}

TEST_CASE("recipe errors name what is wrong") {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g, {{"recipe", "fp99"}});
  CHECK(!st.ok());
  CHECK(st.message().find("unknown recipe 'fp99'") != std::string::npos);
  CHECK(st.message().find("fp8-delayed") != std::string::npos);

  compiler::Graph k;
  st = test::compile_graph(R"(
    local sg = require "sg"
    local x = sg.input("image", {4, 784})
    local y = sg.input("label", {4}, "i32")
    sg.loss(sg.softmax_cross_entropy(sg.nn.linear(x, 10, { name = "fc1" }), y))
    sg.optimizer.sgd{ lr = 0.1 }
    sg.recipe("fp8", { keep = { "fc9" } })
  )", &k);
  CHECK(!st.ok());
  CHECK(st.message().find("'fc9' names no matmul layer") != std::string::npos);
}
