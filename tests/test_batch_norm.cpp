// nn.batch_norm (batch statistics through ordinary ops, running statistics
// through running_stat) against the definition written out here in double:
// PyTorch's BatchNorm2d in training (biased batch variance for normalizing, the
// unbiased one for the running update, momentum 0.1) and in eval (the running
// statistics); its training-mode gradient against central finite differences
// of the training loss; recomputation, checkpoints and export keeping the
// running statistics right; and the errors bad options get.
#include <cmath>
#include <cstring>
#include <random>

#include "harness.h"
#include "sgrt/checkpoint.h"
#include "tool_runner.h"
#include "sgrt/export.h"

using namespace sgrt;

namespace {

constexpr double kBnEps = 1e-5;

// y = bn(x) over the channels of x [n, h, w, c]; loss = sum(y * r); x and r
// are parameters (x gets a gradient); SGD with lr 1e-30 leaves them in place.
std::string bn_model(int64_t n, int64_t h, int64_t w, int64_t c, const std::string& opts = "") {
  auto dims = std::to_string(n) + ", " + std::to_string(h) + ", " + std::to_string(w) + ", " + std::to_string(c);
  return "local sg = require \"sg\"\nlocal x = sg.param(\"x\", {" + dims + "})\nlocal r = sg.param(\"r\", {" + dims +
         "})\nlocal y = sg.nn.batch_norm(x, {name = \"bn\"" + opts +
         "})\nsg.output(\"y\", y)\nsg.loss(sg.sum(sg.reshape(y * r, {-1})))\nsg.optimizer.sgd{ lr = 1e-30 }\n";
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

// Per-channel mean and biased variance of x viewed as [rows, c], in double.
struct Moments {
  std::vector<double> mean, var;
};
Moments moments(const std::vector<float>& x, int64_t c) {
  const int64_t rows = static_cast<int64_t>(x.size()) / c;
  Moments m{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) m.mean[j] += x[i * c + j];
  for (double& v : m.mean) v /= static_cast<double>(rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) m.var[j] += (x[i * c + j] - m.mean[j]) * (x[i * c + j] - m.mean[j]);
  for (double& v : m.var) v /= static_cast<double>(rows);
  return m;
}

// (x - mean) / sqrt(var + eps) * g + b per channel.
std::vector<double> normalize(const std::vector<float>& x, const std::vector<double>& mean, const std::vector<double>& var,
                              const std::vector<float>& g, const std::vector<float>& b) {
  const size_t c = mean.size();
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    size_t j = i % c;
    y[i] = (x[i] - mean[j]) / std::sqrt(var[j] + kBnEps) * g[j] + b[j];
  }
  return y;
}

double dot(const std::vector<double>& y, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
  return s;
}

std::shared_ptr<const Model> compile_bn(const std::string& lua) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}
std::unique_ptr<Session> open_bn(const std::string& lua) { return test::open_session(compile_bn(lua)); }

void check_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])));
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("batch norm: training normalizes with the batch, running statistics follow PyTorch's update, eval uses them") {
  const int64_t n = 3, h = 4, w = 5, c = 6, rows = n * h * w;
  auto s = open_bn(bn_model(n, h, w, c));
  std::vector<float> r = uniform(rows * c, 2), g = uniform(c, 3, 0.5f, 2.f), b = uniform(c, 4);
  test::write_vec(*s, "r", r);
  test::write_vec(*s, "bn.w", g);
  test::write_vec(*s, "bn.b", b);
  // The running statistics start at PyTorch's mean 0, variance 1.
  CHECK(test::read_f32(*s, "bn.running_mean") == std::vector<float>(c, 0.f));
  CHECK(test::read_f32(*s, "bn.running_var") == std::vector<float>(c, 1.f));
  std::vector<double> run_mean(c, 0.0), run_var(c, 1.0);
  std::vector<float> x;
  for (uint32_t step = 0; step < 3; ++step) {
    CAPTURE(step);
    x = uniform(rows * c, 10 + step, -2.f, 3.f);
    for (float& e : x) e = e * (1 + step);  // a different spread each step
    test::write_vec(*s, "x", x);
    Moments mo = moments(x, c);
    double want = dot(normalize(x, mo.mean, mo.var, g, b), r);
    CHECK(test::loss_of(*s, "train_step") == doctest::Approx(want).epsilon(1e-5));
    for (int64_t j = 0; j < c; ++j) {
      run_mean[j] = 0.9 * run_mean[j] + 0.1 * mo.mean[j];
      run_var[j] = 0.9 * run_var[j] + 0.1 * mo.var[j] * rows / (rows - 1);
    }
    check_near(test::read_f32(*s, "bn.running_mean"), run_mean, 1e-6);
    check_near(test::read_f32(*s, "bn.running_var"), run_var, 1e-6);
  }
  // eval and infer normalize with the running statistics and leave them alone.
  test::run(*s, "infer");
  check_near(test::read_output(*s, "y"), normalize(x, run_mean, run_var, g, b), 1e-5);
  CHECK(test::loss_of(*s, "eval") == doctest::Approx(dot(normalize(x, run_mean, run_var, g, b), r)).epsilon(1e-5));
  check_near(test::read_f32(*s, "bn.running_mean"), run_mean, 1e-6);
  check_near(test::read_f32(*s, "bn.running_var"), run_var, 1e-6);
}

