// Activation recomputation (sg.checkpoint, compiler/recompute.cpp) on
// models/llama.lua with --set checkpoint=true: every block's activations are
// recomputed in the backward pass from the block's input. The same kernels run
// on the same values, so the loss, every gradient and the updated parameters
// must equal the model without checkpoints bit for bit (dropout too: its mask
// comes from the op's seed and the step), while the arena shrinks.
#include <cstring>

#include "harness.h"

using namespace sgrt;

namespace {

const std::map<std::string, std::string> kSmall = {
    {"n_layer", "3"}, {"n_embd", "32"}, {"n_head", "4"}, {"n_kv_head", "2"}, {"ffn", "48"}, {"vocab", "50"},
    {"block", "16"},  {"batch", "2"},   {"context", "16"}, {"tie", "false"}};

std::shared_ptr<const Model> llama(std::map<std::string, std::string> set, bool checkpoint) {
  set["checkpoint"] = checkpoint ? "true" : "false";
  for (auto& kv : kSmall) set.insert(kv);
  return test::compile_model_file("models/llama.lua", set);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two train steps on fixed tokens; after each, the loss, every trained
// parameter's gradient and value must be the same bits in both sessions.
void check_same_training(std::shared_ptr<const Model> plain, std::shared_ptr<const Model> ckpt) {
  auto a = test::open_session(plain), b = test::open_session(ckpt);
  std::vector<int32_t> tok, tgt;
  for (int i = 0; i < 32; ++i) {
    tok.push_back((i * 7 + 3) % 50);
    tgt.push_back((i * 11 + 5) % 50);
  }
  int grads = 0;
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    for (Session* s : {a.get(), b.get()}) {
      test::write_vec(*s, "tokens", tok);
      test::write_vec(*s, "targets", tgt);
    }
    // With accumulate = 2 (grad_step, then train_step) both programs recompute.
    const bool accumulate = plain->find_program("grad_step") >= 0;
    if (accumulate) CHECK(test::loss_of(*a, "grad_step") == test::loss_of(*b, "grad_step"));
    float la = test::loss_of(*a, "train_step"), lb = test::loss_of(*b, "train_step");
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    for (const TensorInfo& t : plain->tensors()) {
      if (t.role != Role::param || t.frozen) continue;
      CAPTURE(t.name);
      const std::string grad = t.name + (accumulate ? ".grad.mean" : ".grad");
      CHECK(same_bits(test::read_f32(*a, grad), test::read_f32(*b, grad)));
      CHECK(same_bits(test::read_f32(*a, t.name), test::read_f32(*b, t.name)));
      ++grads;
    }
  }
  CHECK(grads > 0);
}

}  // namespace

TEST_CASE("checkpoint=true recomputes each block in backward: the same loss, gradients and step, a smaller arena") {
  auto plain = llama({}, false), ckpt = llama({}, true);
  int recomputed = 0;
  for (const TensorInfo& t : ckpt->tensors()) recomputed += t.name.ends_with(".recomputed");
  CHECK(recomputed > 0);
  // Backward now reads block activations made late, not ones kept from the forward pass.
  CHECK(ckpt->root().memory()->arena_bytes() < plain->root().memory()->arena_bytes());
  CHECK(ckpt->root().memory()->persistent_bytes() == plain->root().memory()->persistent_bytes());
  check_same_training(plain, ckpt);
}

TEST_CASE("recomputation under LoRA with dropout: the recomputed mask is the forward's") {
  std::map<std::string, std::string> lora = {{"lora_rank", "4"}, {"lora_dropout", "0.25"}};
  check_same_training(llama(lora, false), llama(lora, true));
}

TEST_CASE("recomputation with gradient accumulation: grad_step recomputes too, and the arena shrinks") {
  std::map<std::string, std::string> acc = {{"accumulate", "2"}};
  auto plain = llama(acc, false), ckpt = llama(acc, true);
  CHECK(ckpt->root().memory()->arena_bytes() < plain->root().memory()->arena_bytes());
  check_same_training(plain, ckpt);
}

TEST_CASE("sg.checkpoint returns fn's results; nesting and a non-function are script errors") {
  const std::string base = R"(
local sg = require "sg"
local x = sg.input("x", {4, 6})
local w = sg.param("w", {6, 6}, {"normal", 0, 0.5})
local function f(h, k) return sg.matmul(h, w):tanh() * k, 7 end
)";
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(base + R"(
local y, seven = sg.checkpoint(f, x, 2.0)
assert(seven == 7)
sg.loss(sg.sum(sg.reshape(y, {24})))
sg.optimizer.sgd{ lr = 0.1 }
)", &m);
  CHECK_MESSAGE(st.ok(), st.message());
  st = test::compile_lua(base + "sg.checkpoint(function() return sg.checkpoint(f, x, 1) end)\n", &m);
  CHECK(st.message().find("checkpoints do not nest") != std::string::npos);
  st = test::compile_lua(base + "sg.checkpoint(x)\n", &m);
  CHECK(st.message().find("sg.checkpoint: expected a function") != std::string::npos);
}
