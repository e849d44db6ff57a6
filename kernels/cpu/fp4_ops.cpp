// FP4 training's two extra ops (Wang et al. 2025): the differentiable gradient
// estimator for quantized weights and outlier clamping of activations.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "cpu/elementwise_args.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
// dW[o, i] *= f'(W[o, i] * 2^e[i]): the weight was quantized per input channel
// (the loop is elementwise_kernels.h's, at the CPU's widest vectors).
Status k_dge_grad(const OpArgs& a) {
  const float* dw = a.in[0].f();
  const float* w = a.in[1].f();
  const int32_t* e = a.in[2].i32();
  float* out = a.out[0].f();
  ElementwiseArgs args{OpCode::DgeGrad, dw, w, out, a.out[0].n, 0.0f, e, a.in[1].shape()[1]};
  if (!elementwise_run(args)) return Status::Runtime("dge_grad: no elementwise kernel");
  return Status::Ok();
}

namespace {

// Lanes of the first pass; a quantile at most this many elements from either end
// of a row of at least this many takes the two-pass selection.
constexpr int64_t kLanes = 16;

// The k-th of v[0..kLanes) in the order `before` (1 <= k <= kLanes): the last,
// in that order, of the values with fewer than k others strictly before them.
// Ranks, not a sort: an insertion sort's branches mispredicted on every row.
template <class Before>
float kth_of_lanes(const float* v, int64_t k, Before before) {
  int32_t rank[kLanes] = {};
  for (int64_t j = 0; j < kLanes; ++j)
    for (int64_t i = 0; i < kLanes; ++i) rank[i] += before(v[j], v[i]) ? 1 : 0;
  float out = v[0];
  bool found = false;
  for (int64_t i = 0; i < kLanes; ++i) {
    const bool take = rank[i] < k && (!found || before(out, v[i]));
    out = take ? v[i] : out;
    found = found || take;
  }
  return out;
}

// The k-th value of x[0..n) in the order `before` (the k-th largest for
// std::greater), 1 <= k <= kLanes <= n, given lane[j] = the first in that order
// of the strided lane x[j], x[j + kLanes], ... The k-th of the lanes' firsts is
// an element with at least k elements at or before it, so the answer is it or
// one of the few elements strictly before it; those lie in the fewer than k
// lanes whose first is strictly before it, the only lanes gathered into cand
// (n floats).
template <class Before>
float kth_in_order(const float* x, int64_t n, int64_t k, const float* lane, float* cand, Before before) {
  const float bound = kth_of_lanes(lane, k, before);
  int64_t count = 0;
  for (int64_t j = 0; j < kLanes; ++j) {
    if (!before(lane[j], bound)) continue;
    for (int64_t c = j; c < n; c += kLanes) {  // branch-free compaction
      cand[count] = x[c];
      count += before(x[c], bound);
    }
  }
  if (count < k) return bound;
  std::nth_element(cand, cand + k - 1, cand + count, before);
  return cand[k - 1];
}

// The sorted row's elements lo_k and hi_k (hi_k + lo_k = cols - 1); tmp holds cols floats.
void row_quantiles(const float* xr, int64_t cols, int64_t lo_k, int64_t hi_k, float* tmp, float* lo, float* hi) {
  const int64_t k = std::min(lo_k, hi_k) + 1;  // lo_k + 1 = the k-th largest's rank when lo_k <= hi_k
  if (k <= kLanes && cols >= kLanes) {
    float top[kLanes], bottom[kLanes];  // each lane's largest and smallest, one pass
    std::memcpy(top, xr, sizeof top);
    std::memcpy(bottom, xr, sizeof bottom);
    int64_t i = kLanes;
    for (; i + kLanes <= cols; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) {
        top[j] = xr[i + j] > top[j] ? xr[i + j] : top[j];
        bottom[j] = xr[i + j] < bottom[j] ? xr[i + j] : bottom[j];
      }
    for (; i < cols; ++i) {
      top[i % kLanes] = xr[i] > top[i % kLanes] ? xr[i] : top[i % kLanes];
      bottom[i % kLanes] = xr[i] < bottom[i % kLanes] ? xr[i] : bottom[i % kLanes];
    }
    float largest = kth_in_order(xr, cols, k, top, tmp, std::greater<float>());
    float smallest = kth_in_order(xr, cols, k, bottom, tmp, std::less<float>());
    *hi = lo_k <= hi_k ? largest : smallest;
    *lo = lo_k <= hi_k ? smallest : largest;
    return;
  }
  std::memcpy(tmp, xr, sizeof(float) * cols);
  std::nth_element(tmp, tmp + hi_k, tmp + cols);
  *hi = tmp[hi_k];
  // The first selection left every smaller element before hi_k and every larger
  // one after it: the second searches only the side lo_k is on.
  if (lo_k < hi_k) std::nth_element(tmp, tmp + lo_k, tmp + hi_k);
  else if (lo_k > hi_k) std::nth_element(tmp + hi_k + 1, tmp + lo_k, tmp + cols);
  *lo = tmp[lo_k];
}

}  // namespace

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
      float lo, hi;
      row_quantiles(xr, cols, lo_k, hi_k, tmp, &lo, &hi);
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
