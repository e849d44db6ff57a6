// FP4 training's two extra ops (Wang et al. 2025): the differentiable gradient
// estimator for quantized weights and outlier clamping of activations.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "formats/fp4_dge.h"

namespace sgrt::cpu {

// dW[o, i] *= f'(W[o, i] * 2^e[i]): the weight was quantized per input channel.
Status k_dge_grad(const OpArgs& a) {
  const float* dw = a.in[0].f();
  const float* w = a.in[1].f();
  const int32_t* e = a.in[2].i32();
  float* out = a.out[0].f();
  int64_t cols = a.in[1].shape()[1], rows = a.in[1].shape()[0];
  parallel_for(rows, 16, [&](int64_t b, int64_t en) {
    for (int64_t r = b; r < en; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        int64_t i = r * cols + c;
        out[i] = dw[i] * fmt::dge_derivative(w[i] * fmt::exp2i(e[c]));  // = ldexp: e is in [-126, 127]
      }
  });
  return Status::Ok();
}

// Per row: clamp to the [1 - alpha, alpha] quantiles; the residual x - clamp(x)
// is non-zero for about 2 (1 - alpha) of the entries and goes through a
// high-precision matmul (the compensation).
Status k_clamp_outliers(const OpArgs& a) {
  const float* x = a.in[0].f();
  float* xc = a.out[0].f();
  float* res = a.out[1].f();
  int64_t cols = a.in[0].shape().back(), rows = a.in[0].n / cols;
  double alpha = a.attrs->f("alpha");
  int64_t hi_k = static_cast<int64_t>(std::floor(alpha * static_cast<double>(cols - 1)));
  int64_t lo_k = cols - 1 - hi_k;
  parallel_for(rows, 4, [&](int64_t b, int64_t e) {
    float* tmp = static_cast<float*>(thread_scratch(0, sizeof(float) * cols));
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      std::memcpy(tmp, xr, sizeof(float) * cols);
      std::nth_element(tmp, tmp + hi_k, tmp + cols);
      float hi = tmp[hi_k];
      // The first selection left every smaller element before hi_k and every larger
      // one after it: the second searches only the side lo_k is on.
      if (lo_k < hi_k) std::nth_element(tmp, tmp + lo_k, tmp + hi_k);
      else if (lo_k > hi_k) std::nth_element(tmp + hi_k + 1, tmp + lo_k, tmp + cols);
      float lo = tmp[lo_k];
      for (int64_t c = 0; c < cols; ++c) {
        float v = std::min(std::max(xr[c], lo), hi);
        xc[r * cols + c] = v;
        res[r * cols + c] = xr[c] - v;
      }
    }
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
