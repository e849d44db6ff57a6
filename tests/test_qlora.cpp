// A frozen quantized base (QLoRA): sg.lora{base = "q4_1" | "q8_0"} on
// models/llama.lua, shaped small by --set, and sg.param's dtype option.
//  * every frozen 2-D weight (projections, the embedding) is stored as blocks,
//    adapters and norms stay f32, and the arena counts block bytes;
//  * the logits equal those of an f32-base model given the decoded weights
//    (the independent path: plain matmuls of f32 values);
//  * adapter gradients match central finite differences of the eval loss
//    (test_lora.cpp's tolerance);
//  * bad declarations are refused with the script's file:line;
//  * a GGUF's Q4_1 tensors bind bit for bit, a Q8_0 one into a q4_1 param is
//    ggml's quantizer applied to its values (SmolLM2; skipped when absent);
//  * the fine-tune's checkpoint (fp8, O2: adapters kept as f16 masters) loads
//    into the generation compile, where the adapters are f32 parameters: each
//    the master's decoded value over its scale (formats.h's scalar decode).
#include <cmath>
#include <cstring>
#include <random>

#include "formats/formats.h"
#include "formats/gguf_blocks.h"
#include "harness.h"
#include "model_files.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/params.h"
#include "sgrt/safetensors.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::map<std::string, std::string> kTiny = {
    {"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"},  {"n_kv_head", "1"}, {"ffn", "64"}, {"vocab", "40"},
    {"block", "8"},   {"batch", "2"},   {"context", "8"}, {"tie", "true"},    {"lora_rank", "2"}, {"lora_alpha", "3"}};

std::shared_ptr<const Model> llama(const std::string& base) {
  std::map<std::string, std::string> set = kTiny;
  set["lora_base"] = base;
  return test::compile_model_file("models/llama.lua", set);
}

std::vector<float> param_values(const Session& s, const std::string& name) {
  std::vector<float> v;
  Status st = read_param(s, test::tensor_id(s, name), &v);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

bool is_adapter(const std::string& name) { return name.find(".lora_") != std::string::npos; }

}  // namespace

TEST_CASE("lora_base stores every frozen 2-D weight as blocks; adapters and norms stay f32; the arena counts blocks") {
  for (const char* base : {"q4_1", "q8_0"}) {
    CAPTURE(base);
    auto m = llama(base), f = llama("f32");
    uint64_t saved = 0;
    int blocks = 0;
    for (const TensorInfo& t : m->tensors()) {
      if (t.role != Role::param) continue;
      CAPTURE(t.name);
      const bool want = !is_adapter(t.name) && t.type.shape.size() == 2;
      CHECK(dtype_is_block(t.type.dtype) == want);
      if (!want) continue;
      CHECK(std::string(dtype_name(t.type.dtype)) == base);
      CHECK(t.bytes == numel(t.type.shape) / 32 * (std::string(base) == "q8_0" ? 34 : 20));
      saved += numel(t.type.shape) * 4 - t.bytes;
      ++blocks;
    }
    CHECK(blocks == 1 + 2 * 7);  // the tied embedding, 7 projections per layer
    // An inference-only compile (generation) reads every param and trains none:
    // the adapters stay f32 there too, so a checkpoint's f32 adapters bind.
    std::map<std::string, std::string> set = kTiny;
    set["lora_base"] = base;
    auto infer = test::compile_model_file("models/llama.lua", set, true);
    for (const TensorInfo& t : infer->tensors())
      if (t.role == Role::param) CHECK_MESSAGE(dtype_is_block(t.type.dtype) == (!is_adapter(t.name) && t.type.shape.size() == 2), t.name);
    // The same plan less the f32 bytes the blocks save (each tensor 64-byte aligned).
    const uint64_t slack = 64 * static_cast<uint64_t>(blocks);
    CHECK(m->arena_bytes() + saved <= f->arena_bytes() + slack);
    CHECK(m->arena_bytes() + saved + slack >= f->arena_bytes());
  }
}

