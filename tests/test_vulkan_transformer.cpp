// The Vulkan transformer kernels' edges (test_vulkan_ops.cpp cross-checks them
// inside whole models): dropout's mask equal to the CPU's and to sgrt/rng.h's
// generator bit for bit, step after step; rope's angle precision over a long
// context; an embedding id out of range reported with the op's Lua line;
// models/gpt.lua complete on Vulkan, 20 training steps tracking the CPU's
// losses (and a tiny models/llama.lua's; its KV-cache generation the CPU's logits),
// losses, attention's gradients repeating bit for bit, every attention tile pair
// against the CPU, and the head size the attention kernels refuse. LoRA's
// scales and adds folded into its products give the unfused bits.
#include <cstring>
#include <algorithm>
#include <fstream>

#include "backend_compare.h"
#include "sgrt/quant.h"
#include "scoped_env.h"
#include "sgrt/rng.h"
#include "test_vulkan_support.h"

using namespace sgrt;

namespace {

// 3003 elements: several workgroups, the last one partial. The loss's gradient
// is 1 everywhere, so x.grad is the mask times 1 / (1 - p): the gradient's
// dropout rebuilds the forward's mask from (seed, step).
const char* kDropout = R"(
  local sg = require "sg"
  local x = sg.param("x", {3, 1001}, "ones")
  sg.loss(sg.sum(sg.sum(sg.dropout(x, 0.3))))
  sg.optimizer.sgd{ lr = 0.1 }
)";

// models/<name> compiled with `set`, its script followed by `extra`.
std::shared_ptr<const Model> compile_model(const std::string& name, const std::map<std::string, std::string>& set,
                                           const std::string& extra = "") {
  std::ifstream src(SGRT_SOURCE_DIR "/models/" + name);
  std::string lua = std::string(std::istreambuf_iterator<char>(src), {}) + extra;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(lua, &m, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

std::vector<uint32_t> read_words(const Session& s, int id) {
  std::vector<uint32_t> v(s.model().tensors()[id].bytes / 4);
  Status st = s.read(id, v.data(), v.size() * 4);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

}  // namespace

TEST_CASE("vulkan dropout keeps exactly the elements the cpu keeps: those rng_uniform picks") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(kDropout, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  const OpInfoLoaded* drop = nullptr;  // the forward dropout: the train program's first
  for (const ProgramInfo& p : m->programs())
    for (const OpInfoLoaded& op : p.ops)
      if (p.name == "train_step" && op.code == OpCode::Dropout && !drop) drop = &op;
  REQUIRE(drop != nullptr);
  float p = static_cast<float>(drop->attrs.f("p"));
  uint64_t seed = static_cast<uint64_t>(drop->attrs.i("seed"));
  auto cpu = test::open_session(m, "cpu");
  auto vk = test::open_session(m, "vulkan");
  int grad = test::tensor_id(*cpu, "x.grad");
  float kept = 1.f / (1.f - p);
  std::vector<uint32_t> last;
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    int32_t t = static_cast<int32_t>(read_words(*cpu, drop->in[1])[kStep]);
    CHECK(static_cast<int32_t>(read_words(*vk, drop->in[1])[kStep]) == t);
    test::run(*cpu, "train_step");
    test::run(*vk, "train_step");
    std::vector<uint32_t> a = read_words(*cpu, grad), b = read_words(*vk, grad);
    CHECK(a == b);
    CHECK(b != last);  // a fresh mask each step
    last = b;
    size_t mismatches = 0, dropped = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      float y;
      std::memcpy(&y, &b[i], 4);
      bool keep = rng_uniform(seed, static_cast<uint64_t>(t), i) >= p;
      mismatches += y != (keep ? kept : 0.f);
      dropped += !keep;
    }
    CHECK(mismatches == 0);
    CHECK(dropped > 800);  // ~0.3 * 3003 = 901
    CHECK(dropped < 1000);
  }
}

TEST_CASE("vulkan rope keeps the cpu's precision at position 4095") {
  if (!test::vulkan_device_present()) return;
  // Angles up to 4095 rad: a float angle would be off by ~2e-4 here; the
  // float-float angle stays within the f32 bound of the cross-check.
  const char* lua = R"(
    local sg = require "sg"
    local x = sg.input("x", {1, 4096, 64})
    local g = sg.param("g", {64}, {"uniform", 0.5, 1.5})
    sg.loss(sg.sum(sg.sum(sg.sum(sg.rope(x * g, 1) * x))))
    sg.optimizer.sgd{ lr = 0.1 }
  )";
  std::set<OpCode> covered;
  test::cross_check("vulkan", lua, {}, &covered);
  CHECK(covered.count(OpCode::Rope) == 1);
}

