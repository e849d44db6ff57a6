// Every differentiable forward op's gradient, each op on its own, against
// central finite differences of the eval program's loss.
//
// For an op y = f(p1, p2, ...) whose inputs are all parameters, the model is
//     loss = sum(f(p1, ...) * w)      (the sum as a matmul with a ones input)
// with w a parameter of y's shape holding fixed random values, so dloss/dy = w
// is non-trivial and every element of the op's Jacobian enters the check. The
// analytic gradient is the tensor the train_step program hands to the
// optimizer update for each parameter (SGD with lr = 1e-30, so the parameters do
// not move; they are rewritten anyway before the finite differences).
//
// Finite differences: g_fd = (L(x + eps) - L(x - eps)) / (2 eps), with L the
// FP32 eval loss converted to double on the host. Error budget, inputs O(1):
//   truncation  eps^2 |f'''| / 6 : eps = 1e-2 and |f'''| <= ~20 on the ranges
//               used here (log on [0.5, 2] is the worst: 2/x^3 <= 16, reached
//               only at the edge of the range) -> <= 3e-4, typically < 1e-5;
//   rounding    the FP32 loss sums at most ~70 terms of size <= ~3; its rounding
//               error is a few ulps of |L| <= ~10 (~1e-6 each), divided by
//               2 eps = 2e-2 -> <= ~2e-4.
// Hence |g - g_fd| <= 1e-3 + 5e-3 |g_fd|. Measured: every case stays below
// 10% of that (the worst, div, at ~1e-4 absolute). A wrong rule (a missing
// factor, a wrong sign, a transposed operand, a dropped accumulation) is off by
// O(0.1) on these inputs, two orders of magnitude outside the tolerance; the
// last test case checks that the checker does reject such errors.
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "harness.h"

using namespace sgrt;

namespace {

constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 5e-3;

enum class Gen {
  uniform,   // U(-1, 1)
  nonzero,   // |x| in [0.2, 1], random sign: away from relu's kink and div's pole
  positive,  // U(0.5, 2): log's domain, away from 0
  distinct,  // a shuffled grid with spacing 0.1: no ties for max, > 2 eps apart
};

struct ParamSpec {
  std::string name;
  Shape shape;
  Gen gen = Gen::uniform;
};

struct Case {
  std::string name;
  std::vector<ParamSpec> params;
  std::string expr;        // Lua expression for y, over the parameter names
  std::string extra = "";  // Lua declarations before y (inputs)
  std::vector<int32_t> labels = {};  // for an i32 input named "label"
  std::vector<std::string> inner = {};  // params the expression declares (a layer's): set and checked too
};

std::vector<float> generate(Gen gen, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  switch (gen) {
    case Gen::uniform:
      for (float& x : v) x = u(rng);
      break;
    case Gen::nonzero:
      for (float& x : v) {
        float m = 0.2f + 0.8f * std::abs(u(rng));
        x = u(rng) < 0 ? -m : m;
      }
      break;
    case Gen::positive:
      for (float& x : v) x = 0.5f + 0.75f * (u(rng) + 1.f);
      break;
    case Gen::distinct: {
      for (int64_t i = 0; i < n; ++i) v[i] = 0.1f * static_cast<float>(i) - 0.05f * static_cast<float>(n);
      std::shuffle(v.begin(), v.end(), rng);
      break;
    }
  }
  return v;
}

std::string lua_shape(const Shape& s) {
  std::string r = "{";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "}";
}

std::string model_source(const Case& c) {
  std::ostringstream o;
  o << "local sg = require \"sg\"\n"
       // sum(t) as ones^T flatten(t): keeps the loss itself free of reduce ops,
       // so a broken reduction gradient shows up in its own case only.
       "local function total(t)\n"
       "  local n = 1\n"
       "  for _, d in ipairs(t:shape()) do n = n * d end\n"
       "  local ones = sg.input(\"ones\", {n, 1})\n"
       "  return sg.reshape(sg.matmul(sg.reshape(t, {1, n}), ones), {})\n"
       "end\n";
  for (const ParamSpec& p : c.params) o << "local " << p.name << " = sg.param(\"" << p.name << "\", " << lua_shape(p.shape) << ")\n";
  o << c.extra << "\n"
    << "local y = " << c.expr << "\n"
    << "local w = sg.param(\"w\", y:shape())\n"
    << "sg.loss(total(y * w))\n"
    << "sg.optimizer.sgd{ lr = 1e-30, momentum = 0.0 }\n";
  return o.str();
}

// The gradient tensor that train_step's optimizer update reads for `param`.
int grad_tensor(const Model& m, int param) {
  const ProgramInfo& p = m.programs()[m.find_program("train_step")];
  for (const OpInfoLoaded& op : p.ops)
    if ((op.code == OpCode::SgdUpdate || op.code == OpCode::AdamwUpdate) && op.in[0] == param) return op.in[1];
  return -1;
}

struct Mismatch {
  std::string param;
  size_t index = 0;
  double analytic = 0, numeric = 0;
};

struct CheckResult {
  std::vector<Mismatch> bad;
  double max_err = 0;  // max |g - fd| / (kAtol + kRtol |fd|): <= 1 passes
  int checked = 0;
};

// Compares `grads` (param name -> analytic gradient) with central differences.
CheckResult compare(Session& s, const std::map<std::string, std::vector<float>>& values,
                    const std::map<std::string, std::vector<float>>& grads) {
  CheckResult r;
  for (auto& [name, g] : grads) {
    std::vector<float> x = values.at(name);
    REQUIRE(x.size() == g.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float x0 = x[i];
      // The step actually taken in FP32, so the quotient uses the true spacing.
      const float xp = x0 + static_cast<float>(kEps), xm = x0 - static_cast<float>(kEps);
      x[i] = xp;
      test::write_vec(s, name, x);
      const double lp = test::loss_of(s);
      x[i] = xm;
      test::write_vec(s, name, x);
      const double lm = test::loss_of(s);
      x[i] = x0;
      test::write_vec(s, name, x);
      const double fd = (lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm));
      const double err = std::abs(static_cast<double>(g[i]) - fd) / (kAtol + kRtol * std::abs(fd));
      r.max_err = std::max(r.max_err, err);
      ++r.checked;
      if (err > 1.0) r.bad.push_back({name, i, g[i], fd});
    }
  }
  return r;
}

