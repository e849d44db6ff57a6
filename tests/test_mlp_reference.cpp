// The compiled MLP against a straightforward double-precision evaluation of the
// same network written out here by hand: loss and logits of the eval / infer
// programs, the four parameter gradients of train_step, and the parameters
// after two AdamW steps (PyTorch's AdamW formulas; weight decay on matrices
// only, as compiler/optimizer.cpp documents: biases sit in a no-decay group).
#include <cmath>
#include <random>

#include "harness.h"

using namespace sgrt;

namespace {

constexpr int B = 8, I = 784, H = 32, C = 10;
// The hyperparameters as the IR stores them: FP32 (sg.fbs Optimizer). PyTorch
// likewise holds 0.999 etc. as given; what differs is only their rounding.
constexpr double kLr = 1e-2f, kBeta1 = 0.9f, kBeta2 = 0.999f, kAdamEps = 1e-8f, kDecay = 0.1f;

const char* kModel = R"(
local sg = require "sg"
local nn = sg.nn
local x = sg.input("image", {8, 784})
local y = sg.input("label", {8}, "i32")
local h = nn.linear(x, 32, { name = "fc1" }):relu()
local logits = nn.linear(h, 10, { name = "fc2" })
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.output("logits", logits)
sg.optimizer.adamw{ lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.1,
                    schedule = sg.schedule.constant() }
)";

using Vec = std::vector<double>;

struct Params {
  Vec w1, b1, w2, b2;  // w1 [H, I], b1 [H], w2 [C, H], b2 [C]: PyTorch's Linear layout
};

struct Forward {
  Vec pre, h, z;  // [B, H], [B, H], [B, C]
  double loss = 0;
};

Forward forward(const Params& p, const Vec& x, const std::vector<int32_t>& y) {
  Forward f;
  f.pre.assign(B * H, 0);
  f.h.assign(B * H, 0);
  f.z.assign(B * C, 0);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      double s = p.b1[j];
      for (int i = 0; i < I; ++i) s += x[b * I + i] * p.w1[j * I + i];
      f.pre[b * H + j] = s;
      f.h[b * H + j] = s > 0 ? s : 0;
    }
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < C; ++k) {
      double s = p.b2[k];
      for (int j = 0; j < H; ++j) s += f.h[b * H + j] * p.w2[k * H + j];
      f.z[b * C + k] = s;
    }
  for (int b = 0; b < B; ++b) {
    double m = f.z[b * C];
    for (int k = 1; k < C; ++k) m = std::max(m, f.z[b * C + k]);
    double se = 0;
    for (int k = 0; k < C; ++k) se += std::exp(f.z[b * C + k] - m);
    f.loss += (m + std::log(se) - f.z[b * C + y[b]]) / B;
  }
  return f;
}

Params backward(const Params& p, const Forward& f, const Vec& x, const std::vector<int32_t>& y) {
  Params g{Vec(H * I, 0), Vec(H, 0), Vec(C * H, 0), Vec(C, 0)};
  Vec dz(B * C), dpre(B * H, 0);
  for (int b = 0; b < B; ++b) {
    double m = f.z[b * C];
    for (int k = 1; k < C; ++k) m = std::max(m, f.z[b * C + k]);
    double se = 0;
    for (int k = 0; k < C; ++k) se += std::exp(f.z[b * C + k] - m);
    for (int k = 0; k < C; ++k) dz[b * C + k] = (std::exp(f.z[b * C + k] - m) / se - (k == y[b] ? 1 : 0)) / B;
  }
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < C; ++k) {
      g.b2[k] += dz[b * C + k];
      for (int j = 0; j < H; ++j) g.w2[k * H + j] += dz[b * C + k] * f.h[b * H + j];
    }
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      double s = 0;
      for (int k = 0; k < C; ++k) s += dz[b * C + k] * p.w2[k * H + j];
      dpre[b * H + j] = f.pre[b * H + j] > 0 ? s : 0;
    }
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      g.b1[j] += dpre[b * H + j];
      for (int i = 0; i < I; ++i) g.w1[j * I + i] += dpre[b * H + j] * x[b * I + i];
    }
  return g;
}

// torch.optim.AdamW, one step t (1-based), on one tensor.
void adamw(Vec* p, const Vec& g, Vec* m, Vec* v, int t, double decay) {
  for (size_t i = 0; i < p->size(); ++i) {
    (*p)[i] *= 1 - kLr * decay;
    (*m)[i] = kBeta1 * (*m)[i] + (1 - kBeta1) * g[i];
    (*v)[i] = kBeta2 * (*v)[i] + (1 - kBeta2) * g[i] * g[i];
    double mhat = (*m)[i] / (1 - std::pow(kBeta1, t)), vhat = (*v)[i] / (1 - std::pow(kBeta2, t));
    (*p)[i] -= kLr * mhat / (std::sqrt(vhat) + kAdamEps);
  }
}

