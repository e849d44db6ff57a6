// Internal: the elementwise ops' loops, written once and compiled per ISA by
// elementwise.cpp (the baseline) and elementwise_avx2.cpp / elementwise_avx512.cpp,
// which k_elementwise picks by cpu_features. Internal linkage on purpose, as in
// gemm_driver.h: each file compiles its own copy with its own flags, so the linker
// can never hand an AVX-512 copy to the baseline path; for the same reason the
// per-ISA entry points take plain pointers (no Status, no std::string) and the
// loops call only this file's, fast_math.h's (internal too) and compiler builtins.
// The loops are IEEE adds, multiplies and divides with no contraction
// (kernels/CMakeLists.txt), so every width gives the same bits.
#pragma once
#include <cstdint>

#include "cpu/elementwise_args.h"
#include "cpu/fast_math.h"
#include "cpu/parallel.h"
#include "formats/fp4_dge.h"  // its constants only: its functions are not internal
#include "sgrt/ops.h"

namespace sgrt::cpu {
namespace elementwise_impl {
namespace {

constexpr int64_t kGrain = 1 << 14;

// GPT-2's tanh approximation of GELU and its derivative.
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
inline float gelu(float x) { return 0.5f * x * (1.f + fast_tanh(kGeluC * (x + 0.044715f * x * x * x))); }
inline float gelu_grad(float x) {
  float u = kGeluC * (x + 0.044715f * x * x * x);
  float t = fast_tanh(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluC * (1.f + 3.f * 0.044715f * x * x);
}

// fmt::dge_derivative, branch-free so the loop vectorizes: |u|^(1/k - 1) as
// exp((1/k - 1) ln|u|) through fast_math.h (relative error < 1e-6, where libm's
// scalar powf made DGE 18% of the MLP's fp4 step). u comes out bit-identical to
// the reference's: every interval width is a power of two.
inline float dge_derivative(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float c = ax < 6.0f ? ax : 6.0f;  // past the grid (and NaN): 1/k below
  const float t = c * (c < 2.0f ? 2.0f : (c < 4.0f ? 1.0f : 0.5f));  // c / interval width
  const float v = 2.0f * (t - static_cast<float>(static_cast<int32_t>(t))) - 1.0f;
  float u = v < 0.0f ? -v : v;
  u = u > 0x1p-20f ? u : 0x1p-20f;  // the midpoint: clamped below either way
  float g = fast_exp((1.0f / fmt::kDgeK - 1.0f) * fast_log(u)) / fmt::kDgeK;
  g = g < fmt::kDgeClamp ? g : fmt::kDgeClamp;
  return ax >= 6.0f ? 1.0f / fmt::kDgeK : g;
}

void dge_grad(const ElementwiseArgs& a) {
  const int64_t cols = a.cols;
  parallel_for(a.n / cols, (kGrain + cols - 1) / cols, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        a.y[i] = a.x[i] * dge_derivative(a.z[i] * pow2i(a.col_exp[c]));  // = ldexp(z, e)
      }
  });
}

template <class F>
void map1(const ElementwiseArgs& a, F f) {
  const float* x = a.x;
  float* y = a.y;
  parallel_for(a.n, kGrain, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) y[i] = f(x[i]); });
}

template <class F>
void map2(const ElementwiseArgs& a, F f) {
  const float *x = a.x, *z = a.z;
  float* y = a.y;
  parallel_for(a.n, kGrain, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) y[i] = f(x[i], z[i]); });
}

bool run(const ElementwiseArgs& a) {
  switch (a.code) {
    case OpCode::Add: map2(a, [](float x, float y) { return x + y; }); break;
    case OpCode::Sub: map2(a, [](float x, float y) { return x - y; }); break;
    case OpCode::Mul: map2(a, [](float x, float y) { return x * y; }); break;
    case OpCode::Div: map2(a, [](float x, float y) { return x / y; }); break;
    case OpCode::Neg: map1(a, [](float x) { return -x; }); break;
    case OpCode::Scale: map1(a, [alpha = a.alpha](float x) { return x * alpha; }); break;
    case OpCode::Relu: map1(a, [](float x) { return x > 0.f ? x : 0.f; }); break;
    case OpCode::Gelu: map1(a, [](float x) { return gelu(x); }); break;  // a lambda inlines and vectorizes
    case OpCode::Tanh: map1(a, [](float x) { return __builtin_tanhf(x); }); break;
    case OpCode::Sigmoid: map1(a, [](float x) { return 1.f / (1.f + __builtin_expf(-x)); }); break;
    case OpCode::Exp: map1(a, [](float x) { return __builtin_expf(x); }); break;
    case OpCode::Log: map1(a, [](float x) { return __builtin_logf(x); }); break;
    case OpCode::Sqrt: map1(a, [](float x) { return __builtin_sqrtf(x); }); break;
    case OpCode::ReluGrad: map2(a, [](float x, float dy) { return x > 0.f ? dy : 0.f; }); break;
    case OpCode::GeluGrad: map2(a, [](float x, float dy) { return dy * gelu_grad(x); }); break;
    case OpCode::TanhGrad: map2(a, [](float y, float dy) { return dy * (1.f - y * y); }); break;
    case OpCode::SigmoidGrad: map2(a, [](float y, float dy) { return dy * y * (1.f - y); }); break;
    case OpCode::Silu: map1(a, [](float x) { return x / (1.f + fast_exp(-x)); }); break;
    case OpCode::SiluGrad:
      map2(a, [](float x, float dy) {
        float s = 1.f / (1.f + fast_exp(-x));
        return dy * s * (1.f + x * (1.f - s));
      });
      break;
    case OpCode::DgeGrad: dge_grad(a); break;
    default: return false;
  }
  return true;
}

}  // namespace
}  // namespace elementwise_impl
}  // namespace sgrt::cpu
