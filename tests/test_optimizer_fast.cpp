// The vectorized optimizer updates (cpu/optimizer_update.cpp) against the update
// written element by element here from formats/formats.h's encode and decode, bit
// for bit: AdamW and SGD at every state level (fp32, O1, O2, O3), over several
// parallel chunks with a ragged tail, on every ISA path and on 1 and 2 threads.
// The reference follows the kernel's documented algorithm (optimizer_update.cpp):
// new values from decode(code) / scale in PyTorch's order, the new scales from
// their amaxes, then encode(value * scale).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/op_args.h"
#include "cpu/optimizer_step.h"
#include "cpu/parallel.h"
#include "cpu/quantize.h"
#include "formats/formats.h"
#include "sgrt/quant.h"
#include "kernel_checks.h"

using namespace sgrt;

namespace {

constexpr int64_t kN = 2 * (1 << 14) + 301;
constexpr float kLr = 1e-3f, kB1 = 0.9f, kB2 = 0.999f, kEps = 1e-8f, kWd = 0.1f, kMu = 0.875f, kCoef = 0.75f;

// A tensor stored as f32 or as codes of a narrower format.
struct Stored {
  DType t;
  std::vector<uint8_t> bytes;
  TensorType type;
  Stored(DType d, int64_t n) : t(d), bytes(n * dtype_bits(d) / 8), type{{n}, d} {}
  const fmt::Spec& spec() const { return t == DType::f16 ? fmt::kF16 : t == DType::e4m3 ? fmt::kE4M3 : fmt::kE5M2; }
  float get(int64_t i, float inv) const {
    if (t == DType::f32) return std::bit_cast<float>(code(i));
    return fmt::decode(spec(), code(i)) * inv;
  }
  void set(int64_t i, float x, float scale) {
    const uint32_t c = t == DType::f32 ? std::bit_cast<uint32_t>(x) : fmt::encode(spec(), x * scale);
    std::memcpy(bytes.data() + i * dtype_bits(t) / 8, &c, dtype_bits(t) / 8);
  }
  uint32_t code(int64_t i) const {
    uint32_t c = 0;
    std::memcpy(&c, bytes.data() + i * dtype_bits(t) / 8, dtype_bits(t) / 8);
    return c;
  }
  cpu::TensorArg arg() { return {bytes.data(), &type, static_cast<int64_t>(bytes.size() * 8 / dtype_bits(t))}; }
};

struct Level {
  const char* name;
  DType w, s1, s2, g;
  bool scale_w;
};
const Level kLevels[] = {{"fp32", DType::f32, DType::f32, DType::f32, DType::f32, false},
                         {"O1", DType::f16, DType::f32, DType::f32, DType::e5m2, false},
                         {"O2", DType::f16, DType::e4m3, DType::f16, DType::e5m2, false},
                         {"O3", DType::f16, DType::e4m3, DType::f16, DType::e5m2, true}};

struct State {
  Stored w, s1, s2, g;
  std::vector<float> scales = std::vector<float>(kOptScaleLen, 1.f);
  explicit State(const Level& l) : w(l.w, kN), s1(l.s1, kN), s2(l.s2, kN), g(l.g, kN) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0, 1);
    if (l.s1 != DType::f32) scales[kOptScaleM] = 16.f;
    if (l.s2 != DType::f32) scales[kOptScaleV] = 1024.f;
    if (l.scale_w) scales[kOptScaleW] = 8.f;
    if (l.g != DType::f32) scales[kOptScaleG] = 256.f;
    for (int64_t i = 0; i < kN; ++i) {
      w.set(i, 0.1f * nd(rng), scales[kOptScaleW]);
      s1.set(i, 0.01f * nd(rng), scales[kOptScaleM]);
      s2.set(i, 1e-4f * std::fabs(nd(rng)), scales[kOptScaleV]);
      g.set(i, 0.01f * nd(rng) * (i % 97 == 0 ? 100.f : 1.f), scales[kOptScaleG]);
    }
  }
};

float next_scale(DType d, float scale, float amax) {
  if (d == DType::f32) return 1.f;
  bool kept;
  return fmt::exp2i(cpu::scale_exponent(amax, format_max(d), 0, std::ilogb(scale), &kept));
}

// The element-by-element update; `step` maps (w, s1, s2, g) to new (w, s1, s2).
template <class Step>
void reference(State& s, const Level& l, bool two_states, Step step) {
  float* sc = s.scales.data();
  const float inv[4] = {1.f / sc[kOptScaleW], 1.f / sc[kOptScaleM], 1.f / sc[kOptScaleV], 1.f / sc[kOptScaleG]};
  std::vector<float> nw(kN), n1(kN), n2(kN);
  float m[3] = {0, 0, 0};
  for (int64_t i = 0; i < kN; ++i) {
    float w = s.w.get(i, inv[0]), a = s.s1.get(i, inv[1]), b = two_states ? s.s2.get(i, inv[2]) : 0.f;
    step(w, a, b, s.g.get(i, inv[3]));
    nw[i] = w, n1[i] = a, n2[i] = b;
    m[0] = std::max(m[0], std::fabs(w)), m[1] = std::max(m[1], std::fabs(a)), m[2] = std::max(m[2], std::fabs(b));
  }
  if (l.scale_w) sc[kOptScaleW] = next_scale(l.w, sc[kOptScaleW], m[0]);
  sc[kOptScaleM] = next_scale(l.s1, sc[kOptScaleM], m[1]);
  if (two_states) sc[kOptScaleV] = next_scale(l.s2, sc[kOptScaleV], m[2]);
  for (int64_t i = 0; i < kN; ++i) {
    s.w.set(i, nw[i], sc[kOptScaleW]);
    s.s1.set(i, n1[i], sc[kOptScaleM]);
    if (two_states) s.s2.set(i, n2[i], sc[kOptScaleV]);
  }
}