struct Prepared {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Session> session;
  std::map<std::string, std::vector<float>> values, grads;
};

// Compiles the case, sets its parameters, runs train_step and reads every
// parameter's analytic gradient (the op's inputs and w).
Prepared prepare(const Case& c, uint32_t seed = 1234) {
  Prepared p;
  std::string src = model_source(c);
  INFO("model:\n" << src);
  Status st = test::compile_lua(src, &p.model);
  CHECK_MESSAGE(st.ok(), st.message());  // not fatal: the remaining cases still run
  if (!st.ok()) return p;
  p.session = test::open_session(p.model);
  Session& s = *p.session;
  std::mt19937 rng(seed);
  for (const ParamSpec& ps : c.params) p.values[ps.name] = generate(ps.gen, numel(ps.shape), rng);
  for (const std::string& n : c.inner) p.values[n] = generate(Gen::uniform, numel(s.model().tensors()[test::tensor_id(s, n)].type.shape), rng);
  p.values["w"] = generate(Gen::uniform, numel(s.model().tensors()[test::tensor_id(s, "w")].type.shape), rng);
  // Parameters a layer (sg.nn) made itself are checked as well.
  for (const TensorInfo& t : s.model().tensors())
    if (t.role == Role::param && !p.values.count(t.name)) p.values[t.name] = generate(Gen::uniform, numel(t.type.shape), rng);
  if (!c.labels.empty()) test::write_vec(s, "label", c.labels);
  test::write_vec(s, "ones", std::vector<float>(numel(s.model().tensors()[test::tensor_id(s, "ones")].type.shape), 1.f));
  for (auto& [n, v] : p.values) test::write_vec(s, n, v);
  test::run(s, "train_step");
  for (auto& [n, v] : p.values) {
    int gid = grad_tensor(s.model(), test::tensor_id(s, n));
    REQUIRE_MESSAGE(gid >= 0, "no gradient for " << n);
    std::vector<float> g(v.size());
    REQUIRE(s.read(gid, g.data(), g.size() * sizeof(float)).ok());
    p.grads[n] = std::move(g);
  }
  // lr = 1e-30 leaves the parameters where they were; restore them regardless.
  for (auto& [n, v] : p.values) test::write_vec(s, n, v);
  return p;
}

