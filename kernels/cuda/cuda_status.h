// CUDA runtime and cuBLASLt results as Status values naming the failed call.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "sgrt/status.h"

namespace sgrt::cuda {

Status cuda_status(cudaError_t e, const char* call);
Status cublas_status(cublasStatus_t s, const char* call);

}  // namespace sgrt::cuda

// Return early with a Status that names the call's source text.
#define SG_CUDA(call) SG_TRY(::sgrt::cuda::cuda_status((call), #call))
#define SG_CUBLAS(call) SG_TRY(::sgrt::cuda::cublas_status((call), #call))