TEST_CASE("batch norm: momentum and eps as given; affine = false has no gain or bias") {
  const int64_t n = 4, c = 3;
  auto s = open_bn(bn_model(n, 1, 1, c, ", momentum = 0.25, eps = 0.5, affine = false"));
  CHECK(s->model().find_tensor("bn.w") < 0);
  CHECK(s->model().find_tensor("bn.b") < 0);
  std::vector<float> x = uniform(n * c, 5), r = uniform(n * c, 6);
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "r", r);
  Moments mo = moments(x, c);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mo.mean[i % c]) / std::sqrt(mo.var[i % c] + 0.5);
  CHECK(test::loss_of(*s, "train_step") == doctest::Approx(dot(y, r)).epsilon(1e-5));
  std::vector<double> rm(c), rv(c);
  for (int64_t j = 0; j < c; ++j) {
    rm[j] = 0.25 * mo.mean[j];
    rv[j] = 0.75 + 0.25 * mo.var[j] * n / (n - 1);
  }
  check_near(test::read_f32(*s, "bn.running_mean"), rm, 1e-6);
  check_near(test::read_f32(*s, "bn.running_var"), rv, 1e-6);
}

// Error budget as tests/test_gradcheck.cpp's: eps 1e-2 on O(1) inputs,
// |g - g_fd| <= 1e-3 + 5e-3 |g_fd|; a dropped term of the batch statistics'
// gradient (through the mean or the variance) is off by O(0.1) here.
TEST_CASE("batch norm: the training-mode gradient of x, gain and bias matches finite differences") {
  const int64_t n = 2, h = 2, w = 3, c = 4, rows = n * h * w;
  auto s = open_bn(bn_model(n, h, w, c));
  std::map<std::string, std::vector<float>> values = {
      {"x", uniform(rows * c, 7)}, {"r", uniform(rows * c, 8)}, {"bn.w", uniform(c, 9, 0.5f, 2.f)}, {"bn.b", uniform(c, 10)}};
  auto write_all = [&] {
    for (auto& [name, v] : values) test::write_vec(*s, name, v);
  };
  write_all();
  test::run(*s, "train_step");
  std::map<std::string, std::vector<float>> grads;
  for (const char* name : {"x", "bn.w", "bn.b"}) grads[name] = test::read_f32(*s, std::string(name) + ".grad");
  int checked = 0;
  const float kFdEps = 1e-2f;
  for (auto& [name, grad] : grads) {
    std::vector<float>& p = values[name];
    for (size_t i = 0; i < p.size(); ++i) {
      INFO(name << "[" << i << "]: analytic " << grad[i]);
      const float keep = p[i];
      double l[2];
      for (int k = 0; k < 2; ++k) {
        p[i] = keep + (k ? -kFdEps : kFdEps);
        write_all();
        l[k] = test::loss_of(*s, "train_step");
      }
      p[i] = keep;
      double fd = (l[0] - l[1]) / (2 * kFdEps);
      INFO("finite differences " << fd);
      CHECK(std::fabs(grad[i] - fd) <= 1e-3 + 5e-3 * std::fabs(fd));
      ++checked;
    }
  }
  CHECK(checked == rows * c + 2 * c);
}