void gradcheck(const Case& c) {
  INFO("case: " << c.name << "   y = " << c.expr);
  Prepared p = prepare(c);
  if (!p.session) return;
  CheckResult r = compare(*p.session, p.values, p.grads);
  std::ostringstream msg;
  for (const Mismatch& m : r.bad) msg << "  " << m.param << "[" << m.index << "]: analytic " << m.analytic << ", numeric " << m.numeric << "\n";
  CHECK_MESSAGE(r.bad.empty(), c.name << ": " << r.bad.size() << " of " << r.checked << " gradient elements disagree:\n" << msg.str());
  CHECK(r.checked > 0);
  MESSAGE(c.name << ": " << r.checked << " elements, worst error " << r.max_err << " of tolerance");
}

const Shape kS23{2, 3}, kS234{2, 3, 4};

}  // namespace

TEST_CASE("matmul: all four transpose combinations and a rank-3 left operand") {
  gradcheck({"matmul nn", {{"a", {3, 4}}, {"b", {4, 5}}}, "sg.matmul(a, b)"});
  gradcheck({"matmul tn", {{"a", {4, 3}}, {"b", {4, 5}}}, "sg.matmul(a, b, {trans_a = true})"});
  gradcheck({"matmul nt", {{"a", {3, 4}}, {"b", {5, 4}}}, "sg.matmul(a, b, {trans_b = true})"});
  gradcheck({"matmul tt", {{"a", {4, 3}}, {"b", {5, 4}}}, "sg.matmul(a, b, {trans_a = true, trans_b = true})"});
  gradcheck({"matmul rank-3 a", {{"a", {2, 3, 4}}, {"b", {4, 5}}}, "sg.matmul(a, b)"});
  gradcheck({"matmul rank-3 a, trans_b", {{"a", {2, 3, 4}}, {"b", {5, 4}}}, "sg.matmul(a, b, {trans_b = true})"});
}

TEST_CASE("elementwise binary ops") {
  gradcheck({"add", {{"a", kS23}, {"b", kS23}}, "sg.op(\"add\", {a, b})"});
  gradcheck({"sub", {{"a", kS23}, {"b", kS23}}, "sg.op(\"sub\", {a, b})"});
  gradcheck({"mul", {{"a", kS23}, {"b", kS23}}, "sg.op(\"mul\", {a, b})"});
  gradcheck({"div", {{"a", kS23}, {"b", kS23, Gen::nonzero}}, "sg.op(\"div\", {a, b})"});
  // The DSL's operators, which insert broadcast_to for the smaller operand.
  gradcheck({"add broadcast", {{"a", kS23}, {"b", {3}}}, "a + b"});
  gradcheck({"div broadcast", {{"a", kS23}, {"b", {2, 1}, Gen::nonzero}}, "a / b"});
}

TEST_CASE("a Lua number on either side of + - * /: scale for products and x / c, a broadcast fill otherwise") {
  gradcheck({"x + c", {{"x", kS23}}, "x + 1.5"});
  gradcheck({"c + x (an integer)", {{"x", kS23}}, "2 + x"});
  gradcheck({"x - c", {{"x", kS23}}, "x - 0.5"});
  gradcheck({"c - x", {{"x", kS23}}, "0.5 - x"});
  gradcheck({"x * c", {{"x", kS23}}, "x * 3"});
  gradcheck({"c * x", {{"x", kS23}}, "-2.5 * x"});
  gradcheck({"x / c", {{"x", kS23}}, "x / 4"});
  gradcheck({"c / x", {{"x", kS23, Gen::nonzero}}, "0.7 / x"});
  gradcheck({"constants chained", {{"x", kS23, Gen::positive}}, "(1 - sg.sigmoid(x)) * 2 + 1 / (x + 1)"});
}

TEST_CASE("elementwise unary ops") {
  gradcheck({"neg", {{"x", kS234}}, "-x"});
  gradcheck({"scale", {{"x", kS234}}, "sg.scale(x, 2.5)"});
  gradcheck({"relu", {{"x", kS234, Gen::nonzero}}, "sg.relu(x)"});
  gradcheck({"gelu", {{"x", kS234}}, "sg.gelu(x) "});
  gradcheck({"gelu wide", {{"x", kS234, Gen::distinct}}, "sg.gelu(x)"});  // inputs in [-1.2, 1.1]
  gradcheck({"tanh", {{"x", kS234}}, "sg.tanh(x)"});
  gradcheck({"sigmoid", {{"x", kS234}}, "sg.sigmoid(x)"});
  gradcheck({"exp", {{"x", kS234}}, "sg.exp(x)"});
  gradcheck({"log", {{"x", kS234, Gen::positive}}, "sg.log(x)"});
  gradcheck({"sqrt", {{"x", kS234, Gen::positive}}, "sg.sqrt(x)"});
}

