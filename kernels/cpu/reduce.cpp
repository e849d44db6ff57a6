// Reductions along one axis, softmax, log-softmax and their gradients. A tensor
// is seen as [outer, n, inner] around the axis. Each output element is reduced
// by one thread in an order fixed by the shape alone, so results depend neither
// on the thread count nor on the ISA: each lane of n elements in row_reduce.h's
// order (a strided lane is gathered into a contiguous row first), except
// reduce_sum/mean along a strided axis, which sums each output in k order,
// vectorized across the neighbouring outputs.
#include <algorithm>

#include "cpu/fast_math.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/row_reduce.h"

namespace sgrt::cpu {
namespace {

AxisSplit split(const OpArgs& a, int64_t def_axis) {
  const Shape& xs = a.in[0].shape();
  int64_t axis = 0;
  normalize_axis(a.attrs->i("axis", def_axis), static_cast<int64_t>(xs.size()), &axis);
  return split_at_axis(xs, axis);
}

int64_t lane_grain(const AxisSplit& s) { return std::max<int64_t>(1, 8192 / s.n); }

// fn(l, x, dy, y): lane l's n elements of x (and dy, y where given) as contiguous
// rows. Along a strided axis (inner > 1) they are gathered into per-thread scratch
// and y is scattered back, so every op has one row loop, vectorized, whatever the axis.
template <class F>
void for_rows(const AxisSplit& s, const float* x, const float* dy, float* y, F fn) {
  parallel_for(s.outer * s.inner, lane_grain(s), [&](int64_t b, int64_t e) {
    float* tmp = s.inner > 1 ? static_cast<float*>(thread_scratch(0, sizeof(float) * 3 * s.n)) : nullptr;
    for (int64_t l = b; l < e; ++l) {
      int64_t base = l / s.inner * s.n * s.inner + l % s.inner, st = s.inner;
      const float *xr = x + base, *dyr = dy ? dy + base : nullptr;
      float* yr = y ? y + base : nullptr;
      if (st > 1) {  // one call site below: fn inlines once
        for (int64_t k = 0; k < s.n; ++k) tmp[k] = x[base + k * st];
        if (dy)
          for (int64_t k = 0; k < s.n; ++k) tmp[s.n + k] = dy[base + k * st];
        xr = tmp, dyr = dy ? tmp + s.n : nullptr, yr = y ? tmp + 2 * s.n : nullptr;
      }
      fn(l, xr, dyr, yr);
      if (st > 1 && y)
        for (int64_t k = 0; k < s.n; ++k) y[base + k * st] = tmp[2 * s.n + k];
    }
  });
}

// y[l] = sum_k x(l, k) / div along a strided axis: each output sums in k order,
// the loop over neighbouring outputs (contiguous in x and y) vectorizes.
void sum_strided(const AxisSplit& s, const float* x, float* y, float div) {
  parallel_for(s.outer * s.inner, lane_grain(s), [&](int64_t b, int64_t e) {
    for (int64_t l0 = b; l0 < e;) {
      int64_t o = l0 / s.inner, l1 = std::min(e, (o + 1) * s.inner);
      const float* xo = x + o * s.inner * (s.n - 1);  // element k of lane l: xo[k * inner + l]
      for (int64_t l = l0; l < l1; ++l) y[l] = 0.f;
      for (int64_t k = 0; k < s.n; ++k)
        for (int64_t l = l0; l < l1; ++l) y[l] += xo[k * s.inner + l];
      for (int64_t l = l0; l < l1; ++l) y[l] /= div;
      l0 = l1;
    }
  });
}

}  // namespace

Status k_reduce(const OpArgs& a) {
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  switch (a.code) {
    case OpCode::ReduceSum: case OpCode::ReduceMean: {
      AxisSplit s = split(a, 0);
      float div = a.code == OpCode::ReduceMean ? static_cast<float>(s.n) : 1.f;
      if (s.inner > 1) sum_strided(s, x, y, div);
      else parallel_for(s.outer, lane_grain(s), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) y[o] = row_sum(x + o * s.n, s.n) / div;
      });
      return Status::Ok();
    }
    case OpCode::ReduceMax: {
      AxisSplit s = split(a, 0);
      for_rows(s, x, nullptr, nullptr, [&](int64_t l, const float* xr, const float*, float*) { y[l] = row_max(xr, s.n); });
      return Status::Ok();
    }
    case OpCode::ReduceMaxGrad: {
      // Every element equal to the max receives the gradient.
      AxisSplit s = split(a, 0);
      const float* mx = a.in[1].f();
      const float* dy = a.in[2].f();
      for_rows(s, x, nullptr, y, [&](int64_t l, const float* xr, const float*, float* yr) {
        for (int64_t k = 0; k < s.n; ++k) yr[k] = xr[k] == mx[l] ? dy[l] : 0.f;
      });
      return Status::Ok();
    }
    case OpCode::Softmax: case OpCode::LogSoftmax: {
      AxisSplit s = split(a, -1);
      bool log = a.code == OpCode::LogSoftmax;
      for_rows(s, x, nullptr, y, [&](int64_t, const float* xr, const float*, float* yr) {
        float lse = row_logsumexp(xr, s.n);
        if (log) for (int64_t k = 0; k < s.n; ++k) yr[k] = xr[k] - lse;
        else for (int64_t k = 0; k < s.n; ++k) yr[k] = fast_exp(xr[k] - lse);
      });
      return Status::Ok();
    }
    case OpCode::SoftmaxGrad: case OpCode::LogSoftmaxGrad: {
      // softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
      AxisSplit s = split(a, -1);
      bool log = a.code == OpCode::LogSoftmaxGrad;
      for_rows(s, x, a.in[1].f(), y, [&](int64_t, const float* yr, const float* dyr, float* dxr) {
        if (log) {
          float sum = row_sum(dyr, s.n);
          for (int64_t k = 0; k < s.n; ++k) dxr[k] = dyr[k] - fast_exp(yr[k]) * sum;
        } else {
          float dot = row_dot(dyr, yr, s.n);
          for (int64_t k = 0; k < s.n; ++k) dxr[k] = yr[k] * (dyr[k] - dot);
        }
      });
      return Status::Ok();
    }
    default:
      return Status::Runtime("reduce kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
