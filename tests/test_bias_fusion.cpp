// The CPU backend's fusion of a linear layer's bias add into its GEMM
// (runtime/src/cpu_bias_fusion.h):
//  - a linear layer's output equals the product from gemm_f32 plus a separate
//    add, to the bit, fused or not (the product also read elsewhere: not fused);
//  - every linear layer with a bias in the GPT's programs is fused, under fp32
//    (matmul) and fp8 (qmatmul), and nothing else is.
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