TEST_CASE("shape ops: reshape, transpose, broadcast_to, sum_to") {
  gradcheck({"reshape", {{"x", kS234}}, "sg.reshape(x, {4, 6})"});
  gradcheck({"reshape rank 1", {{"x", kS234}}, "sg.reshape(x, {24})"});
  gradcheck({"transpose 2-D", {{"x", kS23}}, "sg.transpose(x)"});
  gradcheck({"transpose 3-D perm 2,0,1", {{"x", kS234}}, "sg.transpose(x, {2, 0, 1})"});
  gradcheck({"transpose 3-D perm 1,0,2", {{"x", kS234}}, "sg.transpose(x, {1, 0, 2})"});
  gradcheck({"broadcast_to rows", {{"x", {4}}}, "sg.broadcast_to(x, {2, 3, 4})"});
  gradcheck({"broadcast_to middle", {{"x", {2, 1, 4}}}, "sg.broadcast_to(x, {2, 3, 4})"});
  gradcheck({"broadcast_to new axes", {{"x", {3, 1}}}, "sg.broadcast_to(x, {2, 3, 4})"});
  gradcheck({"sum_to rows", {{"x", kS234}}, "sg.op(\"sum_to\", {x}, {shape = {4}})"});
  gradcheck({"sum_to middle", {{"x", kS234}}, "sg.op(\"sum_to\", {x}, {shape = {2, 1, 4}})"});
  gradcheck({"sum_to leading", {{"x", kS234}}, "sg.op(\"sum_to\", {x}, {shape = {3, 1}})"});
}

TEST_CASE("slice, pad and concat (pads and adds): each axis, windows at either edge and inside") {
  gradcheck({"slice axis 0", {{"x", kS234}}, "sg.slice(x, 0, 1, 1)"});
  gradcheck({"slice axis 1, inside", {{"x", kS234}}, "sg.slice(x, 1, 1, 1)"});
  gradcheck({"slice last axis to the end", {{"x", kS234}}, "sg.slice(x, -1, 1)"});
  gradcheck({"slice every axis", {{"x", kS234}}, "sg.op(\"slice\", {x}, {starts = {1, 0, 1}, sizes = {1, 2, 2}})"});
  gradcheck({"pad every axis", {{"x", kS23}}, "sg.pad(x, {1, 0}, {2, 3})"});
  gradcheck({"pad one axis", {{"x", kS234}}, "sg.pad(x, {0, 2, 0}, {0, 0, 0})"});
  gradcheck({"concat axis 0", {{"a", kS23}, {"b", {1, 3}}}, "sg.concat({a, b}, 0)"});
  gradcheck({"concat last axis, three pieces", {{"a", kS23}, {"b", {2, 1}}, {"c", kS23}}, "sg.concat({a, b, c}, -1)"});
  gradcheck({"slice of a pad", {{"x", kS23}}, "sg.slice(sg.pad(x, {1, 1}, {1, 1}), 1, 0, 3)"});
}

TEST_CASE("recurrent cells: every input and parameter of nn.gru_cell and nn.lstm_cell") {
  const std::vector<std::string> gru{"g.w_ih", "g.w_hh", "g.b_ih", "g.b_hh"};
  gradcheck({"gru_cell", {{"x", {2, 3}}, {"h", {2, 4}}}, "sg.nn.gru_cell(x, h, 4, {name = \"g\"})", "", {}, gru});
  gradcheck({"gru_cell, no bias", {{"x", {2, 3}}, {"h", {2, 4}}}, "sg.nn.gru_cell(x, h, 4, {name = \"g\", bias = false})", "",
             {}, {"g.w_ih", "g.w_hh"}});
  gradcheck({"gru_cell, two time steps sharing the params", {{"x", {2, 3}}, {"h", {2, 4}}},
             "sg.nn.gru_cell(x, sg.nn.gru_cell(x, h, 4, {name = \"g\"}), 4, {name = \"g\"})", "", {}, gru});
  // h' and c' both enter the loss (c' through a second weighted sum).
  gradcheck({"lstm_cell", {{"x", {2, 3}}, {"h", {2, 4}}, {"c", {2, 4}}},
             "sg.concat({sg.nn.lstm_cell(x, h, c, 4, {name = \"l\"})}, 0)", "", {},
             {"l.w_ih", "l.w_hh", "l.b_ih", "l.b_hh"}});
}