TEST_CASE("vulkan rope with interleaved pairs (GGUF llama's) matches the cpu") {
  if (!test::vulkan_device_present()) return;
  const char* lua = R"(
    local sg = require "sg"
    local x = sg.input("x", {2, 37, 48})
    local g = sg.param("g", {48}, {"uniform", 0.5, 1.5})
    sg.loss(sg.sum(sg.sum(sg.sum(sg.rope(x * g, 4, 10000, true) * x))))
    sg.optimizer.sgd{ lr = 0.1 }
  )";
  std::set<OpCode> covered;
  test::cross_check("vulkan", lua, {}, &covered);
  CHECK(covered.count(OpCode::Rope) == 1);
}

TEST_CASE("models/llama.lua (GQA, interleaved rope, SwiGLU) lacks nothing on vulkan") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m = compile_model("llama.lua", test::kTinyLlama);
  std::vector<std::string> missing;
  REQUIRE(missing_ops("vulkan", *m, &missing).ok());
  CHECK(missing.empty());
}

TEST_CASE("models/llama.lua (tiny): 20 fp32 steps on vulkan track the cpu's losses within 1e-4") {
  if (!test::vulkan_device_present()) return;
  // llama.lua binds no data set (it starts from GGUF weights); the text one here.
  test::check_training_tracks("vulkan", compile_model("llama.lua", test::kTinyLlama, "\nsg.data.text{ tokens = tokens, targets = targets }\n"));
}

TEST_CASE("a LoRA fine-tune of the tiny llama (GQA, tied head) on vulkan: fp32 losses and fp8/nvfp4 codes as the cpu's") {
  if (!test::vulkan_device_present()) return;
  test::check_lora_parity("vulkan");
}

TEST_CASE("models/llama.lua (tiny) generates on vulkan as on the cpu: prefill, then decode steps with the KV cache") {
  if (!test::vulkan_device_present()) return;
  test::check_decode_tracks("vulkan", test::kTinyLlama);
}

TEST_CASE("a KV-cache position past the cache or negative is an error on vulkan naming the op") {
  if (!test::vulkan_device_present()) return;
  test::check_bad_positions_named("vulkan");
}

TEST_CASE("the embedding gradient adds repeated ids in the cpu's order, bit for bit, on the cpu and vulkan") {
  test::check_embedding_grad_exact("cpu");  // the check itself, against its own loop
  if (!test::vulkan_device_present()) return;
  test::check_embedding_grad_exact("vulkan");
}

TEST_CASE("an embedding id outside the vocabulary is an error naming the op's Lua line") {
  if (!test::vulkan_device_present()) return;
  test::check_bad_ids_named("vulkan");
}

TEST_CASE("models/gpt.lua with rope and dropout lacks nothing on vulkan") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m = compile_model("gpt.lua", {{"rope", "true"}, {"dropout", "0.1"}, {"n_layer", "1"}, {"n_embd", "32"},
                                                {"n_head", "2"}, {"block", "8"}, {"batch", "2"}});
  std::set<OpCode> used;
  for (const ProgramInfo& p : m->programs())
    for (const OpInfoLoaded& op : p.ops) used.insert(op.code);
  for (OpCode c : {OpCode::Embedding, OpCode::EmbeddingGrad, OpCode::LayerNorm, OpCode::LayerNormGrad, OpCode::Rope,
                   OpCode::Dropout, OpCode::Gelu, OpCode::Attention, OpCode::AttentionGrad})
    CHECK(used.count(c) == 1);
  std::vector<std::string> missing;
  REQUIRE(missing_ops("vulkan", *m, &missing).ok());
  CHECK(missing.empty());
}

TEST_CASE("models/gpt.lua: 20 fp32 steps on vulkan track the cpu's losses within 1e-4") {
  if (!test::vulkan_device_present()) return;
  test::check_training_tracks("vulkan", compile_model("gpt.lua", {{"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"}, {"block", "16"},
                                                  {"batch", "2"}, {"warmup", "2"}}));
}

TEST_CASE("vulkan attention repeats bit for bit: no atomics, fixed sums") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m = compile_model("gpt.lua", {{"n_layer", "1"}, {"n_embd", "32"}, {"n_head", "4"}, {"block", "37"},
                                                {"batch", "2"}});
  std::unique_ptr<Session> s[2] = {test::open_session(m, "vulkan", 5), test::open_session(m, "vulkan", 5)};
  std::vector<int32_t> tokens(2 * 37);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 31) % 256);
  for (auto& x : s) {
    test::write_vec<int32_t>(*x, "tokens", tokens);
    test::write_vec<int32_t>(*x, "targets", tokens);
    test::run(*x, "train_step");
  }
  for (const char* w : {"h0.attn.q.w.grad", "h0.attn.k.w.grad", "h0.attn.v.w.grad"}) {
    INFO(w);
    std::vector<float> a = test::read_f32(*s[0], w), b = test::read_f32(*s[1], w);
    CHECK(std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
  }
}

