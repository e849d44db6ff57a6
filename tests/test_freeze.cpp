// Frozen parameters (sg.param's requires_grad = false, sg.freeze): no gradient,
// no optimizer state, no master copy, a smaller memory plan; one train step
// leaves them bit-identical and moves the trained ones exactly as the same
// model with nothing frozen does (freezing a layer does not change the
// gradient of the layers after it: d loss / d fc2 does not read fc1's gradient).
#include "harness.h"
#include "sgrt/safetensors.h"

using namespace sgrt;

namespace {

// fc1 -> relu -> fc2 on a fixed input; FREEZE is spliced in after the layers.
std::string mlp(const std::string& fc1_opts, const std::string& freeze = "", const std::string& state = "fp32") {
  return R"(
local sg = require "sg"
local x = sg.input("x", {4, 6})
local y = sg.input("y", {4}, "i32")
local function linear(h, name, out, opts)
  local w = sg.param(name .. ".w", {out, h:dim(-1)}, {"normal", 0, 0.5}, opts)
  return sg.matmul(h, w, {trans_b = true}) + sg.param(name .. ".b", {out}, "zeros", opts)
end
local h = linear(x, "fc1", 8, )" + fc1_opts + R"():relu()
local logits = linear(h, "fc2", 3)
)" + freeze + R"(
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.optimizer.adamw{ lr = 0.1, state = ")" + state + R"(" }
)";
}

std::shared_ptr<const Model> compile_ok(const std::string& lua, compiler::Graph* g = nullptr) {
  compiler::Graph local;
  compiler::Graph& graph = g ? *g : local;
  std::shared_ptr<const Model> m;
  Status st = test::compile_graph(lua, &graph);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> loaded;
  st = Model::load_bytes(compiler::serialize(graph), "test.sg", &loaded);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return std::shared_ptr<const Model>(std::move(loaded));
}

bool has(const Model& m, const std::string& name) { return m.find_tensor(name) >= 0; }
bool frozen(const Model& m, const std::string& name) { return m.tensors()[m.find_tensor(name)].frozen; }

// One train step from the same seed and inputs; returns the session.
std::unique_ptr<Session> one_step(std::shared_ptr<const Model> m) {
  auto s = test::open_session(std::move(m));
  test::write_vec(*s, "x", std::vector<float>{0.5f, -1, 2, 0.25f, -0.75f, 1, 1, 0, -2, 0.5f, 1.5f, -0.5f,
                                              -1, 1, 0.5f, 2, -0.25f, 0, 0.3f, 0.6f, -0.9f, 1.2f, -1.5f, 1.8f});
  test::write_vec(*s, "y", std::vector<int32_t>{0, 2, 1, 2});
  test::run(*s, "train_step");
  return s;
}

}  // namespace

TEST_CASE("requires_grad = false: no gradient, optimizer state or master, and a smaller arena") {
  for (const char* state : {"fp32", "O2"}) {
    CAPTURE(state);
    compiler::Graph gt, gf;
    auto trained = compile_ok(mlp("nil", "", state), &gt);
    auto fr = compile_ok(mlp("{requires_grad = false}", "", state), &gf);
    for (const char* p : {"fc1.w", "fc1.b"}) {
      CAPTURE(p);
      CHECK(frozen(*fr, p));
      CHECK_FALSE(frozen(*trained, p));
      CHECK(has(*trained, std::string(p) + ".grad"));
      CHECK(has(*trained, std::string(p) + ".adam_m"));
      CHECK_FALSE(has(*fr, std::string(p) + ".grad"));
      CHECK_FALSE(has(*fr, std::string(p) + ".adam_m"));
      CHECK_FALSE(has(*fr, std::string(p) + ".adam_v"));
      CHECK_FALSE(has(*fr, std::string(p) + ".master"));
      CHECK_FALSE(has(*fr, std::string(p) + ".opt_scales"));
      // A frozen param is its own storage: persistent f32 at every state level.
      const TensorInfo& t = fr->tensors()[fr->find_tensor(p)];
      CHECK(t.persistent);
      CHECK(t.type.dtype == DType::f32);
    }
    CHECK(has(*fr, "fc2.w.adam_m"));
    // Persistent bytes drop by at least AdamW's two moments of fc1 (48 + 8 elements).
    uint64_t moments = std::string(state) == "fp32" ? (48 + 8) * 8 : (48 + 8) * 3;  // O2: e4m3 m + f16 v
    CHECK(gt.persistent_bytes >= gf.persistent_bytes + moments);
    CHECK(gt.arena_bytes > gf.arena_bytes);
    ParamCounts pc = count_params(fr->tensors());
    CHECK(pc.frozen == 48 + 8);
    CHECK(pc.trained == 24 + 3);
  }
}