TEST_CASE("reductions over each axis, with and without keepdims") {
  for (const char* op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    for (int axis : {0, 1, 2, -1}) {
      for (bool keep : {false, true}) {
        std::string expr = std::string("sg.") + op + "(x, " + std::to_string(axis) + ", " + (keep ? "true" : "false") + ")";
        Gen gen = std::string(op) == "reduce_max" ? Gen::distinct : Gen::uniform;
        gradcheck({std::string(op) + " axis " + std::to_string(axis) + (keep ? " keepdims" : ""), {{"x", kS234, gen}}, expr});
      }
    }
  }
}

TEST_CASE("reductions chained down to a scalar (the loss shape most models use)") {
  // sum(sum(x, 0), 0) and mean(mean(x, 0), 0) of a matrix: each reduction's
  // gradient rule runs after the previous one has added tensors to the graph.
  gradcheck({"reduce_sum twice", {{"x", {3, 4}}}, "sg.reduce_sum(sg.reduce_sum(x, 0), 0)"});
  gradcheck({"reduce_mean twice", {{"x", {3, 4}}}, "sg.reduce_mean(sg.reduce_mean(x, 0), 0)"});
  gradcheck({"reduce_sum then mean, last axis", {{"x", {2, 5}}}, "sg.reduce_mean(sg.reduce_sum(x, -1), -1)"});
  gradcheck({"reduce_max then sum", {{"x", {3, 4}, Gen::distinct}}, "sg.reduce_sum(sg.reduce_max(x, 1), 0)"});
}

TEST_CASE("softmax and log_softmax over each axis") {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int axis : {0, 1, 2, -1}) {
      gradcheck({std::string(op) + " axis " + std::to_string(axis), {{"x", kS234}},
                 std::string("sg.") + op + "(x, " + std::to_string(axis) + ")"});
    }
    // Larger logits: the kernels must subtract the max to stay finite and exact.
    gradcheck({std::string(op) + " shifted logits", {{"x", {3, 5}, Gen::distinct}},
               std::string("sg.") + op + "(sg.scale(x, 1.0), -1)"});
  }
}

TEST_CASE("softmax_cross_entropy") {
  gradcheck({"softmax_cross_entropy", {{"logits", {4, 5}}},
             "sg.softmax_cross_entropy(logits, label)",
             "local label = sg.input(\"label\", {4}, \"i32\")", {0, 3, 4, 1}});
  gradcheck({"softmax_cross_entropy, repeated labels", {{"logits", {6, 3}, Gen::distinct}},
             "sg.softmax_cross_entropy(logits, label)",
             "local label = sg.input(\"label\", {6}, \"i32\")", {2, 2, 0, 1, 2, 0}});
  // mask {0, 1, 1, 1.5}: row 0 left out (its label 9 is not even checked), row 3 weighed 1.5.
  gradcheck({"masked_cross_entropy", {{"logits", {4, 5}}},
             "sg.nn.masked_cross_entropy(logits, label, sg.pad(sg.op(\"fill\", {}, {value = 1, shape = {2}}), {1}, {1}) + "
             "sg.pad(sg.op(\"fill\", {}, {value = 1.5, shape = {1}}), {3}, {0}))",
             "local label = sg.input(\"label\", {4}, \"i32\")", {9, 3, 4, 1}});
}

