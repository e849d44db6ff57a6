// SGD with momentum and AdamW (PyTorch's update order) over parameters and state
// held in f32, f16 or e4m3 with per-tensor power-of-two scales (optimizer_state.h).
//
// Low-precision state takes two passes in one kernel, as MS-AMP's Adam but with no
// f32 copy: the first computes every new value and its amax, the scales for this
// step follow from those amaxes, and the second recomputes the same values (same
// float operations, so identical) and stores them under the new scales. The
// parameter update itself uses the f32 moments of this step; only what is kept
// for the next step is rounded. All-f32 updates take the second pass only.
#include <algorithm>
#include <cmath>

#include "sgrt/quant.h"

#include "cpu/optimizer_state.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

struct Values { float w, s1, s2; };  // parameter, first and second state

// views: param, state 1, state 2 (state 2 unused when nstate == 1); `step`
// maps (i, old values) to new values. scales[kOptScaleW] moves only when
// scale_w (O3's scaled master weights).
template <class Step>
void apply(int64_t n, const TensorArg* views, int nstate, float* scales, bool scale_w, Step step) {
  const int slot[3] = {kOptScaleW, kOptScaleM, kOptScaleV};
  ScaledState old[3] = {{views[0], scales[slot[0]]}, {views[1], scales[slot[1]]},
                        {views[nstate == 2 ? 2 : 1], scales[slot[nstate == 2 ? 2 : 1]]}};
  auto load = [&](int64_t i) { return Values{old[0].get(i), old[1].get(i), nstate == 2 ? old[2].get(i) : 0.f}; };
  bool lowp = false;
  for (int k = 0; k <= nstate; ++k) lowp = lowp || !old[k].is_f32();
  if (lowp) {
    int64_t chunks = (n + kGrain - 1) / kGrain;
    float* amax = static_cast<float*>(thread_scratch(3, static_cast<size_t>(chunks) * 3 * sizeof(float)));
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      float m[3] = {0, 0, 0};
      for (int64_t i = b; i < e; ++i) {
        Values v = step(i, load(i));
        m[0] = std::max(m[0], std::fabs(v.w));
        m[1] = std::max(m[1], std::fabs(v.s1));
        m[2] = std::max(m[2], std::fabs(v.s2));
      }
      std::copy(m, m + 3, amax + b / kGrain * 3);
    });
    float total[3] = {0, 0, 0};
    for (int64_t c = 0; c < chunks; ++c)
      for (int k = 0; k < 3; ++k) total[k] = std::max(total[k], amax[c * 3 + k]);
    if (scale_w) scales[kOptScaleW] = old[0].next_scale(total[0]);
    for (int k = 1; k <= nstate; ++k) scales[slot[k]] = old[k].next_scale(total[k]);
  }
  ScaledState out[3] = {{views[0], scales[slot[0]]}, {views[1], scales[slot[1]]},
                        {views[nstate == 2 ? 2 : 1], scales[slot[nstate == 2 ? 2 : 1]]}};
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Values v = step(i, load(i));
      out[0].set(i, v.w);
      out[1].set(i, v.s1);
      if (nstate == 2) out[2].set(i, v.s2);
    }
  });
}

}  // namespace

// (param, grad, momentum, lr, train_state, scales, grad_coef)
Status sgd_update(const OpArgs& a) {
  if (a.in[4].i32()[kSkipStep]) return Status::Ok();
  ScaledState g(a.in[1], a.in[5].f()[kOptScaleG]);
  float lr = a.in[3].f()[0], coef = a.in[6].f()[0];
  float mu = static_cast<float>(a.attrs->f("momentum")), wd = static_cast<float>(a.attrs->f("weight_decay"));
  TensorArg views[2] = {a.in[0], a.in[2]};
  apply(a.in[0].n, views, 1, a.in[5].f(), a.attrs->i("scale_w", 0) != 0, [&](int64_t i, Values v) {
    float gi = g.get(i) * coef + wd * v.w;
    v.s1 = mu * v.s1 + gi;
    v.w -= lr * v.s1;
    return v;
  });
  return Status::Ok();
}

// (param, grad, m, v, lr, train_state, scales, grad_coef)
Status adamw_update(const OpArgs& a) {
  if (a.in[5].i32()[kSkipStep]) return Status::Ok();
  const Attrs& at = *a.attrs;
  ScaledState g(a.in[1], a.in[6].f()[kOptScaleG]);
  float lr = a.in[4].f()[0], coef = a.in[7].f()[0];
  int64_t t = a.in[5].i32()[kStep] + 1;
  float b1 = static_cast<float>(at.f("beta1")), b2 = static_cast<float>(at.f("beta2"));
  float eps = static_cast<float>(at.f("eps")), wd = static_cast<float>(at.f("weight_decay"));
  float bc1 = 1.f - std::pow(b1, static_cast<float>(t)), bc2 = 1.f - std::pow(b2, static_cast<float>(t));
  float step = lr / bc1, bc2_sqrt = std::sqrt(bc2), decay = 1.f - lr * wd;
  TensorArg views[3] = {a.in[0], a.in[2], a.in[3]};
  apply(a.in[0].n, views, 2, a.in[6].f(), at.i("scale_w", 0) != 0, [&](int64_t i, Values v) {
    float gi = g.get(i) * coef;
    v.w *= decay;
    v.s1 = b1 * v.s1 + (1.f - b1) * gi;
    v.s2 = b2 * v.s2 + (1.f - b2) * gi * gi;
    v.w -= step * v.s1 / (std::sqrt(v.s2) / bc2_sqrt + eps);
    return v;
  });
  return Status::Ok();
}

// (grad f32, scales) -> (q, scales): current scaling, as quantize's
// current_amax mode but with the scale in the optimizer's scales, where the
// update reads it, and the norm that check_finite adds up for clipping. A
// non-finite gradient keeps the previous scale; its norm flags the step.
Status quantize_grad(const OpArgs& a) {
  const float* g = a.in[0].f();
  float* scales = a.out[1].f();
  int64_t n = a.in[0].n, chunks = (n + kGrain - 1) / kGrain;
  struct Part { float amax; double sumsq; };
  Part* part = static_cast<Part*>(thread_scratch(3, static_cast<size_t>(chunks) * sizeof(Part)));
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    Part p{0, 0};
    for (int64_t i = b; i < e; ++i) {
      p.amax = std::max(p.amax, std::fabs(g[i]));
      p.sumsq += static_cast<double>(g[i]) * g[i];
    }
    part[b / kGrain] = p;
  });
  Part total{0, 0};
  for (int64_t c = 0; c < chunks; ++c) {
    total.amax = std::max(total.amax, part[c].amax);
    total.sumsq += part[c].sumsq;
  }
  ScaledState q(a.out[0], scales[kOptScaleG]);
  scales[kOptScaleG] = std::isfinite(total.sumsq) ? q.next_scale(total.amax) : scales[kOptScaleG];
  scales[kOptGradNorm] = static_cast<float>(std::sqrt(total.sumsq));
  ScaledState out(a.out[0], scales[kOptScaleG]);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out.set(i, g[i]);
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
