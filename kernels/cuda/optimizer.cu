// Optimizer ops with the train state on the device (kernels/cpu/optimizer.cpp and
// optimizer_update.cpp are the definition): lr schedule, check_finite (global
// norm, skip flag, clip coefficient), SGD / AdamW over f32, f16, e4m3 or e5m2
// parameters, gradients and state behind power-of-two scales, quantize_grad, the
// step counter, and dequantize.
// Every kernel reads the skip flag itself, so a flagged step costs no host sync.
//
// Low-precision updates take the CPU's two passes: pass 1 computes every new value
// and the amaxes, a one-thread kernel sets this step's scales from them, pass 2
// recomputes the same values (same float operations) and stores them under the new
// scales. The scales at the start of the step are kept in scratch for pass 2's loads.
#include <cmath>

#include "common.cuh"
#include "scale.cuh"
#include "sgrt/quant.h"

namespace sgrt::cuda {
namespace {

// ---- lr_schedule, step_increment -------------------------------------------------

struct LrParams {
  float lr;
  int64_t warmup, schedule;
  double min_ratio;
};

__global__ void lr_kernel(LrParams p, const int32_t* ts, float* out) {
  const int64_t step = ts[kStep], total = ts[kTotalSteps];
  if (p.warmup > 0 && step < p.warmup) {
    *out = p.lr * static_cast<float>(step + 1) / static_cast<float>(p.warmup);
  } else if (p.schedule == 0) {
    *out = p.lr;  // constant
  } else {
    double span = static_cast<double>(total - p.warmup > 1 ? total - p.warmup : 1);
    double progress = fmin(1.0, static_cast<double>(step - p.warmup) / span);
    *out = static_cast<float>(p.lr * (p.min_ratio + (1.0 - p.min_ratio) * 0.5 * (1.0 + cos(M_PI * progress))));
  }
}

__global__ void step_kernel(int32_t* ts) { ts[kStep] += 1; }

// ---- check_finite ----------------------------------------------------------------

// Up to kBatch gradients per launch (the LoRA step has 420; a launch each cost
// more than their sums): gradient j owns blocks first[j] .. first[j + 1] - 1 of
// the launch and the same entries of part. Passed by value: 2.6 KB of the
// 4 KB a kernel's parameters may take everywhere.
struct GradBatch {
  static constexpr int kBatch = 128;
  const float* g[kBatch];  // gradients, or with attr norms their optimizer scales
  int64_t n[kBatch];
  unsigned first[kBatch + 1];
  int count = 0;
};

// part[block] = this block's sum of g^2 in double, the grid stride being the
// gradient's own blocks (a gradient's sums are those of a launch of its own).
__global__ void sumsq_kernel(GradBatch b, double* part) {
  int j = 0;
  while (j + 1 < b.count && b.first[j + 1] <= blockIdx.x) ++j;
  const int64_t block = blockIdx.x - b.first[j], stride = static_cast<int64_t>(b.first[j + 1] - b.first[j]) * blockDim.x;
  const float* g = b.g[j];
  double s = 0;
  for (int64_t i = block * blockDim.x + threadIdx.x; i < b.n[j]; i += stride) s += static_cast<double>(g[i]) * g[i];
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// part[j] = norm^2 from quantize_grad's norm (scales[kOptGradNorm]), in double as the CPU.
__global__ void norm_kernel(GradBatch b, double* part) {
  if (static_cast<int>(threadIdx.x) >= b.count) return;
  const double norm = b.g[threadIdx.x][kOptGradNorm];
  part[threadIdx.x] = norm * norm;
}

// The squares' sum is finite exactly when every gradient is. Clipping as
// torch.nn.utils.clip_grad_norm_: g *= min(1, clip / (norm + 1e-6)).
__global__ void finite_kernel(int64_t nparts, const double* part, double clip, int32_t* ts, float* coef) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < nparts; i += kThreads) s += part[i];
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  const bool finite = isfinite(s);
  ts[kSkipStep] = !finite;
  ts[kNonfiniteRun] = finite ? 0 : ts[kNonfiniteRun] + 1;
  ts[kNonfiniteTotal] += !finite;
  const double norm = sqrt(s);
  *coef = finite && clip > 0 ? static_cast<float>(fmin(1.0, clip / (norm + 1e-6))) : 1.f;
}

// (train_state, grads...) or, with attr norms, (train_state, optimizer scales...)
// whose kOptGradNorm slots quantize_grad filled.
Status bind_check_finite(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const bool norms = a.attrs->i("norms", 0) != 0;
  std::vector<GradBatch> batches;
  int64_t nparts = 0;
  for (size_t k = 1; k < a.in.size(); ++k) {
    if (batches.empty() || batches.back().count == GradBatch::kBatch) batches.emplace_back();  // zeroed
    GradBatch& b = batches.back();
    const unsigned blocks = norms ? 1 : grid_for(a.in[k].n, ctx.dev);
    b.g[b.count] = a.in[k].f();
    b.n[b.count] = a.in[k].n;
    b.first[b.count + 1] = b.first[b.count] + blocks;
    ++b.count;
    nparts += blocks;
  }
  double* part = static_cast<double*>(ctx.scratch->reserve(sizeof(double) * (nparts ? nparts : 1)));
  double clip = a.attrs->f("clip", 0.0);
  int32_t* ts = a.out[0].i32();
  float* coef = a.out[1].f();
  *out = [=](cudaStream_t s) {
    double* p = part;
    for (const GradBatch& b : batches) {
      if (norms) norm_kernel<<<1, GradBatch::kBatch, 0, s>>>(b, p);
      else sumsq_kernel<<<b.first[b.count], kThreads, 0, s>>>(b, p);
      p += b.first[b.count];
    }
    finite_kernel<<<1, kThreads, 0, s>>>(nparts, part, clip, ts, coef);
    return launched("check_finite kernels");
  };
  return Status::Ok();
}

// ---- sgd_update, adamw_update, dequantize ----------------------------------------

struct View {
  void* p;
  DType t;
};

__device__ inline float load(View v, int64_t i, float scale) {
  const float inv = 1.f / scale;
  switch (v.t) {
    case DType::f16: return fmt::f16_decode(static_cast<const uint16_t*>(v.p)[i]) * inv;
    case DType::e4m3: return fmt::e4m3_decode(static_cast<const uint8_t*>(v.p)[i]) * inv;
    case DType::e5m2: return fmt::e5m2_decode(static_cast<const uint8_t*>(v.p)[i]) * inv;
    default: return static_cast<const float*>(v.p)[i];
  }
}

__device__ inline void store(View v, int64_t i, float x, float scale) {
  switch (v.t) {
    case DType::f16: static_cast<uint16_t*>(v.p)[i] = fmt::f16_encode(x * scale); break;
    case DType::e4m3: static_cast<uint8_t*>(v.p)[i] = fmt::e4m3_encode(x * scale); break;
    case DType::e5m2: static_cast<uint8_t*>(v.p)[i] = fmt::e5m2_encode(x * scale); break;
    default: static_cast<float*>(v.p)[i] = x;
  }
}

// The scale that puts `amax` just under the format's largest value; f32 state: 1.
__device__ inline float next_scale(DType t, float scale, float amax) {
  if (t == DType::f32) return 1.f;
  bool kept;
  return fmt::exp2i(scale_exponent(amax, format_max(t), 0, ilogbf(scale), &kept));
}

struct Update {
  int64_t n;
  View v[3];  // parameter, state 1 (momentum / m), state 2 (v; AdamW only)
  int nstate;
  View g;  // the gradient, f32 or e5m2 under scales[kOptScaleG]
  const float* lr;
  const float* coef;
  const int32_t* ts;
  float* scales;  // f32[kOptScaleLen], updated in place
  float* old;     // scratch: the scales at the start of the step
  unsigned* amax; // scratch: |max| bits of the new values, per view
  float mu, wd, b1, b2, eps;
  bool scale_w;
};

// Which OptScaleSlot view k's scale lives in.
__device__ inline int slot(int k) { return k == 0 ? kOptScaleW : k == 1 ? kOptScaleM : kOptScaleV; }

struct Values { float x[3]; };

// The new values of element i from the old ones (PyTorch's update order).
template <OpCode C>
__device__ Values step_values(const Update& u, int64_t i, Values v) {
  const float lr = *u.lr, gi0 = load(u.g, i, u.scales[kOptScaleG]) * *u.coef;
  if constexpr (C == OpCode::SgdUpdate) {
    float gi = gi0 + u.wd * v.x[0];
    v.x[1] = u.mu * v.x[1] + gi;
    v.x[0] -= lr * v.x[1];
  } else {
    const float t = static_cast<float>(u.ts[kStep] + 1);
    const float bc1 = 1.f - powf(u.b1, t), bc2 = 1.f - powf(u.b2, t);
    const float step = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.f - lr * u.wd;
    v.x[0] *= decay;
    v.x[1] = u.b1 * v.x[1] + (1.f - u.b1) * gi0;
    v.x[2] = u.b2 * v.x[2] + (1.f - u.b2) * gi0 * gi0;
    v.x[0] -= step * v.x[1] / (sqrtf(v.x[2]) / bc2_sqrt + u.eps);
  }
  return v;
}

template <OpCode C>
__device__ Values old_values(const Update& u, int64_t i, const float* scales) {
  Values v{{0.f, 0.f, 0.f}};
  for (int k = 0; k <= u.nstate; ++k) v.x[k] = load(u.v[k], i, scales[slot(k)]);
  return step_values<C>(u, i, v);
}

__global__ void begin_kernel(Update u) {
  if (u.ts[kSkipStep]) return;
  for (int k = 0; k < kOptScaleLen; ++k) u.old[k] = u.scales[k];
  for (int k = 0; k < 3; ++k) u.amax[k] = 0u;
}

template <OpCode C>
__global__ void amax_kernel(Update u) {
  if (u.ts[kSkipStep]) return;
  float m[3] = {0.f, 0.f, 0.f};
  SG_GRID_STRIDE(i, u.n) {
    Values v = old_values<C>(u, i, u.old);
    for (int k = 0; k < 3; ++k) m[k] = fmaxf(m[k], fabsf(v.x[k]));  // fmaxf skips NaN, as std::max on the CPU
  }
  for (int k = 0; k < 3; ++k) atomicMax(&u.amax[k], __float_as_uint(m[k]));
}

__global__ void scales_kernel(Update u) {
  if (u.ts[kSkipStep]) return;
  if (u.scale_w) u.scales[kOptScaleW] = next_scale(u.v[0].t, u.old[kOptScaleW], __uint_as_float(u.amax[0]));
  for (int k = 1; k <= u.nstate; ++k)
    u.scales[slot(k)] = next_scale(u.v[k].t, u.old[slot(k)], __uint_as_float(u.amax[k]));
}

// Loads under the step's starting scales (`old`), stores under the new ones.
template <OpCode C>
__global__ void store_kernel(Update u, const float* old) {
  if (u.ts[kSkipStep]) return;
  SG_GRID_STRIDE(i, u.n) {
    Values v = old_values<C>(u, i, old);
    for (int k = 0; k <= u.nstate; ++k) store(u.v[k], i, v.x[k], u.scales[slot(k)]);
  }
}

template <OpCode C>
Status bind_update(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const Attrs& at = *a.attrs;
  const int nstate = C == OpCode::SgdUpdate ? 1 : 2;
  // (param, grad, state..., lr, train_state, scales, grad_coef)
  Update u{};
  u.n = a.in[0].n;
  u.nstate = nstate;
  u.v[0] = {a.in[0].p, a.in[0].dtype()};
  for (int k = 1; k <= nstate; ++k) u.v[k] = {a.in[1 + k].p, a.in[1 + k].dtype()};
  u.g = {a.in[1].p, a.in[1].dtype()};
  u.lr = a.in[nstate + 2].f();
  u.ts = a.in[nstate + 3].i32();
  u.scales = a.in[nstate + 4].f();
  u.coef = a.in[nstate + 5].f();
  u.mu = static_cast<float>(at.f("momentum"));
  u.wd = static_cast<float>(at.f("weight_decay"));
  u.b1 = static_cast<float>(at.f("beta1"));
  u.b2 = static_cast<float>(at.f("beta2"));
  u.eps = static_cast<float>(at.f("eps"));
  u.scale_w = at.i("scale_w", 0) != 0;
  bool lowp = false;
  for (int k = 0; k <= nstate; ++k) lowp = lowp || u.v[k].t != DType::f32;
  u.old = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * kOptScaleLen));
  u.amax = static_cast<unsigned*>(ctx.scratch->reserve(sizeof(unsigned) * 3));
  unsigned grid = grid_for(u.n, ctx.dev);
  *out = [=](cudaStream_t s) {
    if (lowp) {
      begin_kernel<<<1, 1, 0, s>>>(u);
      amax_kernel<C><<<grid, kThreads, 0, s>>>(u);
      scales_kernel<<<1, 1, 0, s>>>(u);
      store_kernel<C><<<grid, kThreads, 0, s>>>(u, u.old);
    } else {
      store_kernel<C><<<grid, kThreads, 0, s>>>(u, u.scales);  // f32: scales unused and unchanged
    }
    return launched("optimizer update kernels");
  };
  return Status::Ok();
}

