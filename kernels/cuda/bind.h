// How the CUDA backend turns an op into launches. At prepare, a binder (one per
// kernel family, in kernels/cuda/<family>.cu) checks the op, reserves the scratch
// it needs and returns a Launch: a closure over device pointers that enqueues the
// op's kernels on the stream. run() only calls Launches: no allocation, no sync.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lt_gemm.h"
#include "sgrt/kernel_table.h"
#include "sgrt/status.h"
#include "sgrt/tensor_info.h"

namespace sgrt::cuda {

struct Tensor {
  void* p = nullptr;  // device address in the arena
  const TensorType* type = nullptr;
  int64_t n = 0;  // element count
  float* f() const { return static_cast<float*>(p); }
  int32_t* i32() const { return static_cast<int32_t*>(p); }
  const Shape& shape() const { return type->shape; }
  DType dtype() const { return type->dtype; }
};

struct OpArgs {
  OpCode code;
  const Attrs* attrs = nullptr;
  std::vector<Tensor> in, out;
  const ScaleSpec* quant = nullptr;  // quantize and qmatmul: OpInfoLoaded::quant
};

struct Device {
  int cc = 0;  // compute capability, major * 10 + minor
  int sms = 0;
  size_t smem_optin = 0;  // largest dynamic shared memory a block may opt into
  bool fp8() const { return cc >= 89; }  // FP8 tensor cores: Ada, Hopper, Blackwell
};

// The first bad label a classifier kernel saw; flag 0 = none. Kernels cannot fail
// mid-step, so they record it here and the backend reports it at the next sync or read.
struct ErrorRecord {
  int32_t flag, tag, label, row, classes;
};

// Scratch an op uses only while it runs. Ops run one after another on one stream,
// so all ops share one region whose size is the largest any op reserves.
class Scratch {
 public:
  explicit Scratch(uintptr_t base) : base_(base) {}
  void begin_op() { used_ = 0; }
  // A 256-byte aligned region of `bytes` for the op being bound.
  void* reserve(size_t bytes) {
    size_t off = used_;
    used_ += (bytes + 255) / 256 * 256;
    if (used_ > peak_) peak_ = used_;
    return reinterpret_cast<void*>(base_ + off);
  }
  size_t peak() const { return peak_; }

 private:
  uintptr_t base_;
  size_t used_ = 0, peak_ = 0;
};

struct BindCtx {
  Device dev;
  cublasLtHandle_t lt = nullptr;
  Scratch* scratch = nullptr;
  ErrorRecord* errors = nullptr;  // device
  int32_t tag = 0;                // this op's index in the backend's op list (for ErrorRecord)
  bool autotune = false;          // time cuBLASLt's candidates (the real bind only: addresses are live)
  bool verbose = false;           // one stderr line per tuned GEMM
  bool decode_base = true;        // dequant_matmul: decode w into scratch for cuBLASLt (else the tiled kernel)
  // fp8-block's products (matmul.cu): cuBLASLt's blockwise FP8 where it runs
  // them, else the chunked kernel; or only one of the two (SGRT_CUDA_FP8_BLOCK).
  enum class Fp8Block : uint8_t { automatic, cublaslt, chunked } fp8_block = Fp8Block::automatic;
  // A norm and the per-tensor quantize of its output, bound one after the other:
  // the norm reduces max |y| into this (device, 256-byte scratch slot) and the
  // quantize only encodes (nullptr: not fused).
  unsigned* fused_amax = nullptr;
};

using Launch = std::function<Status(cudaStream_t)>;
using Binder = Status (*)(const OpArgs&, BindCtx&, Launch*);

// The kernel table (table.cpp).
const std::vector<KernelEntry<Binder>>& kernel_table();

// Kernel families (kernels/cuda/*.cu).
Status bind_elementwise(const OpArgs&, BindCtx&, Launch*);  // elementwise.cu: maps, their gradients, fill, dge_grad
Status bind_layout(const OpArgs&, BindCtx&, Launch*);       // layout.cu: reshape, transpose, broadcast_to, sum_to
Status bind_reduce(const OpArgs&, BindCtx&, Launch*);       // reduce.cu: axis reductions, softmax and gradients
Status bind_classifier(const OpArgs&, BindCtx&, Launch*);   // classifier.cu: cross-entropy, its gradient, accuracy
Status bind_optimizer(const OpArgs&, BindCtx&, Launch*);    // optimizer.cu: lr, check_finite, updates, step, dequantize
Status bind_quantize(const OpArgs&, BindCtx&, Launch*);     // quantize.cu: scaled FP8/FP4/16-bit quantization
Status bind_matmul(const OpArgs&, BindCtx&, Launch*);       // matmul.cu: matmul and qmatmul on cuBLASLt
// matmul.cu: the FP32-output GEMM `s` on a, b, c with a workspace from scratch,
// planned as every GEMM here (cuBLASLt's first algorithm, or its fastest when the
// backend tunes), shared for the Launch that runs it.
Status plan_shared_gemm(BindCtx& ctx, GemmSpec s, const void* a, const void* b, void* c,
                        std::shared_ptr<const LtGemm>* out);
// layout.cu: the second pass of column sums (sgrt/column_sums.h): y0[c] = the
// chunk sums part[ch * n + c] of column c added in chunk order, for c < n; y1,
// when given, the same of the next plane (part + chunks * n).
Status launch_column_totals(int64_t n, int64_t chunks, const float* part, float* y0, float* y1, const Device& dev,
                            cudaStream_t s);
Status bind_clamp_outliers(const OpArgs&, BindCtx&, Launch*);  // outliers.cu: per-row quantile clamp
Status bind_transformer(const OpArgs&, BindCtx&, Launch*);  // transformer.cu: embedding, norms, rope, rope_at, dropout, running_stat
Status bind_attention(const OpArgs&, BindCtx&, Launch*);    // attention.cu: fused causal attention, its gradient, kv_attention
Status bind_block_formats(const OpArgs&, BindCtx&, Launch*);  // dequant_matmul.cu: dequant_matmul, embedding of a block table
Status bind_im2col(const OpArgs&, BindCtx&, Launch*);       // im2col.cu: convolution patches and their gradient col2im

}  // namespace sgrt::cuda