TEST_CASE("im2col, and the convolution and pooling layers built from it (NHWC)") {
  const Shape img{1, 5, 4, 3};  // small: the FP32 loss stays well inside the error budget
  gradcheck({"im2col 2x2", {{"x", img}}, "sg.im2col(x, {2, 2}, {1, 1}, {0, 0})"});
  gradcheck({"im2col 3x2, stride 2, padding 1", {{"x", img}}, "sg.im2col(x, {3, 2}, {2, 2}, {1, 1})"});
  gradcheck({"im2col 1x3, stride 2x1, padding 0x2", {{"x", img}}, "sg.im2col(x, {1, 3}, {2, 1}, {0, 2})"});
  gradcheck({"conv2d 3x3, padding 1", {{"x", img}}, "sg.nn.conv2d(x, 4, {padding = 1, name = \"c\"})"});
  gradcheck({"conv2d 2x3, stride 2, no bias", {{"x", img}}, "sg.nn.conv2d(x, 2, {kernel = {2, 3}, stride = 2, bias = false, name = \"c\"})"});
  gradcheck({"conv2d depthwise", {{"x", img}}, "sg.nn.conv2d(x, 3, {groups = 3, padding = 1, name = \"d\"})"});
  gradcheck({"conv2d depthwise x2", {{"x", img}}, "sg.nn.conv2d(x, 6, {groups = 3, kernel = 2, name = \"d\"})"});
  gradcheck({"max_pool2d", {{"x", img, Gen::distinct}}, "sg.nn.max_pool2d(x)"});
  gradcheck({"max_pool2d 3x3, stride 1 (overlapping windows)", {{"x", img, Gen::distinct}}, "sg.nn.max_pool2d(x, {kernel = 3, stride = 1})"});
  gradcheck({"avg_pool2d 3x3, stride 2, padding 1", {{"x", img}}, "sg.nn.avg_pool2d(x, {kernel = 3, stride = 2, padding = 1})"});
}

TEST_CASE("gradient accumulation: one tensor feeding several ops") {
  gradcheck({"x feeds tanh and exp", {{"x", kS23}}, "sg.tanh(x) * sg.exp(x)"});
  gradcheck({"x * x", {{"x", kS23}}, "sg.op(\"mul\", {x, x})"});
  gradcheck({"x used three times", {{"x", kS23}, {"b", kS23}}, "sg.sigmoid(x) + x * b - sg.scale(x, 0.5)"});
  gradcheck({"matmul x with itself", {{"x", {3, 3}}}, "sg.matmul(x, x, {trans_b = true})"});
  gradcheck({"reduce then broadcast back", {{"x", kS23}}, "x - sg.broadcast_to(sg.reduce_mean(x, 1, true), {2, 3})"});
}

TEST_CASE("every parameter's gradient is reachable by its documented name <param>.grad") {
  // The contract the tests and tools rely on: grads are named "<param>.grad".
  // Models where two parameters' gradients are the same tensor (add, sub's
  // first operand, broadcast) are where a single name cannot serve both.
  for (const Case& c : {Case{"matmul", {{"a", {3, 4}}, {"b", {4, 5}}}, "sg.matmul(a, b)"},
                        Case{"mul", {{"a", kS23}, {"b", kS23}}, "sg.op(\"mul\", {a, b})"},
                        Case{"add", {{"a", kS23}, {"b", kS23}}, "sg.op(\"add\", {a, b})"}}) {
    INFO("case " << c.name);
    Prepared p = prepare(c);
    REQUIRE(p.session);
    for (auto& [n, g] : p.grads) {
      int id = p.model->find_tensor(n + ".grad");
      CHECK_MESSAGE(id >= 0, "no tensor named " << n << ".grad");
      if (id >= 0) CHECK(id == grad_tensor(*p.model, p.model->find_tensor(n)));
    }
  }
}

TEST_CASE("the checker rejects wrong gradients") {
  Case c{"mul", {{"a", kS23}, {"b", kS23}}, "sg.op(\"mul\", {a, b})"};
  Prepared p = prepare(c);
  REQUIRE(p.session);
  REQUIRE(compare(*p.session, p.values, p.grads).bad.empty());

  SUBCASE("one element off by 0.05") {
    auto g = p.grads;
    g["a"][4] += 0.05f;
    CheckResult r = compare(*p.session, p.values, g);
    REQUIRE(r.bad.size() == 1);
    CHECK(r.bad[0].param == "a");
    CHECK(r.bad[0].index == 4);
  }
  SUBCASE("the two operands' gradients swapped (d/da used for b)") {
    auto g = p.grads;
    std::swap(g["a"], g["b"]);
    CHECK(compare(*p.session, p.values, g).bad.size() >= 10);
  }
  SUBCASE("sign flipped") {
    auto g = p.grads;
    for (float& v : g["b"]) v = -v;
    CHECK(compare(*p.session, p.values, g).bad.size() == 6);
  }
  SUBCASE("scaled by 1.1: a missing normalization") {
    auto g = p.grads;
    for (float& v : g["w"]) v *= 1.1f;
    CHECK(!compare(*p.session, p.values, g).bad.empty());
  }
}
