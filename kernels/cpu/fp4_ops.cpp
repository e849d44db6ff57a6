// FP4 training's two extra ops (Wang et al. 2025): the differentiable gradient
// estimator for quantized weights and outlier clamping of activations.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "cpu/elementwise_args.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/quad.h"

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
// of a row of at least this many is found by row_tails.
constexpr int64_t kLanes = 16;

constexpr int64_t kQuads = kLanes / 4;  // cpu/quad.h vectors a lane pass holds

// The k-th of v[0..kLanes) in the order `before` (1 <= k <= kLanes): the last,
// in that order, of the values with fewer than k others strictly before them.
// Ranks, not a sort: an insertion sort's branches mispredicted on every row.
template <class Before>
float kth_of_lanes(const float* v, int64_t k, Before before) {
  typedef int32_t Ranks __attribute__((vector_size(16)));
  Ranks r[kQuads] = {};
  for (int64_t j = 0; j < kLanes; ++j)
    for (int64_t q = 0; q < kQuads; ++q) r[q] -= before(Quad{} + v[j], load_quad(v + 4 * q));  // a true lane is -1
  int32_t rank[kLanes];
  std::memcpy(rank, r, sizeof rank);
  float out = v[0];
  bool found = false;
  for (int64_t i = 0; i < kLanes; ++i) {
    const bool take = rank[i] < k && (!found || before(out, v[i]));
    out = take ? v[i] : out;
    found = found || take;
  }
  return out;
}

// The k-th largest and k-th smallest of the row xr[0..cols) (1 <= k <= kLanes
// <= cols; tmp: 2 cols floats). The k-th of the strided lanes' maxima (lane j:
// x[j], x[j + kLanes], ...) is an element with at least k elements at or above
// it, so the k-th largest is it or one of the few elements strictly above it;
// one vector pass gathers those (and the same below the minima's k-th), and a
// selection among them finishes.
void row_tails(const float* xr, int64_t cols, int64_t k, float* tmp, float* largest, float* smallest) {
  Quad top[kQuads], bottom[kQuads];
  for (int64_t q = 0; q < kQuads; ++q) top[q] = bottom[q] = load_quad(xr + 4 * q);
  int64_t c = kLanes;
  for (; c + kLanes <= cols; c += kLanes)
    for (int64_t q = 0; q < kQuads; ++q) {
      const Quad v = load_quad(xr + c + 4 * q);
      top[q] = v > top[q] ? v : top[q];
      bottom[q] = v < bottom[q] ? v : bottom[q];
    }
  float hi_lane[kLanes], lo_lane[kLanes];
  std::memcpy(hi_lane, top, sizeof hi_lane);
  std::memcpy(lo_lane, bottom, sizeof lo_lane);
  for (; c < cols; ++c) {
    hi_lane[c % kLanes] = xr[c] > hi_lane[c % kLanes] ? xr[c] : hi_lane[c % kLanes];
    lo_lane[c % kLanes] = xr[c] < lo_lane[c % kLanes] ? xr[c] : lo_lane[c % kLanes];
  }
  const float hi_bound = kth_of_lanes(hi_lane, k, std::greater<>());
  const float lo_bound = kth_of_lanes(lo_lane, k, std::less<>());
  float* above = tmp;
  float* below = tmp + cols;
  int64_t n_above = 0, n_below = 0;
  auto gather = [&](float v) {  // branch-free appends
    above[n_above] = v;
    n_above += v > hi_bound;
    below[n_below] = v;
    n_below += v < lo_bound;
  };
  const Quad hb = Quad{} + hi_bound, lb = Quad{} + lo_bound;
  c = 0;
  for (; c + 4 <= cols; c += 4) {
    const Quad v = load_quad(xr + c);
    if (any_lane((v > hb) | (v < lb)))
      for (int64_t l = 0; l < 4; ++l) gather(xr[c + l]);
  }
  for (; c < cols; ++c) gather(xr[c]);
  auto finish = [&](float* cand, int64_t count, float bound, auto before) {
    if (count < k) return bound;
    std::nth_element(cand, cand + k - 1, cand + count, before);
    return cand[k - 1];
  };
  *largest = finish(above, n_above, hi_bound, std::greater<>());
  *smallest = finish(below, n_below, lo_bound, std::less<>());
}

// The sorted row's elements lo_k and hi_k (hi_k + lo_k = cols - 1); tmp holds 2 cols floats.
void row_quantiles(const float* xr, int64_t cols, int64_t lo_k, int64_t hi_k, float* tmp, float* lo, float* hi) {
  const int64_t k = std::min(lo_k, hi_k) + 1;  // lo_k + 1 = the k-th largest's rank when lo_k <= hi_k
  if (k <= kLanes && cols >= kLanes) {
    float largest, smallest;
    row_tails(xr, cols, k, tmp, &largest, &smallest);
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
    float* tmp = static_cast<float*>(thread_scratch(0, 2 * sizeof(float) * cols));
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
