// Training is reproducible: the same seed gives the same loss curve bit for
// bit (real Fashion-MNIST, the README's model shrunk to a small batch), also
// on a different number of threads; a different seed gives a different curve.
#include <cmath>
#include <cstring>

#include "cpu/parallel.h"
#include "fashion.h"

using namespace sgrt;

namespace {

constexpr int64_t kSteps = 30;

struct Run {
  std::vector<std::pair<int64_t, float>> losses;
  float eval_loss = 0;
  std::vector<float> fc1_w;
};

std::shared_ptr<const Model> model() {
  static std::shared_ptr<const Model> m = [] {
    std::shared_ptr<const Model> out;
    Status st = test::compile_lua(test::fashion_mlp_lua(), &out, {{"batch", "32"}, {"hidden", "64"}});
    REQUIRE_MESSAGE(st.ok(), st.message());
    return out;
  }();
  return m;
}

Run train_once(uint64_t seed) {
  auto s = test::open_session(model());
  TrainOptions o;
  o.steps = kSteps;
  o.seed = seed;
  o.log_every = 1;
  TrainResult r;
  Status st = train(*s, test::fashion(), o, &r);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(r.losses.size() == static_cast<size_t>(kSteps));
  for (int64_t i = 0; i < kSteps; ++i) REQUIRE(r.losses[i].first == i + 1);
  return Run{r.losses, r.final_eval.loss, test::read_f32(*s, "fc1.w")};
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> curve(const Run& r) {
  std::vector<float> v;
  for (auto& [step, loss] : r.losses) v.push_back(loss);
  return v;
}

}  // namespace

TEST_CASE("the same seed gives the same loss curve bit for bit; another seed does not") {
  REQUIRE(test::fashion().size(Split::train) == 60000);
  REQUIRE(test::fashion().size(Split::test) == 10000);
  Run a = train_once(7), b = train_once(7), c = train_once(8);
  std::vector<float> ca = curve(a), cb = curve(b), cc = curve(c);

  // The curve is a training curve: finite, starting near ln(10), going down.
  for (float l : ca) CHECK(std::isfinite(l));
  CHECK(ca.front() > 1.5f);
  CHECK(ca.front() < 3.5f);
  float tail = 0;
  for (int i = kSteps - 5; i < kSteps; ++i) tail += ca[i] / 5;
  CHECK(tail < ca.front());

  CHECK(bit_identical(ca, cb));
  CHECK(bit_identical(a.fc1_w, b.fc1_w));
  CHECK(std::memcmp(&a.eval_loss, &b.eval_loss, sizeof(float)) == 0);

  CHECK(!bit_identical(ca, cc));
  int differ = 0;
  for (int i = 0; i < kSteps; ++i) differ += ca[i] != cc[i];
  MESSAGE("seed 7 vs seed 8: " << differ << " of " << kSteps << " logged losses differ");
  CHECK(differ > kSteps / 2);  // a different init and shuffle, not a one-off difference
  CHECK(!bit_identical(a.fc1_w, c.fc1_w));
}

TEST_CASE("the loss curve does not depend on the number of threads") {
  int saved = cpu::num_threads();
  cpu::set_num_threads(1);
  Run one = train_once(11);
  cpu::set_num_threads(3);
  Run three = train_once(11);
  cpu::set_num_threads(saved);
  CHECK(bit_identical(curve(one), curve(three)));
  CHECK(bit_identical(one.fc1_w, three.fc1_w));
}

namespace {

// A linear classifier from zero weights: the seed can only change the data order.
std::vector<float> zero_init_curve(const std::string& shuffle, uint64_t seed) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.input("image", {16, 784})
    local y = sg.input("label", {16}, "i32")
    local w = sg.param("w", {10, 784}, {"zeros"})
    local logits = sg.matmul(x, w, {trans_b = true})
    sg.loss(sg.softmax_cross_entropy(logits, y))
    sg.data.fashion_mnist{ image = x, label = y, shuffle = )" + shuffle + R"( }
    sg.optimizer.sgd{ lr = 0.1, momentum = 0 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  TrainOptions o;
  o.steps = 8;
  o.seed = seed;
  o.log_every = 1;
  TrainResult r;
  st = train(*s, test::fashion(), o, &r);
  REQUIRE_MESSAGE(st.ok(), st.message());
  Run run{r.losses, 0, {}};
  return curve(run);
}

}  // namespace

TEST_CASE("sg.data{shuffle = false} trains on the data set's order whatever the seed; shuffle = true does not") {
  CHECK(bit_identical(zero_init_curve("false", 1), zero_init_curve("false", 2)));
  CHECK(!bit_identical(zero_init_curve("true", 1), zero_init_curve("true", 2)));
}