TEST_CASE("every attention tile pair agrees with the cpu, and SGRT_VULKAN_ATTENTION_TILES refuses what cannot run") {
  if (!test::vulkan_device_present()) return;
  // The lowering picks the largest pair that fits workgroup memory, so a GPU
  // runs pairs lavapipe's 32 KiB cannot at Dh = 64; at Dh = 16 they all fit.
  // T = 70: several tiles of every size, the last partial; Dh = 30: a row's
  // outputs split unevenly over its invocations.
  for (const char* tiles : {"32,32", "32,16", "16,16", "16,8", "8,8", "8,4"}) {
    CAPTURE(tiles);
    test::ScopedEnv forced("SGRT_VULKAN_ATTENTION_TILES", tiles);
    std::set<OpCode> covered;
    test::cross_check("vulkan", test::kAttentionModel, {{"t", "70"}, {"dh", "16"}}, &covered);
    test::cross_check("vulkan", test::kAttentionModel, {{"b", "1"}, {"t", "19"}, {"dh", "30"}, {"kv", "1"}}, &covered);
    CHECK(covered.count(OpCode::AttentionGrad) == 1);
  }
  std::shared_ptr<const Model> m = compile_model("gpt.lua", {{"n_layer", "1"}, {"n_embd", "256"}, {"n_head", "2"}, {"block", "4"},
                                                {"batch", "1"}});
  for (auto [tiles, message] : {std::pair{"32,64", "SGRT_VULKAN_ATTENTION_TILES is R,S with R 8, 16 or 32 and S 4, 8, 16 or 32, not '32,64'"},
                                {"32,32", "attention tiles 32,32 need "}}) {
    CAPTURE(tiles);
    std::unique_ptr<Session> s;
    Status st = test::vulkan_session_with("SGRT_VULKAN_ATTENTION_TILES", tiles, m, &s);
    CHECK(st.message().find(message) != std::string::npos);
  }
}

TEST_CASE("a head size past 128 is refused, naming attention and the size") {
  if (!test::vulkan_device_present()) return;
  std::shared_ptr<const Model> m = compile_model("gpt.lua", {{"n_layer", "1"}, {"n_embd", "272"}, {"n_head", "2"}, {"block", "4"},
                                                {"batch", "1"}});
  std::unique_ptr<Backend> be;
  REQUIRE(make_backend("vulkan", &be).ok());
  std::unique_ptr<Session> s;
  Status st = Session::create(m, std::move(be), &s);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("attention") != std::string::npos);
  CHECK(st.message().find("head size 136") != std::string::npos);
}

// The tiny llama's LoRA step: every adapter's alpha / r scale (forward and
// gradient) and the adapter's sum with the base product (forward and input
// gradient) run in the products' epilogues (product_fusion.h) where the memory
// plan lets the fused op's output be written early; two steps give every
// parameter and optimizer state the bits of SGRT_VULKAN_FUSE=0, under fp32 and
// fp8 (the scales and adds then fold into qmatmuls).
TEST_CASE("vulkan folds LoRA's scales and adds into its products: the bits of SGRT_VULKAN_FUSE=0") {
  for (const std::string recipe : {"fp32", "fp8"}) {
    CAPTURE(recipe);
    std::shared_ptr<const Model> m;
    REQUIRE(test::compile_lua(test::llama_text_lua(recipe), &m, test::tiny_lora_llama()).ok());
    const ProgramInfo& step = m->programs()[m->find_program("train_step")];
    const int scales = static_cast<int>(std::count_if(step.ops.begin(), step.ops.end(),
                                                      [](const OpInfoLoaded& op) { return op.code == OpCode::Scale; }));
    CHECK(scales == 2 * 7 * 2);  // 2 layers x 7 adapters, forward and gradient
    CHECK(static_cast<int>(find_scale_fusions(*m, step).size()) >= scales / 2);
    CHECK(find_addend_fusions(*m, step, {}, true).size() >= 2 * 7);
    if (!test::vulkan_device_present()) continue;
    std::unique_ptr<Session> s[2];
    for (int fuse = 0; fuse < 2; ++fuse) {
      REQUIRE(test::vulkan_session_with("SGRT_VULKAN_FUSE", fuse ? "1" : "0", m, &s[fuse]).ok());
      REQUIRE(s[fuse]->init(3, 100).ok());
      for (const char* name : {"tokens", "targets"}) {  // [2, 16]
        std::vector<int32_t> ids(32);
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + name[0]) % 256);
        test::write_vec(*s[fuse], name, ids);
      }
      test::run(*s[fuse], "train_step");
      test::run(*s[fuse], "train_step");
    }
    for (size_t id = 0; id < m->tensors().size(); ++id) {
      const TensorInfo& t = m->tensors()[id];
      if (!t.persistent || t.bytes == 0) continue;
      INFO(t.name);
      CHECK(test::bytes_of(*s[0], static_cast<int>(id)) == test::bytes_of(*s[1], static_cast<int>(id)));
    }
  }
}
