// Elementwise ops and their gradients, FP32.
#include <cmath>

#include "cpu/fast_math.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
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

template <class F>
void map1(const OpArgs& a, F f) {
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  parallel_for(a.out[0].n, kGrain, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) y[i] = f(x[i]); });
}

template <class F>
void map2(const OpArgs& a, F f) {
  const float* x = a.in[0].f();
  const float* z = a.in[1].f();
  float* y = a.out[0].f();
  parallel_for(a.out[0].n, kGrain, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) y[i] = f(x[i], z[i]); });
}

}  // namespace

Status k_elementwise(const OpArgs& a) {
  switch (a.code) {
    case OpCode::Add: map2(a, [](float x, float y) { return x + y; }); break;
    case OpCode::Sub: map2(a, [](float x, float y) { return x - y; }); break;
    case OpCode::Mul: map2(a, [](float x, float y) { return x * y; }); break;
    case OpCode::Div: map2(a, [](float x, float y) { return x / y; }); break;
    case OpCode::Neg: map1(a, [](float x) { return -x; }); break;
    case OpCode::Scale: {
      float alpha = static_cast<float>(a.attrs->f("alpha"));
      map1(a, [alpha](float x) { return x * alpha; });
      break;
    }
    case OpCode::Relu: map1(a, [](float x) { return x > 0.f ? x : 0.f; }); break;
    case OpCode::Gelu: map1(a, [](float x) { return gelu(x); }); break;  // a lambda inlines and vectorizes
    case OpCode::Tanh: map1(a, [](float x) { return std::tanh(x); }); break;
    case OpCode::Sigmoid: map1(a, [](float x) { return 1.f / (1.f + std::exp(-x)); }); break;
    case OpCode::Exp: map1(a, [](float x) { return std::exp(x); }); break;
    case OpCode::Log: map1(a, [](float x) { return std::log(x); }); break;
    case OpCode::Sqrt: map1(a, [](float x) { return std::sqrt(x); }); break;
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
    default: return Status::Runtime("elementwise kernel given " + std::string(op_info(a.code).name));
  }
  return Status::Ok();
}

Status k_fill(const OpArgs& a) {
  float v = static_cast<float>(a.attrs->f("value"));
  float* y = a.out[0].f();
  for (int64_t i = 0; i < a.out[0].n; ++i) y[i] = v;
  return Status::Ok();
}

}  // namespace sgrt::cpu
