// The CPU's elementwise ops (cpu/elementwise_kernels.h) compiled per ISA: every op
// of the elementwise family gives the baseline build's bits on every ISA path this
// CPU has (forced through set_isa_limit), special values included (FP4's dge_grad
// too), and GELU and its gradient follow GPT-2's tanh formula evaluated in FP64.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/op_args.h"
#include "sgrt/ops.h"

using namespace sgrt;

namespace {

// Inputs: random values over several magnitudes, then the cases a vector path
// could treat differently from a scalar one (signed zeros, infinities, NaN,
// subnormals, the exp clamps' edges), placed where a vector's tail falls too.
std::vector<float> inputs(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-12, 7);
  std::vector<float> x(n);
  for (float& v : x) v = std::ldexp(u(rng), e(rng));
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1e-40f, -1e-40f, 88.5f, -88.5f, 44.0f, -44.0f, 1.0f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) x[(i * 97) % n] = specials[i];
  x[n - 1] = -std::numeric_limits<float>::infinity();
  return x;
}

std::vector<uint32_t> run(OpCode code, const std::vector<float>& x, const std::vector<float>& z) {
  std::vector<float> y(x.size(), 0.0f);
  cpu::OpArgs a;
  a.code = code;
  Attrs attrs;
  attrs.set_f("alpha", -0.3);
  a.attrs = &attrs;
  const int64_t n = static_cast<int64_t>(x.size());
  a.in.push_back({const_cast<float*>(x.data()), nullptr, n});
  if (op_info(code).shape != OpShape::unary) a.in.push_back({const_cast<float*>(z.data()), nullptr, n});
  a.out.push_back({y.data(), nullptr, n});
  const Status st = cpu::k_elementwise(a);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<uint32_t> bits(y.size());
  std::memcpy(bits.data(), y.data(), 4 * y.size());
  return bits;
}

}  // namespace

TEST_CASE("every elementwise op gives the baseline's bits on every ISA path") {
  const int64_t n = 3 * 16384 + 13;  // several parallel chunks and a ragged vector tail
  const std::vector<float> x = inputs(1, n), z = inputs(2, n);
  int ops = 0;
  for (int c = 0; c < kNumOps; ++c) {
    const OpInfo& op = kOpInfo[c];
    if (op.shape == OpShape::own || !(op.backends & kBackendCpu)) continue;
    ++ops;
    const OpCode code = static_cast<OpCode>(c);
    cpu::set_isa_limit(cpu::Isa::generic);
    const std::vector<uint32_t> want = run(code, x, z);
    for (cpu::Isa isa : cpu::kIsas) {
      if (isa == cpu::Isa::generic || isa > cpu::detected_isa()) continue;
      cpu::set_isa_limit(isa);
      const std::vector<uint32_t> got = run(code, x, z);
      int64_t differ = 0, first = -1;
      for (int64_t i = 0; i < n; ++i)
        if (got[i] != want[i] && !(std::isnan(x[i]) || std::isnan(z[i]))) {  // NaN payloads may differ
          if (first < 0) first = i;
          ++differ;
        }
      const std::string where = std::string(op.name) + " on " + cpu::isa_name(isa);
      INFO(where << ": first difference at x = " << (first < 0 ? 0.0f : x[first]));
      CHECK(differ == 0);
    }
  }
  cpu::set_isa_limit(cpu::kTopIsa);
  CHECK(ops >= 19);  // add .. silu_grad: the family did not shrink unnoticed
}

TEST_CASE("dge_grad gives the baseline's bits on every ISA path") {
  // FP4's gradient estimator runs in the family's loops; its weights span every
  // grid interval, the specials and both ends of the scale exponent range.
  const int64_t rows = 37, cols = 131, n = rows * cols;
  const std::vector<float> dw = inputs(3, n), w = inputs(4, n);
  std::vector<int32_t> e(cols);
  for (int64_t c = 0; c < cols; ++c) e[c] = static_cast<int32_t>(c % 2 ? 4 - c % 9 : (c % 4 ? 127 : -126));
  TensorType t{{rows, cols}, DType::f32}, te{{cols}, DType::i32};
  auto dge = [&] {
    std::vector<float> y(n);
    Attrs none;
    cpu::OpArgs a{OpCode::DgeGrad, &none, {{const_cast<float*>(dw.data()), &t, n}, {const_cast<float*>(w.data()), &t, n}, {e.data(), &te, cols}},
                  {{y.data(), &t, n}}};
    REQUIRE(cpu::k_dge_grad(a).ok());
    return y;
  };
  cpu::set_isa_limit(cpu::Isa::generic);
  const std::vector<float> want = dge();
  for (cpu::Isa isa : cpu::kIsas) {
    if (isa == cpu::Isa::generic || isa > cpu::detected_isa()) continue;
    cpu::set_isa_limit(isa);
    const std::vector<float> got = dge();
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0 && !std::isnan(want[i]);
    const std::string where = std::string("dge_grad on ") + cpu::isa_name(isa);
    INFO(where);
    CHECK(differ == 0);
  }
  cpu::set_isa_limit(cpu::kTopIsa);
}

TEST_CASE("GELU and its gradient follow the tanh formula in FP64 on the widest path") {
  cpu::set_isa_limit(cpu::kTopIsa);
  const int64_t n = 4001;
  std::vector<float> x(n), dy(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / (n - 1);
  std::vector<uint32_t> yb = run(OpCode::Gelu, x, dy), gb = run(OpCode::GeluGrad, x, dy);
  const double c = std::sqrt(2.0 / M_PI);
  double worst_y = 0, worst_g = 0;
  for (int64_t i = 0; i < n; ++i) {
    float y, g;
    std::memcpy(&y, &yb[i], 4);
    std::memcpy(&g, &gb[i], 4);
    const double v = x[i], u = c * (v + 0.044715 * v * v * v), t = std::tanh(u);
    const double want_y = 0.5 * v * (1.0 + t);
    const double want_g = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * v * v);
    worst_y = std::max(worst_y, std::fabs(y - want_y) / (1.0 + std::fabs(want_y)));
    worst_g = std::max(worst_g, std::fabs(g - want_g));
  }
  MESSAGE("GELU: worst error " << worst_y << " (relative above 1), gradient " << worst_g);
  CHECK(worst_y < 2e-6);
  CHECK(worst_g < 5e-6);
}
