// Elementwise ops and their gradients, fill, and FP4's DGE gradient: one
// grid-stride kernel templated on the op (kernels/cpu/elementwise.cpp is the
// definition; same float formulas, CUDA's expf/tanhf/logf within a few ulps).
#include "common.cuh"
#include "formats/fp4_dge.h"

namespace sgrt::cuda {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi): GPT-2's tanh GELU

// The ops this file maps, with their arity (1: y = f(x), 2: y = f(x, z)).
#define SG_CUDA_MAPS(X)                                                                               \
  X(Add, 2) X(Sub, 2) X(Mul, 2) X(Div, 2) X(Neg, 1) X(Scale, 1) X(Relu, 1) X(Gelu, 1) X(Tanh, 1)     \
  X(Sigmoid, 1) X(Exp, 1) X(Log, 1) X(ReluGrad, 2) X(GeluGrad, 2) X(TanhGrad, 2) X(SigmoidGrad, 2)    \
  X(Silu, 1) X(SiluGrad, 2) X(Sqrt, 1) X(Fill, 0)

template <OpCode C>
__device__ float map_value(float x, float z, float alpha) {
  if constexpr (C == OpCode::Add) return x + z;
  else if constexpr (C == OpCode::Sub) return x - z;
  else if constexpr (C == OpCode::Mul) return x * z;
  else if constexpr (C == OpCode::Div) return x / z;
  else if constexpr (C == OpCode::Neg) return -x;
  else if constexpr (C == OpCode::Scale) return x * alpha;
  else if constexpr (C == OpCode::Relu) return x > 0.f ? x : 0.f;
  else if constexpr (C == OpCode::Gelu) return 0.5f * x * (1.f + tanhf(kGeluC * (x + 0.044715f * x * x * x)));
  else if constexpr (C == OpCode::Tanh) return tanhf(x);
  else if constexpr (C == OpCode::Sigmoid) return 1.f / (1.f + expf(-x));
  else if constexpr (C == OpCode::Exp) return expf(x);
  else if constexpr (C == OpCode::Log) return logf(x);
  else if constexpr (C == OpCode::Sqrt) return sqrtf(x);
  else if constexpr (C == OpCode::ReluGrad) return x > 0.f ? z : 0.f;  // (relu's x or y, dy)
  else if constexpr (C == OpCode::GeluGrad) {
    float t = tanhf(kGeluC * (x + 0.044715f * x * x * x));
    return z * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluC * (1.f + 3.f * 0.044715f * x * x));
  } else if constexpr (C == OpCode::TanhGrad) return z * (1.f - x * x);  // (y, dy)
  else if constexpr (C == OpCode::SigmoidGrad) return z * x * (1.f - x);
  else if constexpr (C == OpCode::Silu) return x / (1.f + expf(-x));
  else if constexpr (C == OpCode::SiluGrad) {
    float s = 1.f / (1.f + expf(-x));
    return z * s * (1.f + x * (1.f - s));
  } else return alpha;  // Fill
}

// y[i] = f(x[i], z[i]); unused inputs are nullptr and read as 0.
template <OpCode C>
__global__ void map_kernel(int64_t n, const float* x, const float* z, float alpha, float* y) {
  SG_GRID_STRIDE(i, n) y[i] = map_value<C>(x ? x[i] : 0.f, z ? z[i] : 0.f, alpha);
}

template <OpCode C>
Status bind_map(const OpArgs& a, int arity, BindCtx& ctx, Launch* out) {
  const float* x = arity >= 1 ? a.in[0].f() : nullptr;
  const float* z = arity >= 2 ? a.in[1].f() : nullptr;
  float alpha = static_cast<float>(C == OpCode::Fill ? a.attrs->f("value") : a.attrs->f("alpha"));
  float* y = a.out[0].f();
  int64_t n = a.out[0].n;
  unsigned grid = grid_for(n, ctx.dev);
  *out = [=](cudaStream_t s) {
    map_kernel<C><<<grid, kThreads, 0, s>>>(n, x, z, alpha, y);
    return launched("map_kernel");
  };
  return Status::Ok();
}

// dW[o, i] * f'(W[o, i] 2^e[i]): the weight [rows, cols] was quantized per input channel.
__global__ void dge_grad_kernel(int64_t n, int64_t cols, const float* dw, const float* w, const int32_t* e, float* out) {
  SG_GRID_STRIDE(i, n) out[i] = dw[i] * fmt::dge_derivative(ldexpf(w[i], e[i % cols]));
}

Status bind_dge_grad(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const float* dw = a.in[0].f();
  const float* w = a.in[1].f();
  const int32_t* e = a.in[2].i32();
  float* y = a.out[0].f();
  int64_t n = a.out[0].n, cols = a.in[1].shape()[1];
  unsigned grid = grid_for(n, ctx.dev);
  *out = [=](cudaStream_t s) {
    dge_grad_kernel<<<grid, kThreads, 0, s>>>(n, cols, dw, w, e, y);
    return launched("dge_grad_kernel");
  };
  return Status::Ok();
}

}  // namespace

Status bind_elementwise(const OpArgs& a, BindCtx& ctx, Launch* out) {
  switch (a.code) {
#define SG_CASE(op, arity) \
  case OpCode::op: return bind_map<OpCode::op>(a, arity, ctx, out);
    SG_CUDA_MAPS(SG_CASE)
#undef SG_CASE
    case OpCode::DgeGrad: return bind_dge_grad(a, ctx, out);
    default: return Status::Runtime("cuda elementwise binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
