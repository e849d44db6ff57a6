// SGD with momentum and AdamW (PyTorch's update order) over parameters and state
// held in f32, f16 or e4m3 with per-tensor power-of-two scales (optimizer_state.h).
//
// Low-precision state takes two passes in one kernel, as MS-AMP's Adam but with no
// f32 copy: the first computes every new state value (and at O3 the parameter's)
// and its amax, the scales for this step follow from those amaxes, and the second
// recomputes the same values (same float operations, so identical) and stores them
// under the new scales. The parameter update itself uses the f32 moments of this
// step; only what is kept for the next step is rounded. Updates with no scale to
// follow (all-f32, and O1: f16 master, f32 moments) take the second pass only.
#include <algorithm>
#include <cmath>

#include "sgrt/quant.h"

#include "cpu/optimizer_state.h"
#include "cpu/optimizer_step.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

// The views an update reads and writes: parameter, first state, second state
// (SGD has none: nstate 1), gradient.
struct Views {
  TensorArg w, s1, s2, g;
  int nstate;
  float* scales;
  bool scale_w;  // O3: the master's scale follows its amax
};

// Elements go through the update in blocks: each view's block is decoded to f32
// (vectorized, cpu/quantize_kernels.h), stepped (cpu/optimizer_step.h), then
// reduced to amaxes or encoded back. Every element sees the same float operations
// as one at a time. 1024: the block's 16 KiB stay in L1, and each block's seven
// kernel calls cost less per element than at 256 (O2's AdamW: 2.3 -> 1.9 ns an
// element).
constexpr int64_t kBlock = 1024;

// One update over every element with the dtypes fixed at compile time; `hyper`
// holds the step's hyperparameters (its pointers and length are set per block).
template <DType W, DType S1, DType S2, DType G>
void apply(int64_t n, const Views& v, const OptimizerStepArgs& hyper) {
  float* sc = v.scales;
  const float inv[3] = {1.f / sc[kOptScaleW], 1.f / sc[kOptScaleM], 1.f / sc[kOptScaleV]}, ginv = 1.f / sc[kOptScaleG];
  struct Block { float x[4][kBlock]; };
  // Block [i0, i0 + k) of a view as f32: an f32 tensor's own elements when it may
  // be updated in place (or is only read), else decoded (or copied) into `buf`.
  auto span = [&](DType d, const TensorArg& t, int64_t i0, int64_t k, float scale_inv, float* buf, bool in_place) {
    if (d == DType::f32 && in_place) return static_cast<float*>(t.data) + i0;
    load_span(d, t.data, i0, k, scale_inv, buf);
    return buf;
  };
  // The new values of block [i0, i0 + k) (parameter, first, second state): in
  // place where f32 and `in_place` (the last pass), else in b.x[0..2], which
  // return. With moments_only the parameter is left as it was, unread when
  // `read_w` is false.
  auto update = [&](int64_t i0, int64_t k, Block& b, bool moments_only, bool read_w, bool in_place) {
    OptimizerStepArgs s = hyper;
    s.moments_only = moments_only;
    s.n = k;
    s.w = read_w ? span(W, v.w, i0, k, inv[0], b.x[0], in_place) : b.x[0];
    s.s1 = span(S1, v.s1, i0, k, inv[1], b.x[1], in_place);
    s.s2 = v.nstate == 2 ? span(S2, v.s2, i0, k, inv[2], b.x[2], in_place) : b.x[2];
    s.g = span(G, v.g, i0, k, ginv, b.x[3], true);  // only read
    optimizer_step(s);
  };
  // The first pass only where a stored scale follows this step's amax (O1's f16
  // master has none, and its f32 moments need no amax).
  if (S1 != DType::f32 || (v.nstate == 2 && S2 != DType::f32) || (W != DType::f32 && v.scale_w)) {
    // AdamW's moments do not read the parameter: unless its own scale follows its
    // amax (O3), this pass neither decodes nor updates it.
    const bool read_w = v.scale_w || !hyper.adamw;
    const quant_impl::Kernels& simd = quant_impl::kernels_for(active_isa());
    int64_t chunks = (n + kGrain - 1) / kGrain;
    float* amax = static_cast<float*>(thread_scratch(3, static_cast<size_t>(chunks) * 3 * sizeof(float)));
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      float m[3] = {0, 0, 0};
      Block blk;
      for (int64_t i0 = b; i0 < e; i0 += kBlock) {
        const int64_t k = std::min(kBlock, e - i0);
        update(i0, k, blk, !v.scale_w, read_w, false);
        for (int s = v.scale_w ? 0 : 1; s < 1 + v.nstate; ++s) m[s] = std::max(m[s], simd.amax(blk.x[s], k));
      }
      std::copy(m, m + 3, amax + b / kGrain * 3);
    });
    float total[3] = {0, 0, 0};
    for (int64_t c = 0; c < chunks; ++c)
      for (int k = 0; k < 3; ++k) total[k] = std::max(total[k], amax[c * 3 + k]);
    if (v.scale_w) sc[kOptScaleW] = next_scale(W, sc[kOptScaleW], total[0]);
    sc[kOptScaleM] = next_scale(S1, sc[kOptScaleM], total[1]);
    if (v.nstate == 2) sc[kOptScaleV] = next_scale(S2, sc[kOptScaleV], total[2]);
  }
  const float out[3] = {sc[kOptScaleW], sc[kOptScaleM], sc[kOptScaleV]};
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    Block blk;
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      const int64_t k = std::min(kBlock, e - i0);
      update(i0, k, blk, false, true, true);
      if (W != DType::f32) store_span(W, v.w.data, i0, k, blk.x[0], out[0]);
      if (S1 != DType::f32) store_span(S1, v.s1.data, i0, k, blk.x[1], out[1]);
      if (v.nstate == 2 && S2 != DType::f32) store_span(S2, v.s2.data, i0, k, blk.x[2], out[2]);
    }
  });
}

// apply<> for the dtypes the state levels use (compiler/optimizer.cpp).
Status dispatch(int64_t n, const Views& v, const OptimizerStepArgs& hyper) {
  using D = DType;
  auto in = [](const TensorArg& t, DType a, DType b) { return t.type->dtype == a || t.type->dtype == b; };
  if (!in(v.w, D::f32, D::f16) || !in(v.s1, D::f32, D::e4m3) || !in(v.s2, D::f32, D::f16) || !in(v.g, D::f32, D::e5m2))
    return Status::Unsupported(std::string("optimizer update: no CPU kernel for parameter ") + dtype_name(v.w.type->dtype) +
                               ", state " + dtype_name(v.s1.type->dtype) + "/" + dtype_name(v.s2.type->dtype) +
                               ", gradient " + dtype_name(v.g.type->dtype));
  with_dtype<D::f32, D::f16>(v.w.type->dtype, [&](auto w) {
    with_dtype<D::f32, D::e4m3>(v.s1.type->dtype, [&](auto s1) {
      with_dtype<D::f32, D::f16>(v.s2.type->dtype, [&](auto s2) {
        with_dtype<D::f32, D::e5m2>(v.g.type->dtype, [&](auto g) { apply<w(), s1(), s2(), g()>(n, v, hyper); });
      });
    });
  });
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
  Views v{a.in[0], a.in[2], TensorArg{nullptr, &kNoState, 0}, a.in[1], 1, a.in[5].f(), a.attrs->i("scale_w", 0) != 0};
  return dispatch(a.in[0].n, v, h);
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
  Views v{a.in[0], a.in[2], a.in[3], a.in[1], 2, a.in[6].f(), at.i("scale_w", 0) != 0};
  return dispatch(a.in[0].n, v, h);
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
