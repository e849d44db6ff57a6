// The CUDA backend's kernel table: (op, input dtypes, output dtypes) -> binder.
// Ops absent here fail at prepare with their name and dtypes; the coverage test
// (tests/test_op_coverage.cpp) checks it against ops.def's declared coverage.
#include "cuda/bind.h"

namespace sgrt::cuda {

using Match = KernelMatch;

const std::vector<KernelEntry<Binder>>& kernel_table() {
  using D = DType;
  const D f = D::f32, i = D::i32, q8 = D::q8_0, q4 = D::q4_1;
  static const std::vector<KernelEntry<Binder>> t = with_elementwise<Binder>(kBackendCuda, bind_elementwise, {
      {OpCode::MatMul, {f, f}, {f}, bind_matmul},          {OpCode::QMatMul, {}, {}, bind_matmul, Match::any},
      {OpCode::Fill, {}, {f}, bind_elementwise},           {OpCode::DgeGrad, {f, f, i}, {f}, bind_elementwise},
      {OpCode::Reshape, {f}, {f}, bind_layout},            {OpCode::Reshape, {i}, {i}, bind_layout},
      {OpCode::Transpose, {f}, {f}, bind_layout},          {OpCode::BroadcastTo, {f}, {f}, bind_layout},
      {OpCode::SumTo, {f}, {f}, bind_layout},
      {OpCode::Slice, {f}, {f}, bind_layout},              {OpCode::Pad, {f}, {f}, bind_layout},
      {OpCode::ReduceSum, {f}, {f}, bind_reduce},          {OpCode::ReduceMean, {f}, {f}, bind_reduce},
      {OpCode::ReduceMax, {f}, {f}, bind_reduce},          {OpCode::ReduceMaxGrad, {f, f, f}, {f}, bind_reduce},
      {OpCode::Softmax, {f}, {f}, bind_reduce},            {OpCode::LogSoftmax, {f}, {f}, bind_reduce},
      {OpCode::SoftmaxGrad, {f, f}, {f}, bind_reduce},     {OpCode::LogSoftmaxGrad, {f, f}, {f}, bind_reduce},
      {OpCode::SoftmaxXent, {f, i}, {f}, bind_classifier}, {OpCode::SoftmaxXentGrad, {f, i, f}, {f}, bind_classifier},
      {OpCode::Accuracy, {f, i}, {f}, bind_classifier},
      {OpCode::MaskedXent, {f, i, f}, {f}, bind_classifier}, {OpCode::MaskedXentGrad, {f, i, f, f}, {f}, bind_classifier},
      {OpCode::LrSchedule, {i}, {f}, bind_optimizer},      {OpCode::StepIncrement, {i}, {i}, bind_optimizer},
      {OpCode::CheckFinite, {i, f}, {i, f}, bind_optimizer, Match::variadic},
      // Updates take f32, f16 or e4m3 params and state (the shape rule admits which).
      {OpCode::SgdUpdate, {}, {}, bind_optimizer, Match::any},
      {OpCode::AdamwUpdate, {}, {}, bind_optimizer, Match::any},
      {OpCode::Dequantize, {}, {}, bind_optimizer, Match::any},
      {OpCode::QuantizeGrad, {}, {}, bind_optimizer, Match::any},
      {OpCode::Quantize, {}, {}, bind_quantize, Match::any},
      {OpCode::ClampOutliers, {f}, {f, f}, bind_clamp_outliers},
      {OpCode::DequantMatMul, {f, q8}, {f}, bind_block_formats},
      {OpCode::DequantMatMul, {f, q4}, {f}, bind_block_formats},
      {OpCode::Embedding, {q8, i}, {f}, bind_block_formats}, {OpCode::Embedding, {q4, i}, {f}, bind_block_formats},
      {OpCode::Embedding, {f, i}, {f}, bind_transformer},  {OpCode::EmbeddingGrad, {i, f}, {f}, bind_transformer},
      {OpCode::LayerNorm, {f, f, f}, {f, f, f}, bind_transformer},
      {OpCode::LayerNormGrad, {f, f, f, f, f}, {f, f, f}, bind_transformer},
      {OpCode::RmsNorm, {f, f}, {f, f}, bind_transformer}, {OpCode::RmsNormGrad, {f, f, f, f}, {f, f}, bind_transformer},
      {OpCode::Rope, {f}, {f}, bind_transformer},           {OpCode::Dropout, {f, i}, {f}, bind_transformer},
      {OpCode::Attention, {f, f, f}, {f, f}, bind_attention},
      {OpCode::AttentionGrad, {f, f, f, f, f, f}, {f, f, f}, bind_attention},
      {OpCode::RopeAt, {f, i}, {f}, bind_transformer},
      {OpCode::KvAttention, {f, f, f, f, f, i}, {f, f, f}, bind_attention},
      {OpCode::Im2col, {f}, {f}, bind_im2col},             {OpCode::Col2im, {f}, {f}, bind_im2col},
      {OpCode::RunningStat, {f, f}, {f, f}, bind_transformer},
  });
  return t;
}

}  // namespace sgrt::cuda