// quantize_grad: current per-tensor scale in scales[kOptScaleG] (kept when the
// gradient is not finite) and its L2 norm in scales[kOptGradNorm] for check_finite.
__global__ void grad_stats_kernel(int64_t n, const float* g, double* part, unsigned* amax) {
  double s = 0;
  float m = 0.f;
  SG_GRID_STRIDE(i, n) {
    s += static_cast<double>(g[i]) * g[i];
    m = fmaxf(m, fabsf(g[i]));  // std::max on the CPU: NaN does not stick (the norm flags it)
  }
  atomicMax(amax, __float_as_uint(m));
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void grad_scale_kernel(int64_t nparts, const double* part, const unsigned* amax, DType t, float* scales) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < nparts; i += kThreads) s += part[i];
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  if (isfinite(s)) scales[kOptScaleG] = next_scale(t, scales[kOptScaleG], __uint_as_float(*amax));
  scales[kOptGradNorm] = static_cast<float>(sqrt(s));
}

__global__ void grad_store_kernel(int64_t n, const float* g, View q, const float* scales) {
  const float scale = scales[kOptScaleG];
  SG_GRID_STRIDE(i, n) store(q, i, g[i], scale);
}

Status bind_quantize_grad(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const float* g = a.in[0].f();
  const int64_t n = a.in[0].n;
  View q{a.out[0].p, a.out[0].dtype()};
  float* scales = a.out[1].f();
  const unsigned grid = grid_for(n, ctx.dev);
  double* part = static_cast<double*>(ctx.scratch->reserve(sizeof(double) * grid));
  unsigned* amax = static_cast<unsigned*>(ctx.scratch->reserve(sizeof(unsigned)));
  *out = [=](cudaStream_t s) {
    SG_CUDA(cudaMemsetAsync(amax, 0, sizeof(unsigned), s));
    grad_stats_kernel<<<grid, kThreads, 0, s>>>(n, g, part, amax);
    grad_scale_kernel<<<1, kThreads, 0, s>>>(grid, part, amax, q.t, scales);
    grad_store_kernel<<<grid, kThreads, 0, s>>>(n, g, q, scales);
    return launched("quantize_grad kernels");
  };
  return Status::Ok();
}