namespace {

// Trained under `recipe` at O2 (adapters' masters f16), then the generation
// compile (batch 1, KV cache, no training step), where sg.lora's base leaves
// them f32.
void check_o2_checkpoint_into_generation(const std::string& recipe) {
  std::map<std::string, std::string> set = kTiny;
  set["lora_base"] = "q4_1";
  auto trained = test::compile_model_file("models/llama.lua", set, false, recipe, "O2");
  auto s = test::open_session(trained);
  test::feed_tiny_llama(*s);
  for (int i = 0; i < 2; ++i) test::run(*s, "train_step");
  test::TempDir dir;
  REQUIRE(save_checkpoint(*s, dir.path, 2).ok());
  set["batch"] = "1";
  set["kv_cache"] = "true";
  auto infer = test::compile_model_file("models/llama.lua", set, true, recipe, "O2");
  const std::vector<bool> supplied = checkpoint_tensors(*infer, *trained);
  auto g = test::open_session(infer, "cpu", 1, supplied);
  CheckpointMeta meta;
  Status st = load_checkpoint(*g, dir.path, *trained, &meta);
  REQUIRE_MESSAGE(st.ok(), st.message());
  int adapters = 0, own_states = 0;
  auto fresh = test::open_session(infer);  // every tensor from its initializer or plan
  for (size_t id = 0; id < infer->tensors().size(); ++id) {
    const TensorInfo& t = infer->tensors()[id];
    CAPTURE(t.name);
    const int tt = trained->find_tensor(t.name);
    if (t.role == Role::scale_state && (tt < 0 || !(trained->tensors()[tt].type == t.type))) {  // its own: from its plan
      CHECK_FALSE(supplied[id]);
      auto bytes = [&](const Session& from) {
        std::vector<uint8_t> b(t.bytes);
        REQUIRE(from.read(static_cast<int>(id), b.data(), b.size()).ok());
        return b;
      };
      CHECK(bytes(*g) == bytes(*fresh));
      ++own_states;
    }
    if (t.role != Role::param || !is_adapter(t.name)) continue;
    REQUIRE(t.type.dtype == DType::f32);
    CHECK(supplied[id]);
    std::vector<uint16_t> codes(static_cast<size_t>(numel(t.type.shape)));
    REQUIRE(s->read(test::tensor_id(*s, t.name + ".master"), codes.data(), codes.size() * 2).ok());
    const float scale = test::read_f32(*s, t.name + ".opt_scales")[kOptScaleW];
    std::vector<float> want;
    for (uint16_t c : codes) want.push_back(fmt::f16_decode(c) * (1.f / scale));
    CHECK(test::read_f32(*g, t.name) == want);
    ++adapters;
  }
  CHECK(adapters == 2 * 7 * 2);
  CHECK(own_states > 0);
}

}  // namespace

// nvfp4's block scales are sized by the activations' rows: a name both
// compiles have may hold another shape there.
TEST_CASE("an O2 QLoRA checkpoint loads into the inference-only compile: adapters f32, from their masters") {
  for (const char* recipe : {"fp8", "nvfp4"}) {
    CAPTURE(recipe);
    check_o2_checkpoint_into_generation(recipe);
  }
}

TEST_CASE("a base table gives the params a pattern matches their own format") {
  std::map<std::string, std::string> set = kTiny;
  set["lora_base"] = "q4_1";
  set["lora_base_embd"] = "q8_0";  // models/llama.lua: { "q4_1", ["^token_embd%.weight$"] = "q8_0" }
  auto m = test::compile_model_file("models/llama.lua", set);
  CHECK(m->tensors()[m->find_tensor("token_embd.weight")].type.dtype == DType::q8_0);
  CHECK(m->tensors()[m->find_tensor("blk.1.attn_k.weight")].type.dtype == DType::q4_1);
  CHECK(m->tensors()[m->find_tensor("blk.1.attn_k.lora_A")].type.dtype == DType::f32);
}

TEST_CASE("QLoRA logits equal an f32-base model holding the decoded weights") {
  for (const char* base : {"q4_1", "q8_0"}) {
    CAPTURE(base);
    auto qm = llama(base), fm = llama("f32");
    auto q = test::open_session(qm), f = test::open_session(fm);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    for (const TensorInfo& t : qm->tensors()) {
      if (t.role != Role::param) continue;
      std::vector<float> v = param_values(*q, t.name);
      if (is_adapter(t.name)) {  // nonzero B so the adapters count
        for (float& x : v) x = u(rng);
        test::write_vec(*q, t.name, v);
      }
      test::write_vec(*f, t.name, v);
    }
    test::feed_tiny_llama(*q);
    test::feed_tiny_llama(*f);
    test::run(*q, "infer");
    test::run(*f, "infer");
    auto logits = [](const Session& s) { return test::read_f32(s, s.model().tensors()[s.model().outputs()[0].second].name); };
    const std::vector<float> lq = logits(*q), lf = logits(*f);
    REQUIRE(lq.size() == 2 * 8 * 40);
    double worst = 0, norm = 0;
    for (size_t i = 0; i < lq.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(lq[i]) - lf[i]));
      norm = std::max(norm, std::fabs(static_cast<double>(lf[i])));
    }
    CHECK(norm > 1e-3);
    CHECK(worst <= 1e-5 * norm);
  }
}

