// Decoding with a KV cache (rope_at, kv_attention, sg.cache, sg.program): a
// token at a time, or a chunk at a time, from position 0 gives what causal
// attention over the whole sequence gives (the attention and rope ops, another
// kernel path), for grouped-query heads; rope_at against its closed form; the
// declared programs hold only their own ops; bad positions and names refused;
// sgrt::generate on models/llama.lua gives the same tokens with a prefill in
// chunks, over the whole block, and without a cache (infer per token).
#include <cmath>
#include <random>

#include "harness.h"
#include "sgrt/generate.h"

using namespace sgrt;

namespace {

// q [2, 6, 8] (4 heads of 4), k and v [2, 6, 4] (2 kv heads). infer: causal
// attention over all 6 positions; decode_step: 1 token at pos; chunk: 3 tokens at pos.
constexpr const char* kModel = R"(
  local sg = require "sg"
  local H, Hkv, B, T = 4, 2, 2, 6
  local q, k, v = sg.param("q", {B, T, 8}), sg.param("k", {B, T, 4}), sg.param("v", {B, T, 4})
  local y = sg.attention(sg.rope(q, H, 100, true), sg.rope(k, Hkv, 100, true), v, H, Hkv)
  sg.output("y", y)
  sg.loss(sg.sum(sg.reshape(y, {96})))
  sg.optimizer.sgd{ lr = 1e-30 }
  local pos = sg.input("pos", {}, "i32")
  local kc, vc = sg.cache("k_cache", {B, T, 4}), sg.cache("v_cache", {B, T, 4})
  local function step(name, n)
    local qs, ks, vs = sg.input(name .. "_q", {B, n, 8}), sg.input(name .. "_k", {B, n, 4}), sg.input(name .. "_v", {B, n, 4})
    sg.program(name, { y = sg.kv_attention(sg.rope_at(qs, pos, H, 100, true), sg.rope_at(ks, pos, Hkv, 100, true), vs,
                                           kc, vc, pos, H, Hkv) })
  end
  step("decode_step", 1)
  step("chunk", 3)
)";

constexpr int64_t kB = 2, kT = 6;

std::vector<float> uniform(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Rows t0..t0+n-1 of x [B, T, C] as [B, n, C].
std::vector<float> rows(const std::vector<float>& x, int64_t c, int64_t t0, int64_t n) {
  std::vector<float> r;
  for (int64_t b = 0; b < kB; ++b) r.insert(r.end(), x.begin() + (b * kT + t0) * c, x.begin() + (b * kT + t0 + n) * c);
  return r;
}

struct Fixture {
  std::shared_ptr<const Model> m;
  std::unique_ptr<Session> s;
  std::vector<float> q, k, v, full;  // full: infer's y [B, T, 8]

  Fixture() {
    Status st = test::compile_lua(kModel, &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    s = test::open_session(m);
    std::mt19937 rng(11);
    q = uniform(kB * kT * 8, rng), k = uniform(kB * kT * 4, rng), v = uniform(kB * kT * 4, rng);
    test::write_vec(*s, "q", q);
    test::write_vec(*s, "k", k);
    test::write_vec(*s, "v", v);
    test::run(*s, "infer");
    full = test::read_output(*s, "y");
  }

  // Runs `program` (n tokens) on rows t0.. and checks its y against infer's rows.
  void step_matches(const std::string& program, int64_t t0, int64_t n) {
    test::write_vec(*s, "pos", std::vector<int32_t>{static_cast<int32_t>(t0)});
    test::write_vec(*s, program + "_q", rows(q, 8, t0, n));
    test::write_vec(*s, program + "_k", rows(k, 4, t0, n));
    test::write_vec(*s, program + "_v", rows(v, 4, t0, n));
    test::run(*s, program);
    std::vector<float> got = test::read_output(*s, program + ".y"), want = rows(full, 8, t0, n);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i)
      CHECK_MESSAGE(got[i] == doctest::Approx(want[i]).epsilon(1e-5), program << " at " << t0 << ", element " << i);
  }
};

}  // namespace

TEST_CASE("decoding a token at a time with the KV cache equals causal attention over the sequence (GQA)") {
  Fixture f;
  for (int64_t t = 0; t < kT; ++t) f.step_matches("decode_step", t, 1);
}

TEST_CASE("chunks of tokens at a position equal causal attention too, and mix with single steps") {
  Fixture f;
  f.step_matches("chunk", 0, 3);        // a prefill
  f.step_matches("decode_step", 3, 1);  // reads the chunk's cache rows
  f.step_matches("decode_step", 4, 1);
  f.step_matches("chunk", 3, 3);        // rewrites rows 3..5 at pos 3
}

TEST_CASE("each declared program runs only its own ops; infer has none of them") {
  Fixture f;
  auto count = [&](const std::string& program, OpCode code) {
    int n = 0;
    for (const OpInfoLoaded& op : f.m->programs()[f.m->find_program(program)].ops) n += op.code == code;
    return n;
  };
  CHECK(count("decode_step", OpCode::KvAttention) == 1);
  CHECK(count("decode_step", OpCode::Attention) == 0);
  CHECK(count("chunk", OpCode::KvAttention) == 1);
  CHECK(count("infer", OpCode::KvAttention) == 0);
  CHECK(count("infer", OpCode::RopeAt) == 0);
  CHECK(count("train_step", OpCode::KvAttention) == 0);
  const TensorInfo& cache = f.m->tensors()[f.m->find_tensor("k_cache")];
  CHECK(cache.role == Role::cache);
  CHECK(cache.persistent);
}

