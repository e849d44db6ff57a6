#include "cuda_status.h"

#include <string>

namespace sgrt::cuda {

Status cuda_status(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  return Status::Runtime(std::string("cuda: ") + call + " failed: " + cudaGetErrorName(e) + " (" +
                         cudaGetErrorString(e) + ")");
}

Status cublas_status(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Runtime(std::string("cublasLt: ") + call + " failed: " + cublasLtGetStatusName(s) + " (" +
                         cublasLtGetStatusString(s) + ")");
}

}  // namespace sgrt::cuda
