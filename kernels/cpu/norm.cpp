// Layer norm and RMS norm over the last axis, with their gradients. The forward
// ops save the per-row statistics (mean, 1/std) as outputs the backward reads.
// dx is computed row by row; dgain and dbias are column sums, split by columns
// across threads, each column in sgrt/column_sums.h's order (deterministic on
// any thread count, the GPU backends' bits).
// Row sums follow row_reduce.h's order (the same bits on every ISA).
#include <cmath>
#include <vector>

#include "cpu/column_sums.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/row_reduce.h"

namespace sgrt::cpu {
namespace {

struct Rows {
  int64_t n, d;  // x viewed as [n, d]
};
Rows rows_of(const TensorArg& x) { return {x.n / x.shape().back(), x.shape().back()}; }
int64_t row_grain(int64_t d) { return std::max<int64_t>(1, 4096 / d); }

// Forward: y = (x - mean) * rstd * g (+ b). layer == false: RMS norm, mean = 0.
void norm_forward(const float* x, const float* g, const float* bias, float* y, float* mean, float* rstd, Rows s,
                  float eps, bool layer) {
  parallel_for(s.n, row_grain(s.d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * s.d;
      float m = layer ? row_sum(xr, s.d) / static_cast<float>(s.d) : 0.f;
      float var = lane_sum(s.d, [&](int64_t c) { return (xr[c] - m) * (xr[c] - m); });
      float rs = 1.f / std::sqrt(var / static_cast<float>(s.d) + eps);
      float* yr = y + r * s.d;
      for (int64_t c = 0; c < s.d; ++c) yr[c] = (xr[c] - m) * rs * g[c] + (bias ? bias[c] : 0.f);
      if (layer) mean[r] = m;
      rstd[r] = rs;
    }
  });
}

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * g
// (RMS norm drops the mean(dxhat) term); dgain = sum_rows dy * xhat, dbias = sum_rows dy.
void norm_backward(const float* x, const float* g, const float* mean, const float* rstd, const float* dy, float* dx,
                   float* dgain, float* dbias, Rows s) {
  auto xhat = [&](int64_t r, int64_t c) { return (x[r * s.d + c] - (mean ? mean[r] : 0.f)) * rstd[r]; };
  parallel_for(s.n, row_grain(s.d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* dyr = dy + r * s.d;
      float sum = mean ? row_dot(dyr, g, s.d) : 0.f;
      float dot = lane_sum(s.d, [&](int64_t c) { return dyr[c] * g[c] * xhat(r, c); });
      float inv_d = 1.f / static_cast<float>(s.d);
      float mean_dh = mean ? sum * inv_d : 0.f, mean_dot = dot * inv_d;
      float* dxr = dx + r * s.d;
      for (int64_t c = 0; c < s.d; ++c) dxr[c] = rstd[r] * (dyr[c] * g[c] - mean_dh - xhat(r, c) * mean_dot);
    }
  });
  std::vector<float> part(static_cast<size_t>(s.d));  // chunk sums: each thread its own columns' slice
  parallel_for(s.d, 16, [&](int64_t c0, int64_t c1) {
    float* slice = part.data() + c0;
    column_sums(s.n, c0, c1, dgain, slice, [&](int64_t r, int64_t c) { return dy[r * s.d + c] * xhat(r, c); });
    if (dbias) column_sums(s.n, c0, c1, dbias, slice, [&](int64_t r, int64_t c) { return dy[r * s.d + c]; });
  });
}

}  // namespace

Status k_norm(const OpArgs& a) {
  float eps = static_cast<float>(a.attrs->f("eps"));
  Rows s = rows_of(a.in[0]);
  switch (a.code) {
    case OpCode::LayerNorm:  // (x, g, b) -> (y, mean, rstd)
      norm_forward(a.in[0].f(), a.in[1].f(), a.in[2].f(), a.out[0].f(), a.out[1].f(), a.out[2].f(), s, eps, true);
      return Status::Ok();
    case OpCode::RmsNorm:  // (x, g) -> (y, rstd)
      norm_forward(a.in[0].f(), a.in[1].f(), nullptr, a.out[0].f(), nullptr, a.out[1].f(), s, eps, false);
      return Status::Ok();
    case OpCode::LayerNormGrad:  // (x, g, mean, rstd, dy) -> (dx, dg, db)
      norm_backward(a.in[0].f(), a.in[1].f(), a.in[2].f(), a.in[3].f(), a.in[4].f(), a.out[0].f(), a.out[1].f(),
                    a.out[2].f(), s);
      return Status::Ok();
    case OpCode::RmsNormGrad:  // (x, g, rstd, dy) -> (dx, dg)
      norm_backward(a.in[0].f(), a.in[1].f(), nullptr, a.in[2].f(), a.in[3].f(), a.out[0].f(), a.out[1].f(), nullptr, s);
      return Status::Ok();
    default:
      return Status::Runtime("norm kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
