// Reductions along one axis, softmax, log-softmax and their gradients
// (kernels/cpu/reduce.cpp is the definition). A tensor is seen as
// [outer, n, inner] around the axis; one thread owns one (outer, inner) lane and
// walks its n elements in the CPU's order, so sums and maxima match it exactly and
// only exp/log differ by their last-ulp rounding.
// Limit: a lane is serial, so a very long axis with few lanes (a full-tensor sum)
// runs on few threads; fine for losses and per-row statistics, slow for giant ones.
#include <cmath>

#include "common.cuh"

namespace sgrt::cuda {
namespace {

struct Lanes {
  int64_t outer, n, inner;
};

// x: the op's first input; aux: max (ReduceMaxGrad) or dy (softmax gradients);
// dy: ReduceMaxGrad's incoming gradient.
template <OpCode C>
__global__ void lane_kernel(Lanes s, const float* x, const float* aux, const float* dy, float* y) {
  SG_GRID_STRIDE(l, s.outer * s.inner) {
    const int64_t st = s.inner, base = (l / s.inner) * s.n * s.inner + l % s.inner;
    if constexpr (C == OpCode::ReduceSum || C == OpCode::ReduceMean || C == OpCode::ReduceMax) {
      float acc = C == OpCode::ReduceMax ? -INFINITY : 0.f;
      for (int64_t k = 0; k < s.n; ++k) {
        float v = x[base + k * st];
        acc = C == OpCode::ReduceMax ? (v > acc ? v : acc) : acc + v;
      }
      y[l] = acc / (C == OpCode::ReduceMean ? static_cast<float>(s.n) : 1.f);
    } else if constexpr (C == OpCode::ReduceMaxGrad) {
      // Every element equal to the max receives the gradient.
      for (int64_t k = 0; k < s.n; ++k) y[base + k * st] = x[base + k * st] == aux[l] ? dy[l] : 0.f;
    } else if constexpr (C == OpCode::Softmax || C == OpCode::LogSoftmax) {
      float m = -INFINITY;
      for (int64_t k = 0; k < s.n; ++k) m = fmaxf(m, x[base + k * st]);
      float sum = 0.f;
      for (int64_t k = 0; k < s.n; ++k) sum += expf(x[base + k * st] - m);
      const float lse = m + logf(sum);
      for (int64_t k = 0; k < s.n; ++k) {
        float v = x[base + k * st] - lse;
        y[base + k * st] = C == OpCode::LogSoftmax ? v : expf(v);
      }
    } else {
      // softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). x is y, aux is dy.
      constexpr bool log = C == OpCode::LogSoftmaxGrad;
      float dot = 0.f;
      for (int64_t k = 0; k < s.n; ++k) {
        int64_t j = base + k * st;
        dot += log ? aux[j] : aux[j] * x[j];
      }
      for (int64_t k = 0; k < s.n; ++k) {
        int64_t j = base + k * st;
        y[j] = log ? aux[j] - expf(x[j]) * dot : x[j] * (aux[j] - dot);
      }
    }
  }
}

template <OpCode C>
Status bind_lanes(const OpArgs& a, int64_t default_axis, BindCtx& ctx, Launch* out) {
  const Shape& xs = a.in[0].shape();
  int64_t axis = 0;
  if (!normalize_axis(a.attrs->i("axis", default_axis), static_cast<int64_t>(xs.size()), &axis))
    return Status::Invalid("axis out of range");
  AxisSplit sp = split_at_axis(xs, axis);
  Lanes s{sp.outer, sp.n, sp.inner};
  const float* x = a.in[0].f();
  const float* aux = a.in.size() > 1 ? a.in[1].f() : nullptr;
  const float* dy = a.in.size() > 2 ? a.in[2].f() : nullptr;
  float* y = a.out[0].f();
  unsigned grid = grid_for(s.outer * s.inner, ctx.dev);
  *out = [=](cudaStream_t st) {
    lane_kernel<C><<<grid, kThreads, 0, st>>>(s, x, aux, dy, y);
    return launched("lane_kernel");
  };
  return Status::Ok();
}

}  // namespace

Status bind_reduce(const OpArgs& a, BindCtx& ctx, Launch* out) {
  switch (a.code) {
    case OpCode::ReduceSum: return bind_lanes<OpCode::ReduceSum>(a, 0, ctx, out);
    case OpCode::ReduceMean: return bind_lanes<OpCode::ReduceMean>(a, 0, ctx, out);
    case OpCode::ReduceMax: return bind_lanes<OpCode::ReduceMax>(a, 0, ctx, out);
    case OpCode::ReduceMaxGrad: return bind_lanes<OpCode::ReduceMaxGrad>(a, 0, ctx, out);
    case OpCode::Softmax: return bind_lanes<OpCode::Softmax>(a, -1, ctx, out);
    case OpCode::LogSoftmax: return bind_lanes<OpCode::LogSoftmax>(a, -1, ctx, out);
    case OpCode::SoftmaxGrad: return bind_lanes<OpCode::SoftmaxGrad>(a, -1, ctx, out);
    case OpCode::LogSoftmaxGrad: return bind_lanes<OpCode::LogSoftmaxGrad>(a, -1, ctx, out);
    default: return Status::Runtime("cuda reduce binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
