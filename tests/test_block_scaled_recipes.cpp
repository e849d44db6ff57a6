// The block-scaled recipes (nvfp4, mxfp8) through whole programs, against fp32
// on the same weights: a zero-initialised weight trains under nvfp4; eval and
// infer quantize with their own tensor scale (no training step needed, and an
// input 4 times larger moves the loss as it moves fp32's); an infinity in an MX
// block makes the step non-finite, so the trainer skips it.
#include <cmath>

#include "harness.h"
#include "sgrt/quant.h"

using namespace sgrt;

namespace {

// x [8, 32] -> a quantized matmul with w [32, 16] -> the kept f32 head -> loss.
std::string model(const std::string& recipe, const std::string& w_init, const std::string& lr) {
  return R"(
    local sg = require "sg"
    local x = sg.input("x", {8, 32})
    local y = sg.input("y", {8}, "i32")
    local w = sg.param("w", {32, 16}, )" + w_init + R"()
    local logits = sg.nn.linear(x:matmul(w), 4, { name = "head" })
    sg.loss(sg.softmax_cross_entropy(logits, y))
    sg.optimizer.sgd{ lr = )" + lr + R"( }
    sg.recipe ")" + recipe + "\"\n";
}

std::unique_ptr<Session> session(const std::string& recipe, const std::string& w_init, const std::string& lr = "0.1") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(model(recipe, w_init, lr), &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::vector<float> x(8 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1 + (i % 5));
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "y", std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3});
  return s;
}

void scale_input(Session& s, float k) {
  std::vector<float> x = test::read_f32(s, "x");
  for (float& v : x) v *= k;
  test::write_vec(s, "x", x);
}

int32_t nonfinite_total(const Session& s) {
  int32_t ts[kTrainStateLen] = {};
  REQUIRE(s.read(s.model().train_state(), ts, sizeof ts).ok());
  return ts[kNonfiniteTotal];
}

}  // namespace

TEST_CASE("a zero-initialised weight trains under nvfp4: finite losses, no skipped step, the weight moves") {
  auto s = session("nvfp4", R"({"zeros"})");
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    test::run(*s, "train_step");
    REQUIRE(s->read_scalar(s->model().loss(), &last).ok());
    CHECK(std::isfinite(last));
    if (step == 0) first = last;
  }
  CHECK(nonfinite_total(*s) == 0);
  CHECK(last < first);
  float wmax = 0;
  for (float v : test::read_f32(*s, "w")) wmax = std::max(wmax, std::fabs(v));
  CHECK(wmax > 0);
}

TEST_CASE("nvfp4 eval before any training step gives fp32's loss; an input 4 times larger moves it as it moves fp32's") {
  const std::string init = R"({"normal", 0, 1})";
  auto nv = session("nvfp4", init, "1e-20"), ref = session("fp32", init, "1e-20");  // the weights stay put
  REQUIRE(test::read_f32(*nv, "w") == test::read_f32(*ref, "w"));
  const float l32 = test::loss_of(*ref), lnv = test::loss_of(*nv);
  MESSAGE("eval loss before any step: fp32 " << l32 << ", nvfp4 " << lnv);
  // NVFP4 reconstructs x and w here with a relative RMS error of 8-10% (scripts/
  // quant_reference.py), and logits this large carry it into the loss: 15%. The
  // defects this guards against gave 0, or a loss that ignored a 4x input.
  CHECK(lnv == doctest::Approx(l32).epsilon(0.15));
  // A training step leaves its tensor scale in the state; eval on 4 x must not use it.
  test::run(*nv, "train_step");
  test::run(*ref, "train_step");
  scale_input(*nv, 4);
  scale_input(*ref, 4);
  const float l32x4 = test::loss_of(*ref), lnvx4 = test::loss_of(*nv);
  MESSAGE("eval loss on 4 x after a step: fp32 " << l32x4 << ", nvfp4 " << lnvx4);
  CHECK(std::fabs(l32x4 - l32) > 0.3f * l32);  // the case means something
  CHECK(lnvx4 == doctest::Approx(l32x4).epsilon(0.15));
}

TEST_CASE("an infinity in an MX block gives the block the NaN scale: the step is non-finite and skipped") {
  auto s = session("mxfp8", R"({"normal", 0, 1})");
  const std::vector<float> w0 = test::read_f32(*s, "w");
  std::vector<float> x = test::read_f32(*s, "x");
  x[40] = INFINITY;  // E4M3 would saturate it to a finite 448 times the scale
  test::write_vec(*s, "x", x);
  test::run(*s, "train_step");
  CHECK(nonfinite_total(*s) == 1);
  CHECK(test::read_f32(*s, "w") == w0);
}