__global__ void dequantize_kernel(int64_t n, View q, const float* scales, int slot, float* y) {
  const float scale = scales[slot];
  SG_GRID_STRIDE(i, n) y[i] = load(q, i, scale);
}

}  // namespace

Status bind_optimizer(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const Attrs& at = *a.attrs;
  switch (a.code) {
    case OpCode::LrSchedule: {
      LrParams p{static_cast<float>(at.f("lr")), at.i("warmup"), at.i("schedule"), at.f("min_lr_ratio")};
      const int32_t* ts = a.in[0].i32();
      float* y = a.out[0].f();
      *out = [=](cudaStream_t s) {
        lr_kernel<<<1, 1, 0, s>>>(p, ts, y);
        return launched("lr_kernel");
      };
      return Status::Ok();
    }
    case OpCode::StepIncrement: {
      int32_t* ts = a.out[0].i32();
      *out = [=](cudaStream_t s) {
        step_kernel<<<1, 1, 0, s>>>(ts);
        return launched("step_kernel");
      };
      return Status::Ok();
    }
    case OpCode::CheckFinite: return bind_check_finite(a, ctx, out);
    case OpCode::SgdUpdate: return bind_update<OpCode::SgdUpdate>(a, ctx, out);
    case OpCode::AdamwUpdate: return bind_update<OpCode::AdamwUpdate>(a, ctx, out);
    case OpCode::QuantizeGrad: return bind_quantize_grad(a, ctx, out);
    case OpCode::Dequantize: {
      View q{a.in[0].p, a.in[0].dtype()};
      const float* scales = a.in[1].f();
      int which = static_cast<int>(at.i("slot"));
      float* y = a.out[0].f();
      int64_t n = a.in[0].n;
      unsigned grid = grid_for(n, ctx.dev);
      *out = [=](cudaStream_t s) {
        dequantize_kernel<<<grid, kThreads, 0, s>>>(n, q, scales, which, y);
        return launched("dequantize_kernel");
      };
      return Status::Ok();
    }
    default: return Status::Runtime("cuda optimizer binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