Vec uniform(size_t n, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(static_cast<float>(lo), static_cast<float>(hi));
  Vec v(n);
  for (double& x : v) x = u(rng);  // float values: exactly representable on both sides
  return v;
}

std::vector<float> to_f32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }
Vec to_f64(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// max |a - b| / (rtol |b| + atol_frac * max|b|): <= 1 passes.
double worst(const Vec& a, const Vec& b, double rtol, double atol_frac) {
  REQUIRE(a.size() == b.size());
  double mx = 0, w = 0;
  for (double x : b) mx = std::max(mx, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]) / (rtol * std::abs(b[i]) + atol_frac * mx + 1e-30));
  return w;
}

// The gradient tensor that train_step's optimizer update reads for `param`.
std::vector<float> grad_of(const Session& s, const std::string& param) {
  const Model& m = s.model();
  int pid = test::tensor_id(s, param);
  for (const OpInfoLoaded& op : m.programs()[m.find_program("train_step")].ops)
    if (op.code == OpCode::AdamwUpdate && op.in[0] == pid) {
      std::vector<float> g(numel(m.tensors()[op.in[1]].type.shape));
      REQUIRE(s.read(op.in[1], g.data(), g.size() * sizeof(float)).ok());
      return g;
    }
  FAIL("no AdamW update for " << param);
  return {};
}

struct Fixture {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Session> s;
  Params p;
  Vec x;
  std::vector<int32_t> y;
  std::mt19937 rng{20240611};

  Fixture() {
    Status st = test::compile_lua(kModel, &model);
    REQUIRE_MESSAGE(st.ok(), st.message());
    s = test::open_session(model);
    p.w1 = uniform(H * I, -1 / 28.0, 1 / 28.0, rng);
    p.b1 = uniform(H, -1 / 28.0, 1 / 28.0, rng);
    p.w2 = uniform(C * H, -0.5, 0.5, rng);
    p.b2 = uniform(C, -0.5, 0.5, rng);
    test::write_vec(*s, "fc1.w", to_f32(p.w1));
    test::write_vec(*s, "fc1.b", to_f32(p.b1));
    test::write_vec(*s, "fc2.w", to_f32(p.w2));
    test::write_vec(*s, "fc2.b", to_f32(p.b2));
    new_batch();
  }
  void new_batch() {
    x = uniform(B * I, 0.0, 1.0, rng);  // pixel intensities
    y.resize(B);
    for (int32_t& l : y) l = static_cast<int32_t>(rng() % C);
    test::write_vec(*s, "image", to_f32(x));
    test::write_vec(*s, "label", y);
  }
};

}  // namespace

TEST_CASE("eval loss and infer logits equal the hand-written double-precision MLP") {
  Fixture f;
  Forward ref = forward(f.p, f.x, f.y);
  double loss = test::loss_of(*f.s, "eval");
  MESSAGE("loss: sgrt " << loss << ", reference " << ref.loss);
  CHECK(std::abs(loss - ref.loss) <= 1e-5 * std::abs(ref.loss));
  CHECK(ref.loss > 1.0);  // not a degenerate (near-zero) loss

  test::run(*f.s, "infer");
  int logits = -1;
  for (auto& [name, id] : f.s->model().outputs())
    if (name == "logits") logits = id;
  REQUIRE(logits >= 0);
  std::vector<float> zf(B * C);
  REQUIRE(f.s->read(logits, zf.data(), zf.size() * sizeof(float)).ok());
  Vec z = to_f64(zf);
  double w = worst(z, ref.z, 1e-5, 1e-5);
  MESSAGE("logits: worst error " << w << " of tolerance");
  CHECK(w <= 1.0);

  // The reference is sensitive to what it is compared with: a different label
  // or a perturbed weight changes the loss far beyond the tolerance.
  std::vector<int32_t> y2 = f.y;
  y2[0] = (y2[0] + 1) % C;
  CHECK(std::abs(forward(f.p, f.x, y2).loss - loss) > 1e-3);
  Params p2 = f.p;
  p2.w2[5] += 0.01;
  CHECK(std::abs(forward(p2, f.x, f.y).loss - loss) > 1e-5 * std::abs(loss) * 10);
}