TEST_CASE("rope_at turns row t by (pos + t) * base^(-2i/Dh)") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.param("x", {1, 2, 4})
    sg.loss(sg.sum(sg.reshape(x, {8})))
    sg.optimizer.sgd{ lr = 1e-30 }
    sg.program("turn", { y = sg.rope_at(x, sg.input("pos", {}, "i32"), 1, 100, true) })
  )", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 2, -3};
  test::write_vec(*s, "x", x);
  test::write_vec(*s, "pos", std::vector<int32_t>{5});
  test::run(*s, "turn");
  std::vector<float> y = test::read_output(*s, "turn.y");
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < 2; ++i) {
      double ang = (5 + t) * std::pow(100.0, -2.0 * i / 4), x1 = x[t * 4 + 2 * i], x2 = x[t * 4 + 2 * i + 1];
      CHECK(y[t * 4 + 2 * i] == doctest::Approx(x1 * std::cos(ang) - x2 * std::sin(ang)));
      CHECK(y[t * 4 + 2 * i + 1] == doctest::Approx(x1 * std::sin(ang) + x2 * std::cos(ang)));
    }
}

TEST_CASE("a position past the cache, a negative one, and bad declarations are refused by name") {
  Fixture f;
  int chunk = f.m->find_program("chunk");
  // 4 + 3 tokens > 6 rows; a negative position stops at the first rope_at.
  for (auto [pos, expect] : {std::pair<int32_t, std::string>{4, "kv_attention: positions 4..6 do not fit the cache of 6 rows"},
                             {-1, "rope_at: pos -1 is negative"}}) {
    test::write_vec(*f.s, "pos", std::vector<int32_t>{pos});
    Status st = f.s->run(chunk);
    CHECK_FALSE(st.ok());
    CHECK_MESSAGE(st.message().find(expect) != std::string::npos, st.message());
  }
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua("local sg = require 'sg'\nsg.program('infer', { y = sg.input('x', {1}) })\n", &m);
  CHECK_MESSAGE(st.message().find("'infer' is a built-in program") != std::string::npos, st.message());
  st = test::compile_lua(R"(
    local sg = require "sg"
    local c = sg.cache("c", {1, 2, 4})
    sg.program("p", { y = sg.kv_attention(sg.input("q", {1, 3, 4}), sg.input("k", {1, 3, 4}), sg.input("v", {1, 3, 4}),
                                          c, c, sg.input("pos", {}, "i32"), 1) })
  )", &m);
  CHECK_MESSAGE(st.message().find("kv_attention: k_cache f32[1, 2, 4] must be [batch, >= time, width]") != std::string::npos,
                st.message());
}

TEST_CASE("generate: a prefill in chunks gives the tokens of the whole-block prefill and of infer without a cache") {
  // One tiny llama with random weights, compiled three ways; the params match by name.
  auto compile = [](const std::map<std::string, std::string>& extra) {
    std::map<std::string, std::string> set = {{"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "4"}, {"n_kv_head", "2"},
                                              {"ffn", "64"},    {"vocab", "50"},   {"block", "16"}, {"context", "16"}};
    for (auto& [k, v] : extra) set[k] = v;
    auto s = test::open_session(test::compile_model_file("models/llama.lua", set));
    for (const TensorInfo& t : s->model().tensors()) {
      if (t.role != Role::param) continue;
      std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(t.name)));
      std::normal_distribution<float> n(0.0f, 0.5f);
      std::vector<float> v(static_cast<size_t>(numel(t.type.shape)));
      for (float& x : v) x = n(rng);
      test::write_vec(*s, t.name, v);
    }
    return s;
  };
  auto chunked = compile({{"kv_cache", "true"}, {"prefill_chunk", "4"}});
  auto whole = compile({{"kv_cache", "true"}});
  auto uncached = compile({});
  CHECK(chunked->model().tensors()[chunked->model().find_tensor("prompt")].type.shape == Shape{1, 4});
  auto tokens = [](Session& s, const std::vector<int32_t>& prompt) {
    std::vector<int32_t> out;
    GenerateStats stats;
    Status st = generate(s, prompt, 16 - static_cast<int64_t>(prompt.size()), -1, SamplingOptions{}, [&](int32_t id) {
      out.push_back(id);
      return Status::Ok();
    }, &stats);
    REQUIRE_MESSAGE(st.ok(), st.message());
    return out;
  };
  for (size_t n : {1, 3, 4, 5, 8, 9, 15}) {  // inside, at and past chunk boundaries
    CAPTURE(n);
    std::vector<int32_t> prompt(n);
    for (size_t i = 0; i < n; ++i) prompt[i] = static_cast<int32_t>((7 * i + 3) % 50);
    const std::vector<int32_t> want = tokens(*uncached, prompt);
    REQUIRE(want.size() == 16 - n);
    CHECK(tokens(*whole, prompt) == want);
    CHECK(tokens(*chunked, prompt) == want);
  }
}