TEST_CASE("batch norm inside sg.checkpoint: recomputed in backward, the same step bit for bit, statistics updated once") {
  auto model = [](bool checkpoint) {
    std::string f = "local function f(v) return sg.nn.batch_norm(sg.nn.linear(v, 6, {name = \"fc\"}), {name = \"bn\"}):tanh() end\n";
    return "local sg = require \"sg\"\nlocal x = sg.input(\"x\", {8, 5})\nlocal y = sg.input(\"y\", {8}, \"i32\")\n" + f +
           "local hid = " + (checkpoint ? "sg.checkpoint(f, x)" : "f(x)") +
           "\nsg.loss(sg.softmax_cross_entropy(sg.nn.linear(hid, 3, {name = \"out\"}), y))\nsg.optimizer.sgd{ lr = 0.1 }\n";
  };
  auto plain = open_bn(model(false)), ckpt = open_bn(model(true));
  int recomputed = 0;
  for (const TensorInfo& t : ckpt->model().tensors()) recomputed += t.name.starts_with("running_stat") && t.name.ends_with(".recomputed");
  CHECK(recomputed == 2);  // mean and variance
  for (uint32_t step = 0; step < 3; ++step) {
    CAPTURE(step);
    std::vector<float> x = uniform(40, 20 + step);
    std::vector<int32_t> y = {0, 1, 2, 0, 1, 2, 0, 1};
    for (Session* s : {plain.get(), ckpt.get()}) {
      test::write_vec(*s, "x", x);
      test::write_vec(*s, "y", y);
    }
    float la = test::loss_of(*plain, "train_step"), lb = test::loss_of(*ckpt, "train_step");
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    for (const char* t : {"fc.w", "bn.w", "bn.b", "bn.running_mean", "bn.running_var"}) {
      CAPTURE(t);
      CHECK(same_bits(test::read_f32(*plain, t), test::read_f32(*ckpt, t)));
    }
  }
  // Updated once per step: after three steps from 0, the running mean is 1 - 0.9^3 = 0.271 of the way, not 1 - 0.9^6.
  CHECK_FALSE(same_bits(test::read_f32(*ckpt, "bn.running_mean"), std::vector<float>(6, 0.f)));
}

TEST_CASE("batch norm: a checkpoint and an exported graph keep the running statistics") {
  const int64_t n = 2, h = 3, w = 2, c = 5;
  auto model = compile_bn(bn_model(n, h, w, c));
  auto s = test::open_session(model);
  for (uint32_t step = 0; step < 2; ++step) {
    test::write_vec(*s, "x", uniform(n * h * w * c, 30 + step, -3.f, 5.f));
    test::run(*s, "train_step");
  }
  std::vector<float> x = uniform(n * h * w * c, 40);
  test::write_vec(*s, "x", x);
  test::run(*s, "infer");
  std::vector<float> y = test::read_output(*s, "y"), rm = test::read_f32(*s, "bn.running_mean"),
                     rv = test::read_f32(*s, "bn.running_var");
  REQUIRE_FALSE(same_bits(rm, std::vector<float>(c, 0.f)));

  test::TempDir dir;
  const std::string ck = dir.path + "/ck";
  REQUIRE(save_checkpoint(*s, ck, 2).ok());
  auto resumed = test::open_session(model);
  int64_t step = 0;
  Status st = load_checkpoint(*resumed, ck, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(same_bits(test::read_f32(*resumed, "bn.running_mean"), rm));
  CHECK(same_bits(test::read_f32(*resumed, "bn.running_var"), rv));

  const std::string sg_file = dir.path + "/bn.sg";
  ExportOptions opts;
  opts.infer_only = true;
  st = export_to_file(*s, opts, sg_file);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> exported;
  st = Model::load_file(sg_file, &exported);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto edge = test::open_session(std::shared_ptr<const Model>(std::move(exported)), "cpu", 99);
  test::write_vec(*edge, "x", x);
  test::run(*edge, "infer");
  CHECK(same_bits(test::read_output(*edge, "y"), y));
}

TEST_CASE("batch norm: bad options and inputs fail at the script's line") {
  struct Bad {
    const char* layer;
    const char* message;
  };
  for (const Bad& b : {
           Bad{"sg.nn.batch_norm(x, {momentun = 0.1})", "nn.batch_norm: unknown option 'momentun' (did you mean 'momentum'?"},
           Bad{"sg.nn.batch_norm(x, {momentum = 1.5})", "nn.batch_norm: momentum must lie in [0, 1]"},
           Bad{"sg.nn.batch_norm(x, {eps = 0})", "nn.batch_norm: eps must be a positive number"},
           Bad{"sg.nn.batch_norm(sg.reshape(x, {-1}))", "nn.batch_norm: 'bn1' needs more than one value per channel (x is [12])"},
           Bad{"sg.nn.batch_norm(sg.reshape(x, {1, 12}))", "needs more than one value per channel (x is [1, 12])"},
       }) {
    std::string lua = "local sg = require \"sg\"\nlocal x = sg.param(\"x\", {4, 3})\nlocal y = " + std::string(b.layer) +
                      "\nsg.loss(sg.sum(sg.reshape(y, {-1})))\nsg.optimizer.sgd{ lr = 0.1 }\n";
    std::shared_ptr<const Model> m;
    Status st = test::compile_lua(lua, &m);
    INFO(b.layer);
    REQUIRE_FALSE(st.ok());
    CHECK_MESSAGE(st.message().find(b.message) != std::string::npos, st.message());
    CHECK_MESSAGE(st.message().find(".lua:3") != std::string::npos, st.message());
  }
}
