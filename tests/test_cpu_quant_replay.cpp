// The CPU backend's replayed quantizations (runtime/src/cpu_quant_replay.h):
//  * which quantize ops qualify: those of the frozen base, never a trained
//    parameter's (the optimizer writes it) or an activation's, never one with
//    an amax history or stochastic rounding;
//  * a LoRA fine-tune of the tiny llama under fp8, mxfp8 and nvfp4, with a
//    frozen weight rewritten by the host halfway (the replayed codes must be
//    dropped): every persistent byte after the steps (adapters, optimizer and
//    quantizer state, losses) equals the run with replaying off;
//  * a host write over the input forgets an entry, one beside it does not;
//  * Entry by hand: the first run computes, the next replays the same bytes
//    and counters, a kept scale (an all-zero input) is never replayed, and an
//    odd count of E2M1 codes keeps the last byte's unwritten nibble.
#include <cstring>

#include "cpu/quantize.h"
#include "cpu_quant_replay.h"
#include "harness.h"
#include "scoped_env.h"
#include "sgrt/quant.h"
#include "tiny_lora_llama.h"

using namespace sgrt;

namespace {

std::shared_ptr<const Model> lora(const std::string& recipe) {
  std::map<std::string, std::string> set = test::kTinyLora;
  set["lora_rank"] = std::to_string(test::kLoraRank);
  return test::compile_model_file("models/llama.lua", set, false, recipe);
}

std::vector<bool> written_by_ops(const Model& m) {
  std::vector<bool> w(m.tensors().size(), false);
  for (const ProgramInfo& p : m.programs())
    for (const OpInfoLoaded& op : p.ops)
      for (int id : op.out) w[id] = true;
  return w;
}

// 3 steps, the frozen blk.0.attn_q.weight doubled by the host, an eval, 2 steps.
std::map<std::string, std::vector<uint8_t>> fine_tune(std::shared_ptr<const Model> m) {
  auto s = test::open_session(std::move(m));
  test::randomize_adapters(*s);
  test::feed_tiny_llama(*s);
  for (int i = 0; i < 3; ++i) test::run(*s, "train_step");
  std::vector<float> w = test::read_f32(*s, "blk.0.attn_q.weight");
  for (float& x : w) x *= 2;
  test::write_vec(*s, "blk.0.attn_q.weight", w);
  test::run(*s, "eval");
  for (int i = 0; i < 2; ++i) test::run(*s, "train_step");
  return test::persistent_state(*s);
}

}  // namespace

TEST_CASE("the frozen base's quantize ops are replayed, a trained parameter's never") {
  auto m = lora("fp8");
  const std::vector<bool> written = written_by_ops(*m);
  QuantReplay r;
  int frozen = 0;
  for (const ProgramInfo& p : m->programs())
    for (const OpInfoLoaded& op : p.ops) {
      if (op.code != OpCode::Quantize) continue;
      const TensorInfo& in = m->tensors()[op.in[0]];
      CAPTURE(p.name);
      CAPTURE(in.name);
      const bool replayed = r.entry_for(*m, op, written) != nullptr;
      if (in.role == Role::param && !in.frozen) CHECK_FALSE(replayed);
      if (in.role == Role::param && in.frozen) {
        CHECK(replayed);
        frozen += p.name == "train_step";
      }
      if (in.role != Role::param) CHECK_FALSE(replayed);
    }
  CHECK(frozen >= 14);  // the 7 projections of each of the 2 blocks
  // A host write over a weight forgets its entry, one elsewhere does not.
  const int w = m->find_tensor("blk.1.ffn_up.weight");
  const TensorInfo& wt = m->tensors()[w];
  for (const OpInfoLoaded& op : m->programs()[m->find_program("eval")].ops) {
    if (op.code != OpCode::Quantize || op.in[0] != w) continue;
    QuantReplay::Entry* e = r.entry_for(*m, op, written);
    REQUIRE(e);
    CHECK(e == r.entry_for(*m, op, written));  // one entry per input and spec
    e->valid = true;
    r.invalidate(wt.offset + wt.bytes, 64);
    CHECK(e->valid);
    r.invalidate(wt.offset + wt.bytes - 4, 64);
    CHECK_FALSE(e->valid);
  }
  // The same frozen weight's quantize with an amax history, or stochastic rounding: never.
  for (const OpInfoLoaded& op : m->programs()[m->find_program("eval")].ops) {
    if (op.code != OpCode::Quantize || !m->tensors()[op.in[0]].frozen) continue;
    OpInfoLoaded delayed = op, stochastic = op;
    delayed.quant[0].history = 16;
    stochastic.quant[0].stochastic = true;
    CHECK(r.entry_for(*m, delayed, written) == nullptr);
    CHECK(r.entry_for(*m, stochastic, written) == nullptr);
  }
}

