// LoRA (sg.lora, nn.lora) on models/llama.lua, shaped small by --set:
//  * adapters A [rank, in], B [out, rank] on exactly the targeted projections,
//    every other param frozen;
//  * with B = 0 (its initializer) the logits equal the base model's bit for
//    bit (the adapter adds an exact zero);
//  * a train step moves only adapters;
//  * adapter gradients against central finite differences of the eval loss,
//    with the tolerance of test_gradcheck.cpp (eps = 1e-2, |g - fd| <= 1e-3 +
//    5e-3 |fd|; the loss here is ~log(vocab) ~ 3.7, summed over 32 tokens, so
//    the FP32 rounding budget there holds).
#include <cmath>
#include <random>

#include "harness.h"
#include "sgrt/safetensors.h"

using namespace sgrt;

namespace {

const std::map<std::string, std::string> kTiny = {
    {"n_layer", "2"}, {"n_embd", "16"}, {"n_head", "2"}, {"n_kv_head", "1"}, {"ffn", "24"}, {"vocab", "40"},
    {"block", "8"},   {"batch", "2"},   {"context", "8"}, {"tie", "false"}};

std::shared_ptr<const Model> llama(std::map<std::string, std::string> set) {
  for (auto& kv : kTiny) set.insert(kv);
  return test::compile_model_file("models/llama.lua", set);
}

std::vector<std::string> params_of(const Model& m) {
  std::vector<std::string> r;
  for (const TensorInfo& t : m.tensors())
    if (t.role == Role::param) r.push_back(t.name);
  return r;
}

bool is_adapter(const std::string& name) { return name.find(".lora_") != std::string::npos; }

// The gradient tensor train_step's update reads for `param`.
int grad_tensor(const Model& m, int param) {
  for (const OpInfoLoaded& op : m.programs()[m.find_program("train_step")].ops)
    if (op.code == OpCode::AdamwUpdate && op.in[0] == param) return op.in[1];
  return -1;
}

}  // namespace

TEST_CASE("lora_rank adds A and B to the targeted projections only and freezes everything else") {
  auto m = llama({{"lora_rank", "4"}, {"lora_targets", "q,v,down"}});
  int adapters = 0;
  for (const std::string& n : params_of(*m)) {
    CAPTURE(n);
    const TensorInfo& t = m->tensors()[m->find_tensor(n)];
    CHECK(t.frozen == !is_adapter(n));
    adapters += is_adapter(n);
  }
  CHECK(adapters == 2 * 3 * 2);  // layers x targets x {A, B}
  auto shape = [&](const std::string& n) { return m->tensors()[m->find_tensor(n)].type.shape; };
  CHECK(shape("blk.0.attn_q.lora_A") == Shape{4, 16});
  CHECK(shape("blk.0.attn_q.lora_B") == Shape{16, 4});
  CHECK(shape("blk.1.attn_v.lora_B") == Shape{8, 4});  // n_kv_head * head size
  CHECK(shape("blk.1.ffn_down.lora_A") == Shape{4, 24});
  CHECK(m->find_tensor("blk.0.attn_k.lora_A") < 0);
  CHECK(m->find_tensor("blk.0.attn_q.weight.adam_m") < 0);
  ParamCounts pc = count_params(m->tensors());
  CHECK(pc.trained == 2 * (4 * 16 + 16 * 4 + 4 * 16 + 8 * 4 + 4 * 24 + 16 * 4));
}

TEST_CASE("with B = 0 the LoRA model's logits equal the base model's exactly; a step moves only adapters") {
  auto base_m = llama({});
  auto lora_m = llama({{"lora_rank", "4"}, {"lora_alpha", "8"}});
  auto base = test::open_session(base_m);
  auto lora = test::open_session(lora_m);
  for (const std::string& n : params_of(*base_m)) test::write_vec(*lora, n, test::read_f32(*base, n));
  test::feed_tiny_llama(*base);
  test::feed_tiny_llama(*lora);
  test::run(*base, "infer");
  test::run(*lora, "infer");
  auto logits = [](const Session& s) { return test::read_f32(s, s.model().tensors()[s.model().outputs()[0].second].name); };
  std::vector<float> lb = logits(*base), ll = logits(*lora);
  REQUIRE(lb.size() == 2 * 8 * 40);
  CHECK(ll == lb);

  std::map<std::string, std::vector<float>> before;
  for (const std::string& n : params_of(*lora_m)) before[n] = test::read_f32(*lora, n);
  for (int step = 1; step <= 2; ++step) {
    test::run(*lora, "train_step");
    for (const std::string& n : params_of(*lora_m)) {
      CAPTURE(step);
      CAPTURE(n);
      bool moved = test::read_f32(*lora, n) != before[n];
      if (!is_adapter(n)) CHECK_FALSE(moved);
      // Step 1: B moves; A's gradient is 0 while B = 0, so A moves from step 2.
      else if (n.find("lora_B") != std::string::npos || step == 2) CHECK(moved);
      else CHECK_FALSE(moved);
    }
  }
}