void check_same(const State& got, const State& want) {
  CHECK(got.w.bytes == want.w.bytes);
  CHECK(got.s1.bytes == want.s1.bytes);
  CHECK(got.s2.bytes == want.s2.bytes);
  CHECK(got.scales == want.scales);
}

// Runs `body` on every ISA path with `threads` threads.
template <class F>
void every_path(int threads, F&& body) {
  cpu::set_num_threads(threads);
  for (cpu::Isa isa : test::isa_paths()) {
    cpu::set_isa_limit(isa);
    CAPTURE(std::string(cpu::isa_name(isa)));
    CAPTURE(threads);
    body();
  }
  cpu::set_isa_limit(cpu::kTopIsa);
  cpu::set_num_threads(1);
}

// AdamW at level l against the element-by-element update.
void check_adamw(const Level& l) {
  CAPTURE(l.name);
  State run(l), want(l);
  const int32_t t = 4;  // the step counter before this update
  std::vector<int32_t> ts(kTrainStateLen, 0);
  ts[kStep] = t;
  float lr = kLr, coef = kCoef;
  TensorType one{{1}, DType::f32}, tst{{kTrainStateLen}, DType::i32}, sct{{kOptScaleLen}, DType::f32};
  Attrs at;
  at.set_f("beta1", kB1).set_f("beta2", kB2).set_f("eps", kEps).set_f("weight_decay", kWd).set_i("scale_w", l.scale_w);
  cpu::OpArgs a{OpCode::AdamwUpdate, &at,
                {run.w.arg(), run.g.arg(), run.s1.arg(), run.s2.arg(), {&lr, &one, 1}, {ts.data(), &tst, kTrainStateLen},
                 {run.scales.data(), &sct, kOptScaleLen}, {&coef, &one, 1}},
                {}};
  REQUIRE(cpu::k_optimizer(a).ok());
  const float b1 = static_cast<float>(double{kB1}), b2 = static_cast<float>(double{kB2});
  const float bc1 = 1.f - std::pow(b1, static_cast<float>(t + 1)), bc2 = 1.f - std::pow(b2, static_cast<float>(t + 1));
  const float step = lr / bc1, bc2_sqrt = std::sqrt(bc2), decay = 1.f - lr * static_cast<float>(double{kWd});
  const float eps = static_cast<float>(double{kEps});
  reference(want, l, true, [&](float& w, float& m, float& v, float g) {
    const float gi = g * coef;
    w *= decay;
    m = b1 * m + (1.f - b1) * gi;
    v = b2 * v + (1.f - b2) * gi * gi;
    w -= step * m / (std::sqrt(v) / bc2_sqrt + eps);
  });
  check_same(run, want);
}

// SGD at level l likewise.
void check_sgd(const Level& l) {
  CAPTURE(l.name);
  State run(l), want(l);
  std::vector<int32_t> ts(kTrainStateLen, 0);
  float lr = kLr, coef = kCoef;
  TensorType one{{1}, DType::f32}, tst{{kTrainStateLen}, DType::i32}, sct{{kOptScaleLen}, DType::f32};
  Attrs at;
  at.set_f("momentum", kMu).set_f("weight_decay", kWd).set_i("scale_w", l.scale_w);
  cpu::OpArgs a{OpCode::SgdUpdate, &at,
                {run.w.arg(), run.g.arg(), run.s1.arg(), {&lr, &one, 1}, {ts.data(), &tst, kTrainStateLen},
                 {run.scales.data(), &sct, kOptScaleLen}, {&coef, &one, 1}},
                {}};
  REQUIRE(cpu::k_optimizer(a).ok());
  const float mu = static_cast<float>(double{kMu}), wd = static_cast<float>(double{kWd});
  reference(want, l, false, [&](float& w, float& m, float&, float g) {
    const float gi = g * coef + wd * w;
    m = mu * m + gi;
    w -= lr * m;
  });
  check_same(run, want);
}

}  // namespace

TEST_CASE("AdamW's vectorized update is the element-by-element one at every state level") {
  for (const Level& l : kLevels) every_path(1, [&] { check_adamw(l); });
}

TEST_CASE("SGD's vectorized update is the element-by-element one at every state level") {
  for (const Level& l : kLevels) every_path(1, [&] { check_sgd(l); });
}

// Each thread takes whole chunks; the amaxes of all chunks decide the scales.
TEST_CASE("The vectorized updates on 2 threads (thread count) are the element-by-element ones") {
  for (const Level& l : kLevels)
    every_path(2, [&] {
      check_adamw(l);
      check_sgd(l);
    });
}

// check_finite's squared norm: each g^2 exact in double, term i added to
// partial i % 16 in turn, then the partials in the tree p[j] += p[j + 8], + 4,
// + 2, + 1 (row_reduce.h), written here independently; magnitudes over many
// decades so that any other order shows.
TEST_CASE("The gradient's sum of squares is the 16-lane order in double, bit for bit, on every ISA path") {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t n : {0, 1, 15, 16, 17, 1000, 16411}) {
    CAPTURE(n);
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = u(rng) * std::ldexp(1.f, static_cast<int>(rng() % 40) - 20);
    double p[16] = {};
    for (int64_t i = 0; i < n; ++i) p[i % 16] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    for (int w : {8, 4, 2, 1})
      for (int j = 0; j < w; ++j) p[j] += p[j + w];
    every_path(1, [&] { CHECK(std::bit_cast<uint64_t>(cpu::grad_sum_squares(g.data(), n)) == std::bit_cast<uint64_t>(p[0])); });
  }
}