TEST_CASE("a LoRA fine-tune with replayed quantizations is bit-identical to one without") {
  for (const char* recipe : {"fp8", "mxfp8", "nvfp4"}) {
    CAPTURE(recipe);
    auto m = lora(recipe);
    std::map<std::string, std::vector<uint8_t>> off;
    {
      test::ScopedEnv env("SGRT_CPU_QUANT_REPLAY", "0");
      off = fine_tune(m);
    }
    const std::map<std::string, std::vector<uint8_t>> on = fine_tune(m);
    REQUIRE(on.size() == off.size());
    CHECK(on == off);
  }
}

TEST_CASE("an entry: computed once, replayed with its counters, forgotten on a write, never for a kept scale") {
  // A 3 x 5 E2M1 quantization per tensor (odd: 15 codes, the last byte half used).
  ScaleSpec spec;
  spec.mode = ScaleMode::current_amax;
  spec.dtype = DType::e2m1;
  const TensorType xt{{3, 5}, DType::f32}, qt{{3, 5}, DType::e2m1}, st{{1}, DType::i32}, state_t{{kStateHeader}, DType::f32};
  std::vector<float> x{0.5f, -1.f, 2.f, 3.f, -6.f, 0.25f, 1.5f, -0.75f, 4.f, 1.f, -2.f, 0.f, 5.f, -3.f, 0.1f};
  std::vector<uint8_t> q(8, 0xAB);
  int32_t exp = 0;
  std::vector<float> state(kStateHeader, 0.f);
  Attrs attrs;
  cpu::OpArgs a{OpCode::Quantize, &attrs, {}, {}, &spec};
  a.in.push_back({x.data(), &xt, 15});
  a.out = {{q.data(), &qt, 15}, {&exp, &st, 1}, {state.data(), &state_t, kStateHeader}};
  QuantReplay::Entry e;
  e.input_end = 60;
  REQUIRE(QuantReplay::run(e, a).ok());
  REQUIRE(e.valid);
  const std::vector<uint8_t> first = q;
  const int32_t first_exp = exp;
  const float saturated = state[kStateSaturated], underflow = state[kStateUnderflow];
  CHECK((q[7] & 0xF0) == 0xA0);  // the unwritten high nibble
  std::fill(q.begin(), q.end(), 0x5C);
  exp = 99;
  REQUIRE(QuantReplay::run(e, a).ok());  // replayed
  CHECK(std::vector<uint8_t>(q.begin(), q.begin() + 7) == std::vector<uint8_t>(first.begin(), first.begin() + 7));
  CHECK((q[7] & 0x0F) == (first[7] & 0x0F));
  CHECK((q[7] & 0xF0) == 0x50);  // still the buffer's own
  CHECK(exp == first_exp);
  CHECK(state[kStateSaturated] == 2 * saturated);
  CHECK(state[kStateUnderflow] == 2 * underflow);
  // Replayed, not recomputed: an input changed behind the entry's back keeps them;
  // once forgotten (QuantReplay::invalidate), the new amax rescales.
  x[2] = 100.f;
  REQUIRE(QuantReplay::run(e, a).ok());
  CHECK(exp == first_exp);
  e.valid = false;
  REQUIRE(QuantReplay::run(e, a).ok());
  CHECK(exp != first_exp);
  // All zeros: the scale is the previous one (kept), so nothing is replayed.
  std::fill(x.begin(), x.end(), 0.f);
  e.valid = false;
  REQUIRE(QuantReplay::run(e, a).ok());
  CHECK(e.stats.kept_scales > 0);
  CHECK_FALSE(e.valid);
}