TEST_CASE("QLoRA adapter gradients match finite differences") {
  auto m = llama("q4_1");
  auto s = test::open_session(m);
  test::feed_tiny_llama(*s);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  std::map<std::string, std::vector<float>> values, grads;
  for (const TensorInfo& t : m->tensors())
    if (t.role == Role::param && is_adapter(t.name)) {
      std::vector<float> v(numel(t.type.shape));
      for (float& x : v) x = u(rng);
      values[t.name] = v;
      test::write_vec(*s, t.name, v);
    }
  test::run(*s, "train_step");
  for (auto& [n, v] : values) {
    int gid = -1;
    for (const OpInfoLoaded& op : m->programs()[m->find_program("train_step")].ops)
      if (op.code == OpCode::AdamwUpdate && op.in[0] == m->find_tensor(n)) gid = op.in[1];
    REQUIRE_MESSAGE(gid >= 0, "no gradient for " << n);
    grads[n].resize(v.size());
    REQUIRE(s->read(gid, grads[n].data(), v.size() * sizeof(float)).ok());
  }
  for (auto& [n, v] : values) test::write_vec(*s, n, v);  // undo the step
  constexpr double kEps = 1e-2, kAtol = 1e-3, kRtol = 5e-3;
  double largest = 0;
  int checked = 0;
  for (auto& [n, g] : grads) {
    std::vector<float> x = values[n];
    for (size_t i = 0; i < x.size(); i += 7) {  // a spread of elements of every adapter
      const float x0 = x[i], xp = x0 + static_cast<float>(kEps), xm = x0 - static_cast<float>(kEps);
      x[i] = xp;
      test::write_vec(*s, n, x);
      const double lp = test::loss_of(*s);
      x[i] = xm;
      test::write_vec(*s, n, x);
      const double lm = test::loss_of(*s);
      x[i] = x0;
      test::write_vec(*s, n, x);
      const double fd = (lp - lm) / (static_cast<double>(xp) - xm);
      CHECK_MESSAGE(std::abs(g[i] - fd) <= kAtol + kRtol * std::abs(fd), n << "[" << i << "]: analytic " << g[i] << ", fd " << fd);
      largest = std::max(largest, std::abs(fd));
      ++checked;
    }
  }
  CHECK(checked > 100);
  CHECK(largest > 1e-2);
}

