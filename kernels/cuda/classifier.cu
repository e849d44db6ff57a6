// Softmax cross-entropy (mean over the batch), its gradient, and accuracy; the
// masked loss and its gradient (mask f32[N]: a row of mask 0 is never read, its
// gradient row is 0; the mean divides by the mask's sum). logits [N, C] f32,
// labels i32[N] (kernels/cpu/classifier.cpp is the definition).
// Rows of at most kWideRow classes: one thread per row. Longer rows (a language
// model's vocabulary) get a block each: each thread takes columns t, t + 256, ...
// and the row's maximum, exp sum or first argmax comes from a fixed tree over the
// threads (deterministic). The per-row losses or hits are summed in double by one
// block in a fixed order. A label outside [0, C) cannot fail the step mid-flight: the
// kernel records it (common.cuh) and the backend reports it at the next sync/read.
#include "common.cuh"

namespace sgrt::cuda {
namespace {

__device__ float row_logsumexp(const float* z, int64_t c) {
  float m = z[0];
  for (int64_t j = 1; j < c; ++j) m = fmaxf(m, z[j]);
  float s = 0.f;
  for (int64_t j = 0; j < c; ++j) s += expf(z[j] - m);
  return m + logf(s);
}

__device__ bool label_ok(const int32_t* lab, int64_t r, int64_t c, ErrorRecord* err, int32_t tag) {
  if (lab[r] >= 0 && lab[r] < c) return true;
  record_label_error(err, tag, lab[r], r, c);
  return false;
}

constexpr int64_t kWideRow = 1024;  // rows longer than this get a block each

struct MaxIgnoringNan {  // fmaxf: a NaN loses to any number
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ float block_row_logsumexp(const float* z, int64_t c) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += kThreads) m = fmaxf(m, z[j]);
  m = block_reduce(m, MaxIgnoringNan{});
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < c; j += kThreads) s += expf(z[j] - m);
  return m + logf(block_reduce(s, Plus{}));
}

// A thread's best column so far (i < 0: none yet), and the first of equal maxima.
struct Best {
  float v;
  int64_t i;
};
struct FirstMax {
  __device__ Best operator()(Best a, Best b) const {
    return b.i >= 0 && (a.i < 0 || b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
  }
};

// The first column of the row's maximum, as row_kernel's scan `z[j] > z[best]`
// from best = 0: NaNs never win, except a NaN in column 0 (nothing beats it).
__device__ int64_t block_row_argmax(const float* z, int64_t c) {
  Best mine{-INFINITY, -1};
  for (int64_t j = threadIdx.x; j < c; j += kThreads)
    if (!isnan(z[j]) && (mine.i < 0 || z[j] > mine.v)) mine = {z[j], j};
  const Best best = block_reduce(mine, FirstMax{});
  return isnan(z[0]) || best.i < 0 ? 0 : best.i;
}

// Row r's weight: mask[r], or 1 without a mask.
__device__ float row_weight(const float* mask, int64_t r) { return mask ? mask[r] : 1.f; }

// part[r] as row_kernel's, a block per row.
template <bool kAccuracy>
__global__ void wide_row_kernel(int64_t n, int64_t c, const float* z, const int32_t* lab, const float* mask, float* part,
                                ErrorRecord* err, int32_t tag) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float* zr = z + r * c;
    const float w = row_weight(mask, r);
    if (w == 0.f) {  // masked out: not read
      if (threadIdx.x == 0) part[r] = 0.f;
      continue;
    }
    if (lab[r] < 0 || lab[r] >= c) {  // the same in every thread: no one waits at a barrier alone
      if (threadIdx.x == 0) { record_label_error(err, tag, lab[r], r, c); part[r] = 0.f; }
      continue;
    }
    if constexpr (kAccuracy) {
      const int64_t best = block_row_argmax(zr, c);
      if (threadIdx.x == 0) part[r] = best == lab[r] ? 1.f : 0.f;
    } else {
      const float lse = block_row_logsumexp(zr, c);
      if (threadIdx.x == 0) part[r] = w * (lse - zr[lab[r]]);
    }
  }
}

// part[r]: the row's loss w (lse - z[label]) or hit (argmax == label, first max wins).
template <bool kAccuracy>
__global__ void row_kernel(int64_t n, int64_t c, const float* z, const int32_t* lab, const float* mask, float* part,
                           ErrorRecord* err, int32_t tag) {
  SG_GRID_STRIDE(r, n) {
    const float* zr = z + r * c;
    const float w = row_weight(mask, r);
    if (w == 0.f || !label_ok(lab, r, c, err, tag)) { part[r] = 0.f; continue; }
    if constexpr (kAccuracy) {
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j) if (zr[j] > zr[best]) best = j;
      part[r] = best == lab[r] ? 1.f : 0.f;
    } else {
      part[r] = w * (row_logsumexp(zr, c) - zr[lab[r]]);
    }
  }
}

// The rows' total weight in double, in a fixed order: n without a mask.
__device__ double total_weight(int64_t n, const float* mask) {
  if (!mask) return static_cast<double>(n);
  double s = 0;
  for (int64_t r = threadIdx.x; r < n; r += kThreads) s += mask[r];
  return block_sum(s);
}