TEST_CASE("train_step: the gradients of all four parameters and two AdamW steps match by hand") {
  Fixture f;
  Params ref = f.p;  // the reference's own parameters, in double
  Params m{Vec(H * I, 0), Vec(H, 0), Vec(C * H, 0), Vec(C, 0)}, v = m;
  const std::string names[4] = {"fc1.w", "fc1.b", "fc2.w", "fc2.b"};
  auto field = [](Params& q, int i) -> Vec& { return i == 0 ? q.w1 : i == 1 ? q.b1 : i == 2 ? q.w2 : q.b2; };

  for (int t = 1; t <= 2; ++t) {
    CAPTURE(t);
    Forward fw = forward(ref, f.x, f.y);
    Params g = backward(ref, fw, f.x, f.y);
    test::run(*f.s, "train_step");

    float loss = 0;
    REQUIRE(f.s->read_scalar(f.s->model().loss(), &loss).ok());
    CHECK(std::abs(loss - fw.loss) <= 1e-5 * fw.loss);
    float lr = 0;
    REQUIRE(f.s->read_scalar(f.s->model().lr(), &lr).ok());
    CHECK(lr == doctest::Approx(kLr).epsilon(1e-7));  // constant schedule
    // train_state is i32[...] with the step count first.
    const TensorInfo& ts = f.s->model().tensors()[f.s->model().train_state()];
    std::vector<int32_t> state(numel(ts.type.shape));
    REQUIRE(f.s->read(f.s->model().train_state(), state.data(), state.size() * sizeof(int32_t)).ok());
    CHECK(state.at(0) == t);

    for (int i = 0; i < 4; ++i) {
      CAPTURE(names[i]);
      Vec gs = to_f64(grad_of(*f.s, names[i]));
      // FP32 sums of up to 784 products: relative error ~1e-6 of the largest term.
      double w = worst(gs, field(g, i), 1e-4, 1e-5);
      MESSAGE("step " << t << " " << names[i] << ".grad: worst error " << w << " of tolerance");
      CHECK(w <= 1.0);
      // The update: the hand-written AdamW applied to sgrt's own FP32 gradient
      // (so the comparison isolates the optimizer from gradient rounding), and
      // to the reference gradient for the reference's own trajectory.
      Vec before = field(ref, i);
      Vec mm = field(m, i), vv = field(v, i);
      double decay = i % 2 == 0 ? kDecay : 0.0;  // matrices decay, biases do not
      Vec expect = before;
      adamw(&expect, gs, &mm, &vv, t, decay);
      Vec got = to_f64(test::read_f32(*f.s, names[i]));
      double wp = worst(got, expect, 1e-5, 1e-6);
      MESSAGE("step " << t << " " << names[i] << " after AdamW: worst error " << wp << " of tolerance");
      CHECK(wp <= 1.0);
      // Carry on from sgrt's parameters and moments so both sides stay in step.
      field(ref, i) = got;
      field(m, i) = to_f64(test::read_f32(*f.s, names[i] + ".adam_m"));
      field(v, i) = to_f64(test::read_f32(*f.s, names[i] + ".adam_v"));
      CHECK(worst(field(m, i), mm, 1e-5, 1e-6) <= 1.0);
      CHECK(worst(field(v, i), vv, 1e-5, 1e-6) <= 1.0);
    }
    f.new_batch();
  }
}

TEST_CASE("the reference AdamW would see a missing bias correction or a decayed bias") {
  // Guards the comparison above against being vacuous: the variants differ
  // from the formula by far more than the 1e-5 tolerance.
  Vec g{0.3, -0.002, 1e-4}, p0{0.05, -0.02, 0.01};
  Vec p = p0, m(3, 0), v(3, 0);
  adamw(&p, g, &m, &v, 1, kDecay);
  for (size_t i = 0; i < 3; ++i) {
    // Step 1 of AdamW moves every weight by ~lr * sign(g) after decay.
    CHECK(p[i] == doctest::Approx(p0[i] * (1 - kLr * kDecay) - kLr * (g[i] > 0 ? 1 : -1)).epsilon(1e-3));
    double no_bias_correction = p0[i] * (1 - kLr * kDecay) - kLr * (0.1 * g[i]) / (std::sqrt(0.001 * g[i] * g[i]) + kAdamEps);
    CHECK(std::abs(no_bias_correction - p[i]) > 1e-3);
  }
  Vec q = p0, m2(3, 0), v2(3, 0);
  adamw(&q, g, &m2, &v2, 1, 0.0);
  CHECK(std::abs(q[0] - p[0]) > 1e-5 * std::abs(p[0]) * 10);
}
