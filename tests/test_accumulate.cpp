// Gradient accumulation (sg.train{accumulate = k}, compiler/accumulate.h):
// k micro-batches of b give one optimizer step whose gradient is the mean of
// theirs, so it must equal one step on the batch of k * b (every built-in loss
// is a mean over rows) to f32 rounding. The independent side is the same model
// compiled without accumulation on the big batch; the learning-rate schedule
// and the step counter must count optimizer steps.
#include <cmath>

#include "harness.h"
#include "sgrt/dataset.h"
#include "sgrt/quant.h"
#include "sgrt/trainer.h"

using namespace sgrt;

namespace {

// Byte embedding -> tanh -> output head over a text data set, block 8. The
// cosine schedule with warmup makes the learning rate depend on the step.
const char* kModel = R"(
local sg = require "sg"
local cfg = sg.config{ batch = 4, accumulate = 1 }
local x = sg.input("tokens", {cfg.batch, 8}, "i32")
local y = sg.input("targets", {cfg.batch, 8}, "i32")
local e = sg.param("embd", {256, 16}, {"normal", 0, 0.5})
local h = sg.tanh(sg.reshape(sg.embedding(e, x), {cfg.batch * 8, 16}))
local w = sg.param("head.w", {256, 16}, {"normal", 0, 0.2})
sg.loss(sg.softmax_cross_entropy(sg.matmul(h, w, {trans_b = true}), sg.reshape(y, {cfg.batch * 8})))
sg.data.text{ tokens = x, targets = y }
sg.optimizer.adamw{ lr = 0.02, weight_decay = 0.01, schedule = sg.schedule.cosine{ warmup = 2 } }
sg.train{ accumulate = cfg.accumulate }
)";

std::shared_ptr<const Model> model(int batch, int k) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kModel, &m, {{"batch", std::to_string(batch)}, {"accumulate", std::to_string(k)}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

std::vector<int32_t> bytes_at(const std::string& text, int64_t start, int64_t rows, int shift) {
  std::vector<int32_t> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < 8; ++j) v.push_back(static_cast<unsigned char>(text[(start + r) * 8 + j + shift]));
  return v;
}

// The largest elementwise |a - b| / (floor + |b|).
double max_gap(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (floor + std::abs(double(b[i]))));
  return worst;
}

const std::string kText = [] {
  std::string t;
  for (int i = 0; i < 4000; ++i) t += static_cast<char>('a' + (i * i + 3 * i) % 23);
  return t;
}();

}  // namespace

TEST_CASE("accumulate = 4 with batch 2: grad_step, then train_step; the memory plan holds the accumulators") {
  auto acc = model(2, 4), big = model(8, 1);
  CHECK(acc->find_program("grad_step") >= 0);
  CHECK(big->find_program("grad_step") < 0);
  for (std::string p : {"embd", "head.w"}) {
    int id = acc->find_tensor(p + ".grad_acc");
    REQUIRE(id >= 0);
    const TensorInfo& t = acc->tensors()[id];
    CHECK(t.persistent);
    CHECK(t.role == Role::grad);
    CHECK(t.type == acc->tensors()[acc->find_tensor(p)].type);
    CHECK(big->find_tensor(p + ".grad_acc") < 0);
  }
  // The accumulators are persistent f32 copies of the trained parameters' shapes.
  CHECK(acc->root().memory()->persistent_bytes() - model(2, 1)->root().memory()->persistent_bytes() >= (256 * 16 * 2) * 4);
}

TEST_CASE("accumulating 4 micro-batches of 2 equals one batch of 8: gradient, step count, learning rate, parameters") {
  auto acc = test::open_session(model(2, 4)), big = test::open_session(model(8, 1));
  REQUIRE(test::read_f32(*acc, "embd") == test::read_f32(*big, "embd"));  // the same initial values
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    for (int j = 0; j < 4; ++j) {
      test::write_vec(*acc, "tokens", bytes_at(kText, step * 8 + j * 2, 2, 0));
      test::write_vec(*acc, "targets", bytes_at(kText, step * 8 + j * 2, 2, 1));
      test::run(*acc, j < 3 ? "grad_step" : "train_step");
    }
    test::write_vec(*big, "tokens", bytes_at(kText, step * 8, 8, 0));
    test::write_vec(*big, "targets", bytes_at(kText, step * 8, 8, 1));
    test::run(*big, "train_step");
    // The mean of the micro-batch gradients is the big batch's gradient.
    for (std::string p : {"embd", "head.w"}) {
      CAPTURE(p);
      CHECK(max_gap(test::read_f32(*acc, p + ".grad.mean"), test::read_f32(*big, p + ".grad")) < 1e-5);
      auto zero = test::read_f32(*acc, p + ".grad_acc");
      CHECK(std::all_of(zero.begin(), zero.end(), [](float v) { return v == 0.f; }));  // ready for the next step
      // AdamW divides by sqrt(v): where a gradient is ~0 its rounding shows
      // in the step, so parameters agree to a fraction of the step (lr 0.02).
      CHECK(max_gap(test::read_f32(*acc, p), test::read_f32(*big, p), 1.0) < 1e-5);
    }
    std::vector<int32_t> ta(kTrainStateLen), tb(kTrainStateLen);
    REQUIRE(acc->read(acc->model().train_state(), ta.data(), ta.size() * 4).ok());
    REQUIRE(big->read(big->model().train_state(), tb.data(), tb.size() * 4).ok());
    CHECK(ta[kStep] == step + 1);
    CHECK(ta[kStep] == tb[kStep]);
    float la = 0, lb = 0;
    REQUIRE(acc->read_scalar(acc->model().lr(), &la).ok());
    REQUIRE(big->read_scalar(big->model().lr(), &lb).ok());
    CHECK(la == lb);
  }
}

TEST_CASE("sgrt::train with accumulate = 4 and batch 1 follows the batch-4 run: the same examples a step, losses, parameters") {
  test::TempFile f(".txt", kText);
  std::unique_ptr<Dataset> d;
  REQUIRE(open_text_dataset(f.path, *model(1, 4), &d).ok());
  auto run = [&](int batch, int k, TrainResult* r) {
    auto s = test::open_session(model(batch, k));
    TrainOptions o;
    o.steps = 5;
    o.seed = 7;
    o.log_every = 1;
    Status st = train(*s, *d, o, r);
    REQUIRE_MESSAGE(st.ok(), st.message());
    return test::read_f32(*s, "head.w");
  };
  TrainResult ra, rb;
  auto wa = run(1, 4, &ra), wb = run(4, 1, &rb);
  REQUIRE(ra.losses.size() == 5);
  REQUIRE(rb.losses.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    CHECK(ra.losses[i].first == rb.losses[i].first);
    CHECK(ra.losses[i].second == doctest::Approx(rb.losses[i].second).epsilon(1e-5));
  }
  // As above, to a fraction of AdamW's step: a parameter whose gradient is ~0 moves
  // by ~1e-5 with the rounding of its gradient's sums alone (head.w[1325], -0.15,
  // moves 2e-5 between two summation orders), more than 1e-5 of its value.
  CHECK(max_gap(wa, wb, 1.0) < 1e-5);
  CHECK(ra.final_eval.loss == doctest::Approx(rb.final_eval.loss).epsilon(1e-5));
}

TEST_CASE("accumulate below 1 is a script error") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kModel, &m, {{"accumulate", "0"}});
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("accumulate must be at least 1") != std::string::npos);
}
