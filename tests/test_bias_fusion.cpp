// The CPU backend's fusion of a linear layer's bias add into its GEMM
// (runtime/src/cpu_bias_fusion.h):
//  - a linear layer's output equals the product from gemm_f32 plus a separate
//    add, to the bit, fused or not (the product also read elsewhere: not fused);
//  - every linear layer with a bias in the GPT's programs is fused, under fp32
//    (matmul) and fp8 (qmatmul), and nothing else is;
//  - at O1-O3, where the plan may give a bias's bytes to the layer's output, the
//    fused GPT trains to the bits of the unfused one.
#include <random>

#include "backends.h"
#include "cpu/gemm.h"
#include "cpu_bias_fusion.h"
#include "harness.h"

using namespace sgrt;

namespace {

// x [5, 40] @ w^T + b, w [24, 40]; product_read_twice: the product is an output too.
std::string linear_model(bool product_read_twice) {
  return std::string(R"(
local sg = require "sg"
local x = sg.input("x", {5, 40})
local w = sg.param("w", {24, 40}, { "uniform", -1, 1 })
local b = sg.param("b", {24}, { "uniform", -1, 1 })
local p = sg.matmul(x, w, { trans_b = true })
local y = p + b
sg.output("y", y)
sg.loss(sg.mean(sg.mean(y)))
)") + (product_read_twice ? "sg.output(\"p\", p)\n" : "") + "sg.optimizer.sgd{ lr = 0.1 }\n";
}

int fusions(const Model& m, const std::string& program) {
  for (const ProgramInfo& p : m.programs())
    if (p.name == program) return static_cast<int>(find_bias_fusions(m, p).size());
  FAIL("no program " << program);
  return -1;
}

}  // namespace

TEST_CASE("a linear layer equals gemm_f32 plus a separate add, to the bit, fused or not") {
  for (bool twice : {false, true}) {
    CAPTURE(twice);
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(linear_model(twice), &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    CHECK(fusions(*m, "infer") == (twice ? 0 : 1));
    auto s = test::open_session(m);
    std::vector<float> x(5 * 40);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    test::write_vec(*s, "x", x);
    test::run(*s, "infer");
    std::vector<float> w = test::read_f32(*s, "w"), b = test::read_f32(*s, "b"), y = test::read_output(*s, "y");
    std::vector<float> expect(5 * 24);
    cpu::gemm_f32(false, true, 5, 24, 40, 1.0f, x.data(), 40, w.data(), 40, 0.0f, expect.data(), 24);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 24; ++j) expect[i * 24 + j] += b[j];
    REQUIRE(y.size() == expect.size());
    CHECK(std::memcmp(y.data(), expect.data(), y.size() * 4) == 0);
  }
}

TEST_CASE("every biased linear layer of the GPT is fused, under matmul and qmatmul") {
  // models/gpt.lua: per block q, k, v, the attention projection and the MLP's two
  // layers carry a bias; the tied head has none.
  for (const char* recipe : {"fp32", "fp8"}) {
    CAPTURE(recipe);
    auto m = test::compile_model_file("models/gpt.lua", {{"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"},
                                                         {"block", "8"}, {"batch", "2"}}, false, recipe);
    for (const char* program : {"train_step", "eval", "infer"}) {
      CAPTURE(program);
      CHECK(fusions(*m, program) == 6 * 2);
    }
  }
}

TEST_CASE("at O1-O3 the fused GPT trains to the unfused one's bits, its biases staged where they overlap the output") {
  // A bias is then a transient working copy, and the memory plan may hand its
  // bytes to the add's output: the fused product must read it from the copy made
  // before it writes (BiasFusion::stage_bias), or the layers after the first rows
  // add garbage. Three training steps with the fusion and without it must leave
  // every persistent tensor (weights, masters, moments, scales) and the loss the
  // same to the bit.
  const std::map<std::string, std::string> set{{"n_layer", "2"}, {"n_embd", "64"}, {"n_head", "2"},
                                               {"block", "16"}, {"batch", "4"}};
  for (const char* level : {"O1", "O2", "O3"}) {
    CAPTURE(level);
    auto m = test::compile_model_file("models/gpt.lua", set, false, "fp32", level);
    int staged = 0;
    for (const ProgramInfo& p : m->programs()) {
      std::vector<BiasFusion> f = find_bias_fusions(*m, p);
      if (p.name == "train_step") CHECK(f.size() == 6 * 2);
      for (const BiasFusion& x : f) staged += x.stage_bias;
    }
    CHECK(staged > 0);
    std::unique_ptr<Session> s[2];
    for (int fused = 0; fused < 2; ++fused) {
      std::unique_ptr<Backend> be;
      REQUIRE(make_cpu_backend(&be, fused == 1).ok());
      REQUIRE(Session::create(m, std::move(be), &s[fused]).ok());
      REQUIRE(s[fused]->init(1, 100).ok());
    }
    std::mt19937 rng(3);
    float loss[2] = {};
    for (int step = 0; step < 3; ++step) {
      for (const char* input : {"tokens", "targets"}) {
        std::vector<int32_t> v(4 * 16);
        for (int32_t& t : v) t = static_cast<int32_t>(rng() % 256);
        for (auto& x : s) test::write_vec(*x, input, v);
      }
      for (int i = 0; i < 2; ++i) loss[i] = test::loss_of(*s[i], "train_step");
      CHECK(std::memcmp(&loss[0], &loss[1], 4) == 0);
    }
    const std::vector<TensorInfo>& ts = m->tensors();
    int differ = 0;
    for (size_t id = 0; id < ts.size(); ++id) {
      if (!ts[id].persistent || ts[id].bytes == 0) continue;
      std::vector<uint8_t> a(ts[id].bytes), b(ts[id].bytes);
      REQUIRE(s[0]->read(static_cast<int>(id), a.data(), a.size()).ok());
      REQUIRE(s[1]->read(static_cast<int>(id), b.data(), b.size()).ok());
      if (a != b) {
        ++differ;
        INFO("differs: " << ts[id].name);
        CHECK(a == b);
      }
    }
    CHECK(differ == 0);
  }
}
