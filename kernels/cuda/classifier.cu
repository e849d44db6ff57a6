// Softmax cross-entropy (mean over the batch), its gradient, and accuracy;
// logits [N, C] f32, labels i32[N] (kernels/cpu/classifier.cpp is the definition).
// One thread per row; the per-row losses or hits are summed in double by one block
// in a fixed order. A label outside [0, C) cannot fail the step mid-flight: the
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

// part[r]: the row's loss (lse - z[label]) or hit (argmax == label, first max wins).
template <bool kAccuracy>
__global__ void row_kernel(int64_t n, int64_t c, const float* z, const int32_t* lab, float* part, ErrorRecord* err,
                           int32_t tag) {
  SG_GRID_STRIDE(r, n) {
    const float* zr = z + r * c;
    if (!label_ok(lab, r, c, err, tag)) { part[r] = 0.f; continue; }
    if constexpr (kAccuracy) {
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j) if (zr[j] > zr[best]) best = j;
      part[r] = best == lab[r] ? 1.f : 0.f;
    } else {
      part[r] = row_logsumexp(zr, c) - zr[lab[r]];
    }
  }
}

// out = (sum of part in double) / n, as the CPU: loss total / n in double; accuracy
// float(hits) / float(n).
template <bool kAccuracy>
__global__ void mean_kernel(int64_t n, const float* part, float* out) {
  double s = 0;
  for (int64_t r = threadIdx.x; r < n; r += kThreads) s += part[r];
  s = block_sum(s);
  if (threadIdx.x == 0)
    *out = kAccuracy ? static_cast<float>(s) / static_cast<float>(n) : static_cast<float>(s / static_cast<double>(n));
}

// dz = dloss / N * (softmax(z_r) - onehot(label)).
__global__ void xent_grad_kernel(int64_t n, int64_t c, const float* z, const int32_t* lab, const float* dloss, float* dz,
                                 ErrorRecord* err, int32_t tag) {
  SG_GRID_STRIDE(r, n) {
    const float* zr = z + r * c;
    const bool ok = label_ok(lab, r, c, err, tag);
    const float g = dloss[0] / static_cast<float>(n), lse = row_logsumexp(zr, c);
    for (int64_t j = 0; j < c; ++j) dz[r * c + j] = g * (expf(zr[j] - lse) - (ok && j == lab[r] ? 1.f : 0.f));
  }
}

}  // namespace

Status bind_classifier(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const int64_t n = a.in[0].shape()[0], c = a.in[0].shape()[1];
  const float* z = a.in[0].f();
  const int32_t* lab = a.in[1].i32();
  float* y = a.out[0].f();
  ErrorRecord* err = ctx.errors;
  int32_t tag = ctx.tag;
  unsigned grid = grid_for(n, ctx.dev);
  switch (a.code) {
    case OpCode::SoftmaxXent: case OpCode::Accuracy: {
      float* part = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * n));
      if (a.code == OpCode::Accuracy) {
        *out = [=](cudaStream_t s) {
          row_kernel<true><<<grid, kThreads, 0, s>>>(n, c, z, lab, part, err, tag);
          mean_kernel<true><<<1, kThreads, 0, s>>>(n, part, y);
          return launched("accuracy row_kernel/mean_kernel");
        };
      } else {
        *out = [=](cudaStream_t s) {
          row_kernel<false><<<grid, kThreads, 0, s>>>(n, c, z, lab, part, err, tag);
          mean_kernel<false><<<1, kThreads, 0, s>>>(n, part, y);
          return launched("softmax_cross_entropy row_kernel/mean_kernel");
        };
      }
      return Status::Ok();
    }
    case OpCode::SoftmaxXentGrad: {
      const float* dloss = a.in[2].f();
      *out = [=](cudaStream_t s) {
        xent_grad_kernel<<<grid, kThreads, 0, s>>>(n, c, z, lab, dloss, y, err, tag);
        return launched("xent_grad_kernel");
      };
      return Status::Ok();
    }
    default: return Status::Runtime("cuda classifier binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