TEST_CASE("a train step leaves frozen params bit-identical and trains the rest as without freezing") {
  auto base = one_step(compile_ok(mlp("nil")));
  auto fresh = test::open_session(compile_ok(mlp("nil")));  // the initial values
  auto fr = one_step(compile_ok(mlp("{requires_grad = false}")));
  for (const char* p : {"fc1.w", "fc1.b"}) {
    CAPTURE(p);
    CHECK(test::read_f32(*fr, p) == test::read_f32(*fresh, p));
    CHECK(test::read_f32(*base, p) != test::read_f32(*fresh, p));
  }
  for (const char* p : {"fc2.w", "fc2.b"}) {
    CAPTURE(p);
    CHECK(test::read_f32(*fr, p) != test::read_f32(*fresh, p));
    CHECK(test::read_f32(*fr, p) == test::read_f32(*base, p));
  }
}

TEST_CASE("sg.freeze: patterns cover params declared before and after; requires_grad = true wins") {
  // Before: fc1 and fc2 exist when sg.freeze runs.
  auto m = compile_ok(mlp("nil", "sg.freeze{ '^fc1%.', 'fc2%.b$' }"));
  CHECK(frozen(*m, "fc1.w"));
  CHECK(frozen(*m, "fc1.b"));
  CHECK(frozen(*m, "fc2.b"));
  CHECK_FALSE(frozen(*m, "fc2.w"));
  // After: a rule declared first applies to params made later.
  m = compile_ok("local sg = require 'sg'\nsg.freeze(function(name) return name == 'a' end)\n"
                 "local a, b = sg.param('a', {2}, 'ones'), sg.param('b', {2}, 'ones')\n"
                 "local c = sg.param('c', {2}, 'ones', {requires_grad = true})\nsg.freeze('c')\n"
                 "sg.loss(sg.sum(a * b * c))\nsg.optimizer.sgd{ lr = 0.1 }\n");
  CHECK(frozen(*m, "a"));
  CHECK_FALSE(frozen(*m, "b"));
  CHECK_FALSE(frozen(*m, "c"));
}

TEST_CASE("freezing errors name the cause") {
  compiler::Graph g;
  Status st = test::compile_graph(mlp("nil", "sg.freeze('.')"), &g);
  CHECK(st.message().find("does not depend on any trained (unfrozen) parameter") != std::string::npos);
  compiler::Graph g2;
  st = test::compile_graph(mlp("nil", "sg.freeze(3)"), &g2);
  INFO(st.message());
  CHECK(st.message().find(":11: sg.freeze: expected a name pattern") != std::string::npos);
  compiler::Graph g3;
  st = test::compile_graph(mlp("{requires_grad = false, frozen = true}"), &g3);
  CHECK(st.message().find("sg.param: unknown option 'frozen'") != std::string::npos);
}

TEST_CASE("a weights file may leave out trained params beside frozen ones, never a frozen one") {
  auto m = compile_ok(mlp("{requires_grad = false}"));
  auto s = test::open_session(m);
  std::vector<float> w1(48, 0.25f), b1(8, -0.5f);
  test::TempFile base(".safetensors");
  Status st = write_safetensors(base.path, {{"fc1.w", DType::f32, {8, 6}, w1}, {"fc1.b", DType::f32, {8}, b1}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<float> fc2 = test::read_f32(*s, "fc2.w");
  st = import_safetensors(*s, base.path);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(test::read_f32(*s, "fc1.w") == w1);
  CHECK(test::read_f32(*s, "fc2.w") == fc2);  // kept its initializer

  test::TempFile partial(".safetensors");
  st = write_safetensors(partial.path, {{"fc1.w", DType::f32, {8, 6}, w1}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  st = import_safetensors(*s, partial.path);
  CHECK(st.message().find("has no tensor 'fc1.b'") != std::string::npos);
  // With nothing frozen every param must be in the file, as before.
  auto all = test::open_session(compile_ok(mlp("nil")));
  st = import_safetensors(*all, base.path);
  CHECK(st.message().find("has no tensor 'fc2.w'") != std::string::npos);
}
