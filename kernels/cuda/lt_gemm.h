// A cuBLASLt GEMM, planned once (descriptors, layouts, algorithm) and run many times,
// in the row-major terms of matmul:
//
//   C[M,N] (f32) = op(A)[M,K] @ op(B)[K,N]      FP32 accumulation
//
// A is stored [M,K] ([K,M] when trans_a), B [K,N] ([N,K] when trans_b), leading
// dimensions in elements. cuBLASLt is column-major, so it computes C^T = op(B)^T op(A)^T:
// its "A" is our B and its "B" our A. FP8 kernels need its TN form, that is
// trans_b && !trans_a here (both operands K-major), and K, lda, ldb multiples of 16.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "sgrt/status.h"

namespace sgrt::cuda {

// How many heuristic candidates plan() asks cuBLASLt for by default, and so how
// many plan_fastest() times.
constexpr int kLtCandidates = 8;

struct GemmSpec {
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t type_a = CUDA_R_32F, type_b = CUDA_R_32F;  // 32F (no TF32), 16BF, 16F, 8F_E4M3, 8F_E5M2
  cudaDataType_t type_c = CUDA_R_32F;  // the output: 32F (sgrt's tensors); 16BF where a benchmark asks
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // FP8 only: multipliers in device memory (nullptr: 1), per tensor (SCALAR_32F)
  // or cuBLASLt's blockwise FP8 (sm_90): FP32 scales per 128-element K chunk of a
  // row (VEC128_32F) or per 128x128 block (BLK128x128_32F), in the layouts of
  // cuBLAS's documentation ("Scaling factors layouts") for our A and B.
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  cublasLtMatmulMatrixScale_t scale_mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  cublasLtMatmulMatrixScale_t scale_mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  bool fast_accum = false;  // FP8: accumulate in the tensor core's own precision (faster, less exact)
  // Addresses the GEMM will use (for the algorithm's alignment requirements).
  uintptr_t addr_a = 0, addr_b = 0, addr_c = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int algo_rank = 0;  // which of cuBLASLt's heuristic candidates, best first (benchmarks try several)
  // How many candidates to ask the heuristic for (at least algo_rank + 1): a
  // benchmark walking the ranks asks for the same list each time.
  int candidates = kLtCandidates;
};

// cuBLASLt's recommended workspace on Hopper; plenty for the others.
constexpr size_t kLtWorkspaceBytes = 32u << 20;

class LtGemm {
 public:
  ~LtGemm();
  // Fails (Unsupported) when cuBLASLt has no algorithm for the spec on this device.
  static Status plan(cublasLtHandle_t lt, const GemmSpec& spec, std::unique_ptr<LtGemm>* out);
  // plan() with the fastest of cuBLASLt's heuristic candidates (spec.algo_rank is
  // ignored), timed once per distinct GEMM in the process and then cached. The
  // spec's addresses must be live: A, B, scales and workspace are read, C is
  // written only in a temporary buffer, so no tensor changes. The first candidate
  // stays unless another is 2% faster or it fails to run. `log`: one line on
  // stderr per tuned GEMM.
  static Status plan_fastest(cublasLtHandle_t lt, const GemmSpec& spec, bool log, std::unique_ptr<LtGemm>* out);
  Status run(const void* a, const void* b, void* c, cudaStream_t stream) const;
  // The planned algorithm's configuration, as cuBLASLt's ALGO_CONFIG attributes
  // number it: "algo 66 tile 20 stages 34 cluster 2 split-k 1 swizzle 0 custom 0".
  std::string config() const;

 private:
  LtGemm() = default;
  cublasLtHandle_t lt_ = nullptr;
  GemmSpec spec_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  int candidates_ = 0;  // how many algorithms the heuristic offered
};

}  // namespace sgrt::cuda
