// Reductions along one axis, softmax, log-softmax and their gradients. A tensor
// is seen as [outer, n, inner] around the axis; each output element is reduced
// by one thread in a fixed order, so results do not depend on thread count.
#include <cmath>
#include <limits>

#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

AxisSplit split(const OpArgs& a, int64_t def_axis) {
  const Shape& xs = a.in[0].shape();
  int64_t axis = 0;
  normalize_axis(a.attrs->i("axis", def_axis), static_cast<int64_t>(xs.size()), &axis);
  return split_at_axis(xs, axis);
}

// fn(o, i, stride, base): one (outer, inner) lane; element k is at base + k*stride.
template <class F>
void for_lanes(const AxisSplit& s, F fn) {
  parallel_for(s.outer * s.inner, std::max<int64_t>(1, 8192 / s.n), [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) {
      int64_t o = l / s.inner, i = l % s.inner;
      fn(l, s.inner, o * s.n * s.inner + i);
    }
  });
}

}  // namespace

Status k_reduce(const OpArgs& a) {
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  switch (a.code) {
    case OpCode::ReduceSum: case OpCode::ReduceMean: case OpCode::ReduceMax: {
      AxisSplit s = split(a, 0);
      bool is_max = a.code == OpCode::ReduceMax;
      float div = a.code == OpCode::ReduceMean ? static_cast<float>(s.n) : 1.f;
      for_lanes(s, [&](int64_t l, int64_t st, int64_t base) {
        float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.f;
        for (int64_t k = 0; k < s.n; ++k) {
          float v = x[base + k * st];
          acc = is_max ? (v > acc ? v : acc) : acc + v;
        }
        y[l] = acc / div;
      });
      return Status::Ok();
    }
    case OpCode::ReduceMaxGrad: {
      // Every element equal to the max receives the gradient.
      AxisSplit s = split(a, 0);
      const float* mx = a.in[1].f();
      const float* dy = a.in[2].f();
      for_lanes(s, [&](int64_t l, int64_t st, int64_t base) {
        for (int64_t k = 0; k < s.n; ++k) y[base + k * st] = x[base + k * st] == mx[l] ? dy[l] : 0.f;
      });
      return Status::Ok();
    }
    case OpCode::Softmax: case OpCode::LogSoftmax: {
      AxisSplit s = split(a, -1);
      bool log = a.code == OpCode::LogSoftmax;
      for_lanes(s, [&](int64_t, int64_t st, int64_t base) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < s.n; ++k) m = std::fmax(m, x[base + k * st]);
        float sum = 0.f;
        for (int64_t k = 0; k < s.n; ++k) sum += std::exp(x[base + k * st] - m);
        float lse = m + std::log(sum);
        for (int64_t k = 0; k < s.n; ++k) {
          float v = x[base + k * st] - lse;
          y[base + k * st] = log ? v : std::exp(v);
        }
      });
      return Status::Ok();
    }
    case OpCode::SoftmaxGrad: case OpCode::LogSoftmaxGrad: {
      // softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
      AxisSplit s = split(a, -1);
      const float* dy = a.in[1].f();
      bool log = a.code == OpCode::LogSoftmaxGrad;
      for_lanes(s, [&](int64_t, int64_t st, int64_t base) {
        float dot = 0.f;
        for (int64_t k = 0; k < s.n; ++k) {
          int64_t j = base + k * st;
          dot += log ? dy[j] : dy[j] * x[j];
        }
        for (int64_t k = 0; k < s.n; ++k) {
          int64_t j = base + k * st;
          y[j] = log ? dy[j] - std::exp(x[j]) * dot : x[j] * (dy[j] - dot);
        }
      });
      return Status::Ok();
    }
    default:
      return Status::Runtime("reduce kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
