// Shared by the CUDA kernel families: launch shapes, launch checks, deterministic
// block reductions. Reductions whose result must not depend on scheduling add
// per-block partials in a fixed tree order; maxima of |x| may use atomics (max is
// order-independent).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include "bind.h"
#include "cuda_status.h"

namespace sgrt::cuda {

constexpr int kThreads = 256;  // the kernels' blocks, but for kSerialThreads ones
// Blocks of kernels whose threads each run a long in-order sum (a sum_to that is
// not a column sum): a few hundred of them spread over that many multiprocessors.
constexpr int kSerialThreads = 32;
constexpr int kMaxRank = 8;    // layout kernels pass shapes by value

// Blocks of `threads` for a grid-stride loop over n items: enough to fill the
// device, no more.
inline unsigned grid_for(int64_t n, const Device& d, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads, cap = int64_t{d.sms} * 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, cap)));
}

// After a <<<...>>> launch: its configuration error, naming the kernel.
inline Status launched(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

#define SG_GRID_STRIDE(i, n)                                                               \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Non-negative floats order like their bit patterns, and |NaN| lies above inf: an
// atomicMax on the bits is a max of |x| that keeps NaN (as the CPU's nan_max).
__device__ inline void atomic_max_abs(unsigned* bits, float x) { atomicMax(bits, __float_as_uint(fabsf(x))); }

// One value per thread of a kThreads block combined by op(a, b) in a fixed tree
// order, so a reduction gives the same bits every run. Every thread of the block
// must call it; every thread gets the result.
template <class T, class Op>
__device__ inline T block_reduce(T v, Op op) {
  __shared__ T s[kThreads];
  __syncthreads();  // a previous call's readers are done with s
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) s[threadIdx.x] = op(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  return s[0];
}

struct Plus {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

__device__ inline double block_sum(double v) { return block_reduce(v, Plus{}); }

// Records the first out-of-range label of a step (reported by the backend at sync).
__device__ inline void record_label_error(ErrorRecord* e, int32_t tag, int32_t label, int64_t row, int64_t classes) {
  if (atomicCAS(&e->flag, 0, 1) == 0) {
    e->tag = tag;
    e->label = label;
    e->row = static_cast<int32_t>(row);
    e->classes = static_cast<int32_t>(classes);
  }
}

}  // namespace sgrt::cuda