TEST_CASE("adapter gradients match finite differences") {
  auto m = llama({{"lora_rank", "2"}, {"lora_alpha", "3"}, {"lora_targets", "q,o,up,down"}});
  auto s = test::open_session(m);
  test::feed_tiny_llama(*s);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::map<std::string, std::vector<float>> values;
  for (const std::string& n : params_of(*m)) {
    std::vector<float> v = test::read_f32(*s, n);
    if (is_adapter(n)) for (float& x : v) x = u(rng);  // B = 0 would zero A's gradient
    values[n] = v;
    test::write_vec(*s, n, v);
  }
  test::run(*s, "train_step");
  std::map<std::string, std::vector<float>> grads;
  for (auto& [n, v] : values) {
    if (!is_adapter(n)) continue;
    int gid = grad_tensor(*m, m->find_tensor(n));
    REQUIRE_MESSAGE(gid >= 0, "no gradient for " << n);
    std::vector<float> g(v.size());
    REQUIRE(s->read(gid, g.data(), g.size() * sizeof(float)).ok());
    grads[n] = g;
  }
  for (auto& [n, v] : values) test::write_vec(*s, n, v);  // undo the step

  constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 5e-3;
  double worst = 0, largest = 0;
  int checked = 0;
  for (auto& [n, g] : grads) {
    std::vector<float> x = values[n];
    for (size_t i = 0; i < x.size(); ++i) {
      const float x0 = x[i], xp = x0 + static_cast<float>(kEps), xm = x0 - static_cast<float>(kEps);
      x[i] = xp;
      test::write_vec(*s, n, x);
      double lp = test::loss_of(*s);
      x[i] = xm;
      test::write_vec(*s, n, x);
      double lm = test::loss_of(*s);
      x[i] = x0;
      test::write_vec(*s, n, x);
      double fd = (lp - lm) / (static_cast<double>(xp) - xm);
      double err = std::abs(g[i] - fd) / (kAtol + kRtol * std::abs(fd));
      CHECK_MESSAGE(err <= 1.0, n << "[" << i << "]: analytic " << g[i] << ", finite differences " << fd);
      worst = std::max(worst, err);
      largest = std::max(largest, std::abs(fd));
      ++checked;
    }
  }
  MESSAGE("checked " << checked << " adapter elements, worst error " << worst << " of the tolerance");
  CHECK(checked == 2 * (2 * 16 + 16 * 2 + 2 * 16 + 16 * 2 + 2 * 16 + 24 * 2 + 2 * 24 + 16 * 2));
  CHECK(largest > 1e-2);  // gradients large enough for the check to mean something
}

TEST_CASE("sg.lora adapts any model's projections; targets are checked") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
sg.lora{ rank = 2, targets = {"fc1%.w$"} }
local x = sg.input("x", {3, 5})
local y = sg.input("y", {3}, "i32")
local logits = sg.nn.mlp(x, {6, 4}, {name = "mlp"})
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.optimizer.adamw{ lr = 0.01 }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(m->find_tensor("mlp.fc1.lora_A") >= 0);
  CHECK(m->tensors()[m->find_tensor("mlp.fc1.lora_A")].type.shape == Shape{2, 5});
  CHECK(m->find_tensor("mlp.fc2.lora_A") < 0);
  CHECK(m->tensors()[m->find_tensor("mlp.fc1.b")].frozen);
  CHECK(count_params(m->tensors()).trained == 2 * 5 + 6 * 2);

  compiler::Graph g;
  dsl::ScriptOptions opts;
  opts.set = {{"lora_rank", "4"}, {"lora_targets", "q,x"}};
  st = dsl::load_script(SGRT_SOURCE_DIR "/models/llama.lua", opts, &g);
  CHECK(st.message().find("sg.lora: unknown target 'x' (down, gate, k, o, q, up, v, or a name pattern)") != std::string::npos);
}

TEST_CASE("trained adapters out (export_safetensors trained) and onto a fresh base (import trained): the same logits") {
  auto m = llama({{"lora_rank", "4"}, {"lora_alpha", "8"}});
  auto trained = test::open_session(m), fresh = test::open_session(m);  // the same seed: the same frozen base
  test::feed_tiny_llama(*trained);
  for (int step = 0; step < 3; ++step) test::run(*trained, "train_step");
  test::TempFile adapters(".safetensors");
  REQUIRE(export_safetensors(*trained, adapters.path, DType::f32, ParamSet::trained).ok());
  std::vector<SafeTensor> file;
  REQUIRE(read_safetensors(adapters.path, &file).ok());
  for (const SafeTensor& t : file) CHECK(is_adapter(t.name));
  CHECK(file.size() == 2 * 7 * 2);  // layers x the seven projections x {A, B}

  auto logits = [](Session& s) {
    test::feed_tiny_llama(s);
    test::run(s, "infer");
    return test::read_f32(s, s.model().tensors()[s.model().outputs()[0].second].name);
  };
  std::vector<float> want = logits(*trained);
  CHECK(logits(*fresh) != want);  // B = 0 there: the base model
  Status st = import_safetensors(*fresh, adapters.path, ParamSet::trained);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(logits(*fresh) == want);

  // A file with a frozen parameter, or one missing an adapter, is refused whole.
  test::TempFile all(".safetensors");
  REQUIRE(export_safetensors(*trained, all.path, DType::f32).ok());
  st = import_safetensors(*fresh, all.path, ParamSet::trained);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("is a frozen parameter") != std::string::npos);
  file.pop_back();
  REQUIRE(write_safetensors(adapters.path, file).ok());
  st = import_safetensors(*fresh, adapters.path, ParamSet::trained);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("has no tensor") != std::string::npos);
}
