// The CPU backend's kernel table: (op, input dtypes, output dtypes) -> kernel.
// The coverage test (tests/test_op_coverage.cpp) checks it against ops.def.
#include "cpu/op_args.h"
#include "sgrt/kernel_table.h"

namespace sgrt::cpu {

const std::vector<KernelEntry<CpuKernel>>& kernel_table() {
  using Match = KernelMatch;
  using D = DType;
  const D f = D::f32, i = D::i32;
  static const std::vector<KernelEntry<CpuKernel>> t = with_elementwise<CpuKernel>(kBackendCpu, k_elementwise, {
      {OpCode::MatMul, {f, f}, {f}, k_matmul_f32},
      {OpCode::DequantMatMul, {f, D::q8_0}, {f}, k_dequant_matmul},
      {OpCode::DequantMatMul, {f, D::q4_1}, {f}, k_dequant_matmul},
      {OpCode::Fill, {}, {f}, k_fill},
      {OpCode::Reshape, {f}, {f}, k_layout},           {OpCode::Reshape, {i}, {i}, k_layout},
      {OpCode::Transpose, {f}, {f}, k_layout},         {OpCode::BroadcastTo, {f}, {f}, k_layout},
      {OpCode::SumTo, {f}, {f}, k_layout},
      {OpCode::Slice, {f}, {f}, k_layout},             {OpCode::Pad, {f}, {f}, k_layout},
      {OpCode::ReduceSum, {f}, {f}, k_reduce},         {OpCode::ReduceMean, {f}, {f}, k_reduce},
      {OpCode::ReduceMax, {f}, {f}, k_reduce},         {OpCode::ReduceMaxGrad, {f, f, f}, {f}, k_reduce},
      {OpCode::Softmax, {f}, {f}, k_reduce},           {OpCode::LogSoftmax, {f}, {f}, k_reduce},
      {OpCode::SoftmaxGrad, {f, f}, {f}, k_reduce},    {OpCode::LogSoftmaxGrad, {f, f}, {f}, k_reduce},
      {OpCode::SoftmaxXent, {f, i}, {f}, k_classifier}, {OpCode::SoftmaxXentGrad, {f, i, f}, {f}, k_classifier},
      {OpCode::Accuracy, {f, i}, {f}, k_classifier},
      {OpCode::MaskedXent, {f, i, f}, {f}, k_classifier}, {OpCode::MaskedXentGrad, {f, i, f, f}, {f}, k_classifier},
      {OpCode::LrSchedule, {i}, {f}, k_optimizer},     {OpCode::StepIncrement, {i}, {i}, k_optimizer},
      // Updates take f32, f16 or e4m3 params and state (the shape rule admits which).
      {OpCode::SgdUpdate, {}, {}, k_optimizer, Match::any},
      {OpCode::AdamwUpdate, {}, {}, k_optimizer, Match::any},
      {OpCode::Dequantize, {}, {}, k_optimizer, Match::any},
      {OpCode::QuantizeGrad, {}, {}, k_optimizer, Match::any},
      {OpCode::CheckFinite, {i, f}, {i, f}, k_optimizer, Match::variadic},
      {OpCode::Quantize, {}, {}, k_quantize, Match::any},
      {OpCode::QMatMul, {}, {}, k_qmatmul, Match::any},
      {OpCode::DgeGrad, {f, f, i}, {f}, k_dge_grad},
      {OpCode::ClampOutliers, {f}, {f, f}, k_clamp_outliers},
      {OpCode::Embedding, {f, i}, {f}, k_embedding},   {OpCode::EmbeddingGrad, {i, f}, {f}, k_embedding},
      {OpCode::Embedding, {D::q8_0, i}, {f}, k_embedding}, {OpCode::Embedding, {D::q4_1, i}, {f}, k_embedding},
      {OpCode::LayerNorm, {f, f, f}, {f, f, f}, k_norm}, {OpCode::LayerNormGrad, {f, f, f, f, f}, {f, f, f}, k_norm},
      {OpCode::RmsNorm, {f, f}, {f, f}, k_norm},        {OpCode::RmsNormGrad, {f, f, f, f}, {f, f}, k_norm},
      {OpCode::Attention, {f, f, f}, {f, f}, k_attention},
      {OpCode::AttentionGrad, {f, f, f, f, f, f}, {f, f, f}, k_attention},
      {OpCode::Rope, {f}, {f}, k_rope},                 {OpCode::Dropout, {f, i}, {f}, k_dropout},
      {OpCode::RopeAt, {f, i}, {f}, k_rope},
      {OpCode::KvAttention, {f, f, f, f, f, i}, {f, f, f}, k_attention},
      {OpCode::Im2col, {f}, {f}, k_im2col},             {OpCode::Col2im, {f}, {f}, k_im2col},
      {OpCode::RunningStat, {f, f}, {f, f}, k_running_stat},
  });
  return t;
}

CpuKernel find_cpu_kernel(OpCode code, const std::vector<DType>& in, const std::vector<DType>& out) {
  return find_kernel(kernel_table(), code, in, out);
}

}  // namespace sgrt::cpu