TEST_CASE("block params: bad declarations are refused at the script's line") {
  auto err = [](const std::string& body) {
    compiler::Graph g;
    return test::compile_graph("local sg = require 'sg'\nlocal x = sg.input('x', {4, 64})\n" + body, &g).message();
  };
  auto has = [](const std::string& msg, const std::string& what) {
    CAPTURE(msg);
    CHECK(msg.find(what) != std::string::npos);
  };
  has(err("local w = sg.param('w', {8, 64}, 'ones', {dtype = 'q4_1'})\n"), ":3:");
  has(err("local w = sg.param('w', {8, 64}, 'ones', {dtype = 'q4_1'})\n"), "cannot be trained: give requires_grad = false");
  has(err("local w = sg.param('w', {2, 8, 64}, 'ones', {dtype = 'q8_0', requires_grad = false})\n"), "must be rank 2");
  has(err("local w = sg.param('w', {8, 48}, 'ones', {dtype = 'q4_1', requires_grad = false})\n"), "multiple of 32");
  has(err("local w = sg.param('w', {8, 64}, 'ones', {dtype = 'q5_0', requires_grad = false})\n"), "dtype must be f32, q8_0 or q4_1");
  has(err("local w = sg.param('w', {64, 32}, 'ones', {dtype = 'q4_1', requires_grad = false})\n"
          "sg.output('y', sg.matmul(x, w))\n"), ":4: sg.matmul: w is stored as q4_1");
  has(err("sg.lora{rank = 0, base = 'q4'}\n"), "sg.lora: base: dtype must be f32, q8_0 or q4_1");
  has(err("sg.lora{rank = 0, base = {'q4_1', 'q8_0'}}\n"), ":3: sg.lora: base: give one default dtype");
  // The right form compiles to dequant_matmul.
  compiler::Graph g;
  Status st = test::compile_graph("local sg = require 'sg'\nlocal x = sg.input('x', {4, 64})\n"
                                  "local w = sg.param('w', {8, 64}, 'ones', {dtype = 'q4_1', requires_grad = false})\n"
                                  "local b = sg.param('b', {8}, 'zeros')\nsg.optimizer.sgd{lr = 0.1}\n"
                                  "sg.loss(sg.mean(sg.mean(sg.matmul(x, w, {trans_b = true}) + b)))\n", &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  bool dequant = false;
  for (const compiler::Op& op : g.forward) dequant |= op.code == OpCode::DequantMatMul;
  CHECK(dequant);
}

TEST_CASE("SmolLM2 GGUF into a q4_1 base: Q4_1 tensors bind bit for bit, the Q8_0 embedding is re-encoded") {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) { MESSAGE(test::kNoSmollm2); return; }
  std::map<std::string, std::string> set = {{"lora_base", "q4_1"}, {"block", "8"}};
  auto m = test::compile_model_file("models/llama.lua", set, /*infer_only=*/true);
  auto s = test::open_session(m);
  Status st = import_gguf(*s, path);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<GgufFile> f;
  REQUIRE(GgufFile::open(path, &f).ok());
  for (const char* name : {"blk.0.attn_q.weight", "blk.29.ffn_down.weight", "token_embd.weight"}) {
    CAPTURE(name);
    const GgufTensor* t = f->find_tensor(name);
    REQUIRE(t);
    const int id = test::tensor_id(*s, name);
    const TensorInfo& p = m->tensors()[id];
    REQUIRE(p.type.dtype == DType::q4_1);
    std::vector<uint8_t> got(p.bytes), want(p.bytes);
    REQUIRE(s->read(id, got.data(), got.size()).ok());
    if (t->type == GgufType::Q4_1) {
      std::memcpy(want.data(), f->data(*t).data(), want.size());
    } else {  // Q8_0 in the file: its values through ggml's q4_1 quantizer
      CHECK(t->type == GgufType::Q8_0);
      std::vector<float> v(t->numel());
      REQUIRE(f->dequantize(*t, v).ok());
      fmt::gguf_encode_blocks(false, v.data(), t->numel(), want.data());
    }
    CHECK(got == want);
  }
}

TEST_CASE("safetensors: a block param exports its decoded values; importing f32 values quantizes them") {
  auto m = llama("q4_1");
  auto s = test::open_session(m);
  test::TempFile out(".safetensors");
  Status st = export_safetensors(*s, out.path, DType::f32);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<SafeTensor> ts;
  REQUIRE(read_safetensors(out.path, &ts).ok());
  const int id = test::tensor_id(*s, "blk.1.ffn_up.weight");
  const TensorInfo& p = m->tensors()[id];
  std::vector<uint8_t> raw(p.bytes);
  REQUIRE(s->read(id, raw.data(), raw.size()).ok());
  // Element i of q4_1: nibble * d + m, read from the raw block by hand.
  auto value = [&](size_t i) {
    const uint8_t* b = raw.data() + i / 32 * 20;
    const int j = static_cast<int>(i % 32), nib = j < 16 ? b[4 + j] & 0xF : b[4 + j - 16] >> 4;
    return static_cast<float>(nib * static_cast<double>(fmt::f16_decode(b[0] | b[1] << 8)) +
                              fmt::f16_decode(b[2] | b[3] << 8));
  };
  bool found = false;
  for (SafeTensor& t : ts) {
    if (t.name != p.name) continue;
    found = true;
    REQUIRE(t.values.size() == static_cast<size_t>(numel(p.type.shape)));
    int mismatches = 0;
    for (size_t i = 0; i < t.values.size(); ++i) mismatches += t.values[i] != value(i);
    CHECK(mismatches == 0);
    // Writing f32 values back stores ggml's encoding of them.
    for (float& v : t.values) v *= 2.0f;
    std::vector<uint8_t> want(p.bytes);
    fmt::gguf_encode_blocks(false, t.values.data(), static_cast<int64_t>(t.values.size()), want.data());
    test::TempFile in(".safetensors");
    REQUIRE(write_safetensors(in.path, {t}).ok());
    st = import_safetensors(*s, in.path);
    CHECK_MESSAGE(!st.ok(), "a file holding one frozen param of many must be refused");  // frozen params are required
    ParamBytes pb;
    REQUIRE(encode_param(*s, id, t.values, &pb).ok());
    CHECK(pb.bytes == want);
  }
  CHECK(found);
}
