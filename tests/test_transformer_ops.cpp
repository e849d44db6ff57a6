// The transformer ops' gradient rules and kernels, each op on its own, against
// central finite differences of the eval program's loss (FP32).
//
// Each case declares the op's float inputs as parameters; the loss is
//   sum(op(params...) * w)
// with w a parameter holding fixed random values, so dloss/dy = w exercises the
// whole Jacobian. The analytic gradient is the "<param>.grad" tensor the
// train_step program leaves (SGD with lr 1e-30: parameters do not move, and they
// are rewritten before the finite differences anyway).
//
// g_fd = (L(x + eps) - L(x - eps)) / (2 eps), eps = 1e-2. With O(1) inputs the
// truncation error is ~eps^2 |f'''| / 6 <= ~5e-4 and the FP32 rounding of a loss
// of a few hundred O(1) terms is ~1e-5 / (2 eps) ~ 1e-3 at worst, so
// |g - g_fd| <= 3e-3 + 1e-2 |g_fd|. A wrong rule (a missing factor, a sign, a
// transposed head, a dropped term) is off by O(0.1) on these inputs.
#include <cmath>
#include <random>
#include <sstream>

#include "harness.h"

using namespace sgrt;

namespace {

constexpr double kEps = 1e-2, kAtol = 3e-3, kRtol = 1e-2;

struct Param {
  std::string name;
  Shape shape;
  float lo = -1.f, hi = 1.f;
};

struct Case {
  std::string name;
  std::vector<Param> params;
  std::string expr;         // Lua expression for y over the parameter names
  std::string extra = "";   // declarations before y (inputs)
  std::vector<int32_t> ids = {};  // values of an i32 input named "ids"
};

std::string lua_shape(const Shape& s) {
  std::string r = "{";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "}";
}

std::string source(const Case& c) {
  std::ostringstream o;
  o << "local sg = require \"sg\"\n";
  for (const Param& p : c.params) o << "local " << p.name << " = sg.param(\"" << p.name << "\", " << lua_shape(p.shape) << ")\n";
  o << c.extra << "\nlocal y = " << c.expr << "\n"
    << "local n = 1\nfor _, d in ipairs(y:shape()) do n = n * d end\n"
    << "local w = sg.param(\"w\", y:shape())\n"
    << "sg.loss(sg.sum(sg.reshape(y * w, { n })))\n"
    << "sg.optimizer.sgd{ lr = 1e-30, momentum = 0.0 }\n";
  return o.str();
}

std::vector<float> uniform(int64_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Returns the number of gradient entries that disagree with finite differences.
int check_case(const Case& c) {
  INFO("case " << c.name << "\n" << source(c));
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(source(c), &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::mt19937 rng(1234);
  std::map<std::string, std::vector<float>> values;
  for (const Param& p : c.params) values[p.name] = uniform(numel(p.shape), p.lo, p.hi, rng);
  values["w"] = uniform(numel(m->tensors()[m->find_tensor("w")].type.shape), -1.f, 1.f, rng);
  auto write_all = [&] {
    for (auto& [n, v] : values) test::write_vec(*s, n, v);
    if (!c.ids.empty()) test::write_vec(*s, "ids", c.ids);
  };
  write_all();
  test::run(*s, "train_step");
  // Read every gradient now: the eval runs below reuse their arena bytes.
  std::map<std::string, std::vector<float>> grads;
  for (const Param& p : c.params) grads[p.name] = test::read_f32(*s, p.name + ".grad");
  int bad = 0;
  for (const Param& p : c.params) {
    const std::vector<float>& g = grads[p.name];
    for (size_t i = 0; i < g.size(); ++i) {
      std::vector<float>& v = values[p.name];
      float x0 = v[i];
      v[i] = x0 + static_cast<float>(kEps);
      write_all();
      double up = test::loss_of(*s);
      v[i] = x0 - static_cast<float>(kEps);
      write_all();
      double down = test::loss_of(*s);
      v[i] = x0;
      double fd = (up - down) / (2 * kEps);
      if (std::fabs(g[i] - fd) > kAtol + kRtol * std::fabs(fd)) {
        if (bad < 5) MESSAGE(c.name << ": " << p.name << "[" << i << "] analytic " << g[i] << " vs numeric " << fd);
        ++bad;
      }
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("transformer op gradients match finite differences") {
  std::vector<Case> cases = {
      {"embedding (repeated ids)", {{"t", {5, 3}}}, "sg.embedding(t, ids)",
       "local ids = sg.input(\"ids\", {2, 3}, \"i32\")", {0, 3, 3, 4, 0, 3}},
      {"layer_norm", {{"x", {4, 6}}, {"g", {6}, 0.5f, 1.5f}, {"b", {6}}}, "sg.layer_norm(x, g, b)"},
      {"rms_norm", {{"x", {4, 6}}, {"g", {6}, 0.5f, 1.5f}}, "sg.rms_norm(x, g)"},
      {"attention", {{"q", {2, 5, 8}}, {"k", {2, 5, 8}}, {"v", {2, 5, 8}}}, "sg.attention(q, k, v, 2)"},
      // grouped-query: 6 query heads share 2 kv heads (3 each), so dk and dv sum over a group
      {"attention (GQA)", {{"q", {2, 4, 12}}, {"k", {2, 4, 4}}, {"v", {2, 4, 4}}}, "sg.attention(q, k, v, 6, 2)"},
      {"silu", {{"x", {3, 4}, -3.f, 3.f}}, "sg.silu(x)"},
      {"swiglu (silu * mul)", {{"a", {3, 4}}, {"b", {3, 4}}}, "sg.silu(a) * b"},
      {"rope", {{"x", {2, 4, 8}}}, "sg.rope(x, 2, 100)"},
      {"rope (interleaved)", {{"x", {2, 4, 8}}}, "sg.rope(x, 2, 100, true)"},
      {"rope (inverse)", {{"x", {1, 3, 4}}}, "sg.op(\"rope\", {x}, {n_head = 1, base = 10.0, inverse = 1})"},
  };
  for (const Case& c : cases) CHECK_MESSAGE(check_case(c) == 0, c.name);
}

TEST_CASE("the finite-difference check can fail") {
  // Dropout's train_step gradient (mask / (1 - p) * w) is not the derivative of
  // the eval loss (no dropout: w), so the checker must report mismatches.
  Case c{"dropout p = 0.5", {{"x", {4, 8}}}, "sg.dropout(x, 0.5)"};
  CHECK(check_case(c) > 0);
}

TEST_CASE("attention is causal and its rows are convex combinations of v") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local q = sg.param("q", {1, 4, 4})
    local k = sg.param("k", {1, 4, 4})
    local v = sg.param("v", {1, 4, 4})
    local y = sg.attention(q, k, v, 1)
    sg.output("y", y)
    sg.loss(sg.sum(sg.reshape(y, {16})))
    sg.optimizer.sgd{ lr = 1e-30 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::vector<float> qv(16, 0.f), kv(16, 0.f), vv(16);
  for (int i = 0; i < 16; ++i) vv[i] = static_cast<float>(i);
  test::write_vec(*s, "q", qv);
  test::write_vec(*s, "k", kv);
  test::write_vec(*s, "v", vv);
  test::run(*s, "infer");
  int y = m->outputs()[0].second;
  std::vector<float> out(16);
  REQUIRE(s->read(y, out.data(), out.size() * sizeof(float)).ok());
  // Zero scores: row t averages v rows 0..t (the causal mask), nothing later.
  for (int t = 0; t < 4; ++t)
    for (int c = 0; c < 4; ++c) {
      float mean = 0;
      for (int j = 0; j <= t; ++j) mean += vv[j * 4 + c];
      CHECK(out[t * 4 + c] == doctest::Approx(mean / (t + 1)));
    }
}

TEST_CASE("dropout: masks in train_step with a seeded, per-step mask; identity in eval; gradient uses the same mask") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {64, 16})
    local y = sg.dropout(x, 0.25)
    sg.output("y", y)
    local w = sg.param("w", {64, 16})
    sg.loss(sg.sum(sg.reshape(y * w, {1024})))
    sg.optimizer.sgd{ lr = 1e-30, momentum = 0.0 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::vector<float> x(1024, 1.f), w(1024);
  for (int i = 0; i < 1024; ++i) w[i] = 0.5f + static_cast<float>(i % 7);
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "w", w);
  int yid = m->outputs()[0].second;
  auto read_y = [&] {
    std::vector<float> v(1024);
    REQUIRE(s->read(yid, v.data(), v.size() * sizeof(float)).ok());
    return v;
  };
  test::run(*s, "train_step");
  std::vector<float> y1 = read_y(), g = test::read_f32(*s, "x.grad");
  int dropped = 0;
  for (int i = 0; i < 1024; ++i) {
    CHECK((y1[i] == 0.f || y1[i] == doctest::Approx(1.f / 0.75f)));
    dropped += y1[i] == 0.f;
    CHECK(g[i] == doctest::Approx(y1[i] * w[i]));  // d/dx (mask x / (1-p)) w
  }
  CHECK(dropped > 1024 * 0.18);
  CHECK(dropped < 1024 * 0.32);
  test::run(*s, "train_step");
  CHECK(read_y() != y1);  // the next step draws a new mask
  test::write_vec(*s, "x", x);
  test::run(*s, "infer");
  CHECK(read_y() == x);  // no dropout outside training
}

TEST_CASE("shape errors name the script line") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {2, 4, 6})
    local y = sg.nn.attention(x, { n_head = 4 })
    sg.loss(sg.sum(sg.reshape(y, {48})))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find(".lua:4:") != std::string::npos);
  CHECK(st.message().find("n_embd 6 is not divisible by n_head 4") != std::string::npos);
}

TEST_CASE("grouped-query attention equals multi-head attention on kv heads repeated per group") {
  // y = attention(q, k, v, 4 heads, 2 kv heads) against attention(q, k', v', 4)
  // where k' repeats each kv head for the 2 query heads of its group.
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local q = sg.param("q", {2, 3, 8})
    local k = sg.param("k", {2, 3, 4})
    local v = sg.param("v", {2, 3, 4})
    local k2 = sg.param("k2", {2, 3, 8})
    local v2 = sg.param("v2", {2, 3, 8})
    local a = sg.output("gqa", sg.attention(q, k, v, 4, 2))
    sg.output("mha", sg.attention(q, k2, v2, 4))
    sg.loss(sg.sum(sg.reshape(a, {48})))
    sg.optimizer.sgd{ lr = 1e-30 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::mt19937 rng(7);
  std::vector<float> q = uniform(48, -2.f, 2.f, rng), k = uniform(24, -2.f, 2.f, rng), v = uniform(24, -2.f, 2.f, rng);
  std::vector<float> k2(48), v2(48);
  for (int r = 0; r < 6; ++r)      // rows b * T + t
    for (int h = 0; h < 4; ++h)    // query head h reads kv head h / 2
      for (int c = 0; c < 2; ++c) {
        k2[r * 8 + h * 2 + c] = k[r * 4 + (h / 2) * 2 + c];
        v2[r * 8 + h * 2 + c] = v[r * 4 + (h / 2) * 2 + c];
      }
  for (auto& [n, x] : std::map<std::string, std::vector<float>>{{"q", q}, {"k", k}, {"v", v}, {"k2", k2}, {"v2", v2}})
    test::write_vec(*s, n, x);
  test::run(*s, "infer");
  std::vector<float> a(48), b(48);
  REQUIRE(s->read(m->outputs()[0].second, a.data(), a.size() * sizeof(float)).ok());
  REQUIRE(s->read(m->outputs()[1].second, b.data(), b.size() * sizeof(float)).ok());
  for (int i = 0; i < 48; ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
}

TEST_CASE("interleaved rope turns the pairs (2i, 2i+1) by t * base^(-2i/Dh)") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {1, 3, 4})
    local y = sg.output("y", sg.rope(x, 1, 100, true))
    sg.loss(sg.sum(sg.reshape(y, {12})))
    sg.optimizer.sgd{ lr = 1e-30 }
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, y(12);
  test::write_vec(*s, "x", x);
  test::run(*s, "infer");
  REQUIRE(s->read(m->outputs()[0].second, y.data(), y.size() * sizeof(float)).ok());
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 2; ++i) {
      double ang = t * std::pow(100.0, -2.0 * i / 4), x1 = x[t * 4 + 2 * i], x2 = x[t * 4 + 2 * i + 1];
      CHECK(y[t * 4 + 2 * i] == doctest::Approx(x1 * std::cos(ang) - x2 * std::sin(ang)));
      CHECK(y[t * 4 + 2 * i + 1] == doctest::Approx(x1 * std::sin(ang) + x2 * std::cos(ang)));
    }
}
