// SGD with momentum and AdamW (PyTorch's update order) over parameters and state
// held in f32, f16 or e4m3 with per-tensor power-of-two scales (optimizer_state.h).
//
// Low-precision state takes two passes, as MS-AMP's Adam but with no f32 copy: the
// first computes every new state value (and at O3 the parameter's) and keeps only
// their amaxes, the scales for this step follow from those, and the second
// recomputes the same values (same float operations, so identical) and stores them
// under the new scales. The parameter update itself uses the f32 moments of this
// step; only what is kept for the next step is rounded. Updates with no scale to
// follow (all-f32, and O1: f16 master, f32 moments) take the second pass only.
// Each pass is one loop of cpu/optimizer_step.h over the tensors: decode, step and
// encode a vector of elements at a time in registers.
#include <algorithm>
#include <bit>
#include <cmath>

#include "sgrt/quant.h"

#include "cpu/optimizer_state.h"
#include "cpu/optimizer_step.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

// The update of parameter w with its first and second state (AdamW's m and v; SGD
// has no second) from gradient g; `sc` holds their scales (OptScaleSlot).
Status apply(int64_t n, const TensorArg& w, const TensorArg& s1, const TensorArg& s2, const TensorArg& g, float* sc,
             OptimizerStepArgs a) {
  a.wt = w.type->dtype, a.s1t = s1.type->dtype, a.s2t = s2.type->dtype, a.gt = g.type->dtype;
  if (!optimizer_step_supports(a.wt, a.s1t, a.s2t, a.gt, a.adamw))
    return Status::Unsupported(std::string("optimizer update: no CPU kernel for parameter ") + dtype_name(a.wt) +
                               ", state " + dtype_name(a.s1t) + "/" + dtype_name(a.s2t) + ", gradient " + dtype_name(a.gt));
  a.w = w.data, a.s1 = s1.data, a.s2 = s2.data, a.g = g.data;
  a.inv[0] = 1.f / sc[kOptScaleW], a.inv[1] = 1.f / sc[kOptScaleM], a.inv[2] = 1.f / sc[kOptScaleV];
  a.inv[3] = 1.f / sc[kOptScaleG];
  // The first pass only where a stored scale follows this step's amax (O1's f16
  // master has none, and its f32 moments need no amax).
  if (a.s1t != DType::f32 || (a.adamw && a.s2t != DType::f32) || (a.wt != DType::f32 && a.scale_w)) {
    a.store = false;
    const int64_t chunks = (n + kGrain - 1) / kGrain;
    uint32_t* amax = static_cast<uint32_t*>(thread_scratch(3, static_cast<size_t>(chunks) * 3 * sizeof(uint32_t)));
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) { optimizer_step(a, b, e, amax + b / kGrain * 3); });
    // As float bits: a NaN amax (above every number) keeps the scale.
    uint32_t total[3] = {0, 0, 0};
    for (int64_t c = 0; c < chunks; ++c)
      for (int k = 0; k < 3; ++k) total[k] = std::max(total[k], amax[c * 3 + k]);
    auto value = [](uint32_t bits) { return std::bit_cast<float>(bits); };
    if (a.scale_w) sc[kOptScaleW] = next_scale(a.wt, sc[kOptScaleW], value(total[0]));
    sc[kOptScaleM] = next_scale(a.s1t, sc[kOptScaleM], value(total[1]));
    if (a.adamw) sc[kOptScaleV] = next_scale(a.s2t, sc[kOptScaleV], value(total[2]));
  }
  a.store = true;
  a.scale[0] = sc[kOptScaleW], a.scale[1] = sc[kOptScaleM], a.scale[2] = sc[kOptScaleV];
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { optimizer_step(a, b, e, nullptr); });
  return Status::Ok();
}

// SGD's missing second state.
const TensorType kNoState{{}, DType::f32};

}  // namespace

// (param, grad, momentum, lr, train_state, scales, grad_coef)
Status sgd_update(const OpArgs& a) {
  if (a.in[4].i32()[kSkipStep]) return Status::Ok();
  OptimizerStepArgs h{};
  h.lr = a.in[3].f()[0], h.coef = a.in[6].f()[0];
  h.mu = static_cast<float>(a.attrs->f("momentum")), h.wd = static_cast<float>(a.attrs->f("weight_decay"));
  h.scale_w = a.attrs->i("scale_w", 0) != 0;
  return apply(a.in[0].n, a.in[0], a.in[2], TensorArg{nullptr, &kNoState, 0}, a.in[1], a.in[5].f(), h);
}

// (param, grad, m, v, lr, train_state, scales, grad_coef)
Status adamw_update(const OpArgs& a) {
  if (a.in[5].i32()[kSkipStep]) return Status::Ok();
  const Attrs& at = *a.attrs;
  float lr = a.in[4].f()[0];
  int64_t t = a.in[5].i32()[kStep] + 1;
  OptimizerStepArgs h{};
  h.adamw = true;
  h.coef = a.in[7].f()[0];
  h.b1 = static_cast<float>(at.f("beta1")), h.b2 = static_cast<float>(at.f("beta2"));
  h.eps = static_cast<float>(at.f("eps"));
  float wd = static_cast<float>(at.f("weight_decay"));
  float bc1 = 1.f - std::pow(h.b1, static_cast<float>(t)), bc2 = 1.f - std::pow(h.b2, static_cast<float>(t));
  h.step = lr / bc1, h.bc2_sqrt = std::sqrt(bc2), h.decay = 1.f - lr * wd;
  h.scale_w = at.i("scale_w", 0) != 0;
  return apply(a.in[0].n, a.in[0], a.in[2], a.in[3], a.in[1], a.in[6].f(), h);
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
  const quant_impl::Kernels& simd = quant_impl::kernels_for(active_isa());
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    // Lane-wise partial sums, added in lane order at the end: independent adds
    // instead of one chain through every element (its latency was the op's time).
    // A loop of its own, apart from the amax, so that it vectorizes. The amax of
    // a gradient with a NaN or an infinity is not used (the sum is not finite).
    constexpr int kLanes = 16;
    double sumsq[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (int l = 0; l < kLanes; ++l) sumsq[l] += static_cast<double>(g[i + l]) * g[i + l];
    for (int l = 0; i < e; ++i, ++l) sumsq[l] += static_cast<double>(g[i]) * g[i];
    Part p{simd.amax(g + b, e - b), 0};
    for (int l = 0; l < kLanes; ++l) p.sumsq += sumsq[l];
    part[b / kGrain] = p;
  });
  Part total{0, 0};
  for (int64_t c = 0; c < chunks; ++c) {
    total.amax = std::max(total.amax, part[c].amax);
    total.sumsq += part[c].sumsq;
  }
  const DType qt = a.out[0].type->dtype;
  if (std::isfinite(total.sumsq)) scales[kOptScaleG] = next_scale(qt, scales[kOptScaleG], total.amax);
  scales[kOptGradNorm] = static_cast<float>(std::sqrt(total.sumsq));
  const float scale = scales[kOptScaleG];
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) { store_span(qt, a.out[0].data, b, e - b, g + b, scale); });
  return Status::Ok();
}

}  // namespace sgrt::cpu