// out = (sum of part in double) / total weight, as the CPU: loss total / n (or the
// mask's sum) in double; accuracy float(hits) / float(n).
template <bool kAccuracy>
__global__ void mean_kernel(int64_t n, const float* part, const float* mask, float* out) {
  double s = 0;
  for (int64_t r = threadIdx.x; r < n; r += kThreads) s += part[r];
  s = block_sum(s);
  const double w = total_weight(n, mask);
  if (threadIdx.x == 0)
    *out = kAccuracy ? static_cast<float>(s) / static_cast<float>(n) : static_cast<float>(s / w);
}

// g = dloss / (total weight), the gradient's factor, before the rows' kernels.
__global__ void grad_factor_kernel(int64_t n, const float* mask, const float* dloss, float* g) {
  const double w = total_weight(n, mask);
  if (threadIdx.x == 0) *g = dloss[0] / static_cast<float>(w);
}

// dz = g w_r (softmax(z_r) - onehot(label)); a row of weight 0 is 0.
__global__ void xent_grad_kernel(int64_t n, int64_t c, const float* z, const int32_t* lab, const float* mask,
                                 const float* g, float* dz, ErrorRecord* err, int32_t tag) {
  SG_GRID_STRIDE(r, n) {
    const float* zr = z + r * c;
    const float w = row_weight(mask, r);
    if (w == 0.f) {  // masked out: not read
      for (int64_t j = 0; j < c; ++j) dz[r * c + j] = 0.f;
      continue;
    }
    const bool ok = label_ok(lab, r, c, err, tag);
    const float gr = g[0] * w, lse = row_logsumexp(zr, c);
    for (int64_t j = 0; j < c; ++j) dz[r * c + j] = gr * (expf(zr[j] - lse) - (ok && j == lab[r] ? 1.f : 0.f));
  }
}

// xent_grad_kernel's dz, a block per row.
__global__ void wide_xent_grad_kernel(int64_t n, int64_t c, const float* z, const int32_t* lab, const float* mask,
                                      const float* g, float* dz, ErrorRecord* err, int32_t tag) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float* zr = z + r * c;
    const float w = row_weight(mask, r);
    if (w == 0.f) {  // masked out: the same in every thread
      for (int64_t j = threadIdx.x; j < c; j += kThreads) dz[r * c + j] = 0.f;
      continue;
    }
    const bool ok = lab[r] >= 0 && lab[r] < c;
    if (!ok && threadIdx.x == 0) record_label_error(err, tag, lab[r], r, c);
    const float gr = g[0] * w, lse = block_row_logsumexp(zr, c);
    // Each thread rewrites only the columns it read (dz may be z).
    for (int64_t j = threadIdx.x; j < c; j += kThreads)
      dz[r * c + j] = gr * (expf(zr[j] - lse) - (ok && j == lab[r] ? 1.f : 0.f));
  }
}

}  // namespace

Status bind_classifier(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const int64_t n = a.in[0].shape()[0], c = a.in[0].shape()[1];
  const float* z = a.in[0].f();
  const int32_t* lab = a.in[1].i32();
  const bool masked = a.code == OpCode::MaskedXent || a.code == OpCode::MaskedXentGrad;
  const float* mask = masked ? a.in[2].f() : nullptr;
  float* y = a.out[0].f();
  ErrorRecord* err = ctx.errors;
  int32_t tag = ctx.tag;
  const bool wide = c > kWideRow;  // a block per row
  const unsigned grid = wide ? static_cast<unsigned>(std::clamp<int64_t>(n, 1, int64_t{ctx.dev.sms} * 16)) : grid_for(n, ctx.dev);
  switch (a.code) {
    case OpCode::SoftmaxXent: case OpCode::MaskedXent: case OpCode::Accuracy: {
      float* part = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * n));
      if (a.code == OpCode::Accuracy) {
        *out = [=](cudaStream_t s) {
          if (wide) wide_row_kernel<true><<<grid, kThreads, 0, s>>>(n, c, z, lab, nullptr, part, err, tag);
          else row_kernel<true><<<grid, kThreads, 0, s>>>(n, c, z, lab, nullptr, part, err, tag);
          mean_kernel<true><<<1, kThreads, 0, s>>>(n, part, nullptr, y);
          return launched("accuracy row_kernel/mean_kernel");
        };
      } else {
        *out = [=](cudaStream_t s) {
          if (wide) wide_row_kernel<false><<<grid, kThreads, 0, s>>>(n, c, z, lab, mask, part, err, tag);
          else row_kernel<false><<<grid, kThreads, 0, s>>>(n, c, z, lab, mask, part, err, tag);
          mean_kernel<false><<<1, kThreads, 0, s>>>(n, part, mask, y);
          return launched("cross_entropy row_kernel/mean_kernel");
        };
      }
      return Status::Ok();
    }
    case OpCode::SoftmaxXentGrad: case OpCode::MaskedXentGrad: {
      const float* dloss = a.in[masked ? 3 : 2].f();
      float* g = static_cast<float*>(ctx.scratch->reserve(sizeof(float)));
      *out = [=](cudaStream_t s) {
        grad_factor_kernel<<<1, kThreads, 0, s>>>(n, mask, dloss, g);
        if (wide) wide_xent_grad_kernel<<<grid, kThreads, 0, s>>>(n, c, z, lab, mask, g, y, err, tag);
        else xent_grad_kernel<<<grid, kThreads, 0, s>>>(n, c, z, lab, mask, g, y, err, tag);
        return launched("xent_grad_kernel");
      };
      return Status::Ok();
    }
    default: return Status::Runtime("cuda classifier binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
