// How the CPU backend hands an op to its kernel: resolved pointers into the
// arena, bound once at load, so a step allocates nothing.
#pragma once
#include <vector>

#include "cpu/gemm.h"

#include "sgrt/attrs.h"
#include "sgrt/kernel_table.h"
#include "sgrt/ops.h"
#include "sgrt/scale_spec.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sgrt::cpu {

struct TensorArg {
  void* data = nullptr;
  const TensorType* type = nullptr;
  int64_t n = 0;  // element count
  float* f() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  const Shape& shape() const { return type->shape; }
};

struct OpArgs {
  OpCode code;
  const Attrs* attrs = nullptr;
  std::vector<TensorArg> in, out;
  const ScaleSpec* quant = nullptr;  // quantize and qmatmul: OpInfoLoaded::quant
  // matmul and qmatmul: a row vector [N] added to every output row after the
  // product, with a separate add's rounding (the backend's fusion of
  // add(matmul, broadcast_to(b)), runtime/src/product_fusion.h); null: none.
  const float* bias = nullptr;
  // matmul: the output is addend + product (then + bias), each element a separate
  // add's rounding (the fusion of add(y, matmul(a, W)), runtime/src/product_fusion.h);
  // the addend is the output's bytes exactly or none of them. null: none.
  const float* addend = nullptr;
  // matmul and qmatmul: a relu, or a relu_grad by a mask laid out as the output,
  // applied to each output element last (the fusion of relu(matmul) and
  // relu_grad(y, matmul), runtime/src/product_fusion.h); cpu/gemm.h's Activation.
  Activation act{};
};

struct QuantStats;  // cpu/quantize.h

// Kernels fail only on data they cannot trust (a label out of range).
using CpuKernel = Status (*)(const OpArgs&);

// The kernel table (table.cpp) and the kernel for (op, input dtypes, output
// dtypes) in it, or nullptr.
const std::vector<KernelEntry<CpuKernel>>& kernel_table();
CpuKernel find_cpu_kernel(OpCode code, const std::vector<DType>& in, const std::vector<DType>& out);

// Kernel families, one file each; the table (table.cpp) maps op codes to them.
Status k_elementwise(const OpArgs& a);  // elementwise.cpp
Status k_layout(const OpArgs& a);       // layout.cpp: reshape, transpose, broadcast_to, sum_to
// layout.cpp: y [.., P, L] = x's last two axes swapped, x read at in_strides (threaded).
void transpose_last_two(const float* x, float* y, const Shape& out, const std::vector<int64_t>& in_strides);
Status k_reduce(const OpArgs& a);       // reduce.cpp: reductions, softmax and their gradients
Status k_classifier(const OpArgs& a);   // classifier.cpp: cross-entropy, its gradient, accuracy
Status k_optimizer(const OpArgs& a);    // optimizer.cpp: lr schedule, SGD, AdamW, step counter
Status k_matmul_f32(const OpArgs& a);   // matmul.cpp
Status k_dequant_matmul(const OpArgs& a);  // dequant_matmul.cpp: x @ a q8_0 / q4_1 frozen base
Status k_fill(const OpArgs& a);         // elementwise.cpp
Status k_quantize(const OpArgs& a);     // quant_ops.cpp: scaled quantization with amax state
// k_quantize in its two parts: the codes and scales (outputs 0 and 1; NVFP4's
// tensor scale also goes to the state), then what a training run adds to the
// state (counters, amax history, the stochastic rounding's step).
Status quantize_outputs(const OpArgs& a, QuantStats* stats);
void record_quantize(const OpArgs& a, const QuantStats& stats);
Status k_qmatmul(const OpArgs& a);      // quant_ops.cpp: GEMM of quantized operands
Status k_dge_grad(const OpArgs& a);     // fp4_ops.cpp: FP4 differentiable gradient estimator
Status k_clamp_outliers(const OpArgs& a);  // fp4_ops.cpp: per-row quantile clamp and residual
Status k_embedding(const OpArgs& a);    // embedding.cpp: gather and its scatter-add gradient
Status k_norm(const OpArgs& a);         // norm.cpp: layer norm, RMS norm and their gradients
Status k_attention(const OpArgs& a);    // attention.cpp: fused causal attention, forward and backward; kv_attention
Status k_rope(const OpArgs& a);         // rope.cpp: rotary position embedding (rope, rope_at)
Status k_dropout(const OpArgs& a);      // dropout.cpp: counter-based inverted dropout
Status k_im2col(const OpArgs& a);       // im2col.cpp: convolution patches and their gradient col2im
Status k_running_stat(const OpArgs& a);  // running_stat.cpp: batch norm's running statistics

}  // namespace sgrt::cpu
