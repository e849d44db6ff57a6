// clamp_outliers: per row, clamp to the [1 - alpha, alpha] quantiles and emit the
// residual x - clamp(x) (kernels/cpu/fp4_ops.cpp is the definition). One block per
// row bitonic-sorts a copy of the row in shared memory (padded with +inf to a power
// of two) and reads the two order statistics the CPU's nth_element picks, so the
// thresholds agree exactly.
// Limit: the padded row must fit the block's shared memory (227 KiB on Hopper:
// rows up to 32768 elements; 48 KiB without opt-in); longer rows fail at prepare.
#include <cmath>

#include "common.cuh"

namespace sgrt::cuda {
namespace {

__global__ void clamp_kernel(int64_t rows, int64_t cols, int64_t padded, int64_t lo_k, int64_t hi_k, const float* x,
                             float* xc, float* res) {
  extern __shared__ float s[];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) s[i] = i < cols ? xr[i] : INFINITY;
    __syncthreads();
    for (int64_t k = 2; k <= padded; k <<= 1)
      for (int64_t j = k >> 1; j > 0; j >>= 1) {
        for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
          const int64_t p = i ^ j;
          if (p > i) {
            const bool ascending = (i & k) == 0;
            const float a = s[i], b = s[p];
            if (ascending ? a > b : a < b) { s[i] = b; s[p] = a; }
          }
        }
        __syncthreads();
      }
    const float lo = s[lo_k], hi = s[hi_k];
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = fminf(fmaxf(xr[c], lo), hi);
      xc[r * cols + c] = v;
      res[r * cols + c] = xr[c] - v;
    }
    __syncthreads();  // s is refilled for the next row
  }
}

}  // namespace

Status bind_clamp_outliers(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const int64_t cols = a.in[0].shape().back(), rows = a.in[0].n / cols;
  const double alpha = a.attrs->f("alpha");
  const int64_t hi_k = static_cast<int64_t>(std::floor(alpha * static_cast<double>(cols - 1))), lo_k = cols - 1 - hi_k;
  int64_t padded = 1;
  while (padded < cols) padded <<= 1;
  const size_t smem = sizeof(float) * padded;
  if (smem > ctx.dev.smem_optin)
    return Status::Unsupported("rows of " + std::to_string(cols) + " elements exceed the " +
                               std::to_string(ctx.dev.smem_optin / sizeof(float)) +
                               " a block can sort in shared memory");
  if (smem > 48 * 1024)
    SG_CUDA(cudaFuncSetAttribute(clamp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const float* x = a.in[0].f();
  float* xc = a.out[0].f();
  float* res = a.out[1].f();
  const unsigned grid = static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{ctx.dev.sms} * 4));
  *out = [=](cudaStream_t s) {
    clamp_kernel<<<grid, kThreads, smem, s>>>(rows, cols, padded, lo_k, hi_k, x, xc, res);
    return launched("clamp_kernel");
  };
  return Status::Ok();
}

}  // namespace sgrt::cuda
