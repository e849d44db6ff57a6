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
  for (const char* r : {"bf16", "fp8", "fp8-delayed", "mxfp8", "fp8-row", "fp8-block", "fp8-static"}) {
    float acc = train_recipe(r);
    MESSAGE(std::string(r) << ": " << acc);
    CHECK_MESSAGE(acc > ref - 0.015f, r);
  }
  for (const char* r : {"fp4", "nvfp4", "nvfp4-train"}) {
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

namespace {

// The test loss after `steps` steps of kMlp under `recipe` with the given input
// scale, with or without the scale plan (--no-plan).
float test_loss(const std::string& recipe, const std::string& input_scale, bool plan, int64_t steps) {
  compiler::Graph g;
  Status st = test::compile_graph(kMlp, &g, {{"recipe", recipe}, {"input_scale", input_scale}}, plan);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(g), "recipes.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(std::shared_ptr<const Model>(std::move(m)));
  TrainOptions o;
  o.steps = steps;
  o.seed = 3;
  TrainResult r;
  st = train(*s, test::fashion(), o, &r);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return r.final_eval.loss;
}

}  // namespace

TEST_CASE("fp4 does not see a power-of-two rescaling of the first layer's input") {
  // Every fp4 scale is a power of two from a current amax (per row, per column
  // or per tensor), the clamp is a quantile and the DGE reads the weights' own
  // exponents: multiplying x by 2^k before fc1 and its output by 2^-k after it
  // must give bit-identical training, however far 2^k is from 1 (issue 23's
  // "badly scaled MLP": the scaling alone costs fp4 nothing). 1e3 and 1e-5 are
  // not powers of two, so they only round differently (within seed noise:
  // docs/recipes.md).
  for (bool plan : {true, false}) {
    const float ref = test_loss("fp4", "1.0", plan, 60);
    for (const char* s : {"1024", "0.0009765625", "7.62939453125e-06", "1099511627776"})
      CHECK_MESSAGE(test_loss("fp4", s, plan, 60) == ref, "input scale " << s << (plan ? "" : ", --no-plan"));
    // Not vacuous: a scale that is not a power of two rounds differently.
    CHECK(test_loss("fp4", "1000", plan, 60) != ref);
  }
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

namespace {

// A small MLP compiled with sg.recipe(recipe, {switches}); counts its train_step's ops.
struct Fp4Parts { int dge = 0, clamp = 0, channel_quantizes = 0, quantizes = 0; };

Status compile_fp4(const std::string& switches, Fp4Parts* parts, const std::string& recipe = "fp4") {
  compiler::Graph g;
  SG_TRY(test::compile_graph(R"(
    local sg = require "sg"
    local x = sg.input("image", {8, 784})
    local y = sg.input("label", {8}, "i32")
    local h = sg.nn.linear(x, 32, { name = "fc1" }):relu()
    sg.loss(sg.softmax_cross_entropy(sg.nn.linear(h, 10, { name = "fc2" }), y))
    sg.optimizer.sgd{ lr = 0.1 }
    sg.recipe(")" + recipe + R"(", {)" + switches + R"(})
  )", &g));
  for (const compiler::Program& p : g.programs) {
    if (p.name != "train_step") continue;
    for (const compiler::Op& op : p.ops) {
      parts->dge += op.code == OpCode::DgeGrad;
      parts->clamp += op.code == OpCode::ClampOutliers;
      if (op.code != OpCode::Quantize || g.tensors[op.out[0]].type.dtype != DType::e2m1) continue;
      QuantGranularity gr = g.tensors[op.out[0]].scale.granularity;
      parts->quantizes++;
      parts->channel_quantizes += gr == QuantGranularity::row || gr == QuantGranularity::column;
    }
  }
  return Status::Ok();
}

}  // namespace

TEST_CASE("fp4's DGE, outlier clamping and per-channel scales switch separately") {
  Fp4Parts all, no_dge, no_clamp, tensor;
  REQUIRE(compile_fp4("", &all).ok());
  // fc1 only (the head stays f32): its activation and weight in E2M1, per token / per input channel.
  CHECK(all.dge == 1);
  CHECK(all.clamp == 1);
  CHECK(all.quantizes == 2);
  CHECK(all.channel_quantizes == 2);
  REQUIRE(compile_fp4("dge = false", &no_dge).ok());
  CHECK(no_dge.dge == 0);
  CHECK(no_dge.clamp == 1);
  CHECK(no_dge.channel_quantizes == 2);
  REQUIRE(compile_fp4("clamp = false", &no_clamp).ok());
  CHECK(no_clamp.dge == 1);
  CHECK(no_clamp.clamp == 0);
  REQUIRE(compile_fp4("granularity = 'tensor', dge = false", &tensor).ok());
  CHECK(tensor.dge == 0);
  CHECK(tensor.clamp == 1);
  CHECK(tensor.quantizes == 2);
  CHECK(tensor.channel_quantizes == 0);

  Fp4Parts unused;
  Status st = compile_fp4("granularity = 'tensor'", &unused);  // the DGE reads per-channel weight exponents
  CHECK(st.message().find("'dge' needs the weights' per-channel scales") != std::string::npos);
  st = compile_fp4("clamp = 1.5", &unused);
  CHECK(st.message().find("'clamp' is a quantile in (0.5, 1)") != std::string::npos);
  st = compile_fp4("granularity = 'row'", &unused);
  CHECK(st.message().find(":8: sg.recipe: granularity must be \"channel\" or \"tensor\"") != std::string::npos);
  st = compile_fp4("dge = true", &unused, "fp8");
  CHECK(st.message().find("recipe 'fp8': 'dge' applies to E2M1 weights") != std::string::npos);
}

TEST_CASE("fp4 clamps and quantizes an activation that three layers read once per program") {
  // q, k and v of an attention block read the same normalized input: one
  // clamp_outliers and one E2M1 quantize of it in each program (each program
  // runs its own), three weight quantizes, and the three products read the
  // same clamped codes and the same outliers.
  compiler::Graph g;
  REQUIRE(test::compile_graph(R"(
    local sg = require "sg"
    local x = sg.input("image", {8, 784})
    local y = sg.input("label", {8}, "i32")
    local h = sg.nn.linear(x, 32, { name = "in" })
    local s = sg.nn.linear(h, 32, { name = "q" }) + sg.nn.linear(h, 32, { name = "k" }) + sg.nn.linear(h, 32, { name = "v" })
    sg.loss(sg.softmax_cross_entropy(sg.nn.linear(s:relu(), 10, { name = "head" }), y))
    sg.optimizer.sgd{ lr = 0.1 }
    sg.recipe("fp4")
  )", &g).ok());
  for (const compiler::Program& p : g.programs) {
    CAPTURE(p.name);
    std::map<int, int> clamps, quantizes;  // by source tensor
    std::set<int> outliers_read;
    for (const compiler::Op& op : p.ops) {
      if (op.code == OpCode::ClampOutliers) ++clamps[op.in[0]];
      if (op.code == OpCode::Quantize && g.tensors[op.out[0]].type.dtype == DType::e2m1) ++quantizes[op.in[0]];
      if (op.code == OpCode::MatMul && g.tensors[op.in[0]].name.find(".outliers") != std::string::npos) outliers_read.insert(op.in[0]);
    }
    // The image (in's input) and h (q, k and v's): two clamped activations.
    CHECK(clamps.size() == 2);
    for (auto& [src, n] : clamps) CHECK(n == 1);
    // Two clamped activations and four weights, each quantized once.
    CHECK(quantizes.size() == 6);
    for (auto& [src, n] : quantizes) CHECK(n == 1);
    CHECK(outliers_read.size() == 2);
  }
}
