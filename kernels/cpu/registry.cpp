// The CPU backend's kernel table: (op, input dtypes, output dtypes) -> kernel.
// A test checks that every op in ops.def has at least one entry.
#include <array>

#include "cpu/op_args.h"

namespace sgrt::cpu {
namespace {

struct Entry {
  OpCode code;
  std::vector<DType> in, out;
  CpuKernel fn;
};

const std::vector<Entry>& table() {
  using D = DType;
  const D f = D::f32, i = D::i32;
  static const std::vector<Entry> t = {
      {OpCode::MatMul, {f, f}, {f}, k_matmul_f32},
      {OpCode::Add, {f, f}, {f}, k_elementwise},       {OpCode::Sub, {f, f}, {f}, k_elementwise},
      {OpCode::Mul, {f, f}, {f}, k_elementwise},       {OpCode::Div, {f, f}, {f}, k_elementwise},
      {OpCode::Neg, {f}, {f}, k_elementwise},          {OpCode::Scale, {f}, {f}, k_elementwise},
      {OpCode::Relu, {f}, {f}, k_elementwise},         {OpCode::Gelu, {f}, {f}, k_elementwise},
      {OpCode::Tanh, {f}, {f}, k_elementwise},         {OpCode::Sigmoid, {f}, {f}, k_elementwise},
      {OpCode::Exp, {f}, {f}, k_elementwise},          {OpCode::Log, {f}, {f}, k_elementwise},
      {OpCode::ReluGrad, {f, f}, {f}, k_elementwise},  {OpCode::GeluGrad, {f, f}, {f}, k_elementwise},
      {OpCode::TanhGrad, {f, f}, {f}, k_elementwise},  {OpCode::SigmoidGrad, {f, f}, {f}, k_elementwise},
      {OpCode::Fill, {}, {f}, k_fill},
      {OpCode::Reshape, {f}, {f}, k_layout},           {OpCode::Reshape, {i}, {i}, k_layout},
      {OpCode::Transpose, {f}, {f}, k_layout},         {OpCode::BroadcastTo, {f}, {f}, k_layout},
      {OpCode::SumTo, {f}, {f}, k_layout},
      {OpCode::ReduceSum, {f}, {f}, k_reduce},         {OpCode::ReduceMean, {f}, {f}, k_reduce},
      {OpCode::ReduceMax, {f}, {f}, k_reduce},         {OpCode::ReduceMaxGrad, {f, f, f}, {f}, k_reduce},
      {OpCode::Softmax, {f}, {f}, k_reduce},           {OpCode::LogSoftmax, {f}, {f}, k_reduce},
      {OpCode::SoftmaxGrad, {f, f}, {f}, k_reduce},    {OpCode::LogSoftmaxGrad, {f, f}, {f}, k_reduce},
      {OpCode::SoftmaxXent, {f, i}, {f}, k_classifier}, {OpCode::SoftmaxXentGrad, {f, i, f}, {f}, k_classifier},
      {OpCode::Accuracy, {f, i}, {f}, k_classifier},
      {OpCode::LrSchedule, {i}, {f}, k_optimizer},     {OpCode::StepIncrement, {i}, {i}, k_optimizer},
      {OpCode::SgdUpdate, {f, f, f, f}, {f, f}, k_optimizer},
      {OpCode::AdamwUpdate, {f, f, f, f, f, i}, {f, f, f}, k_optimizer},
  };
  return t;
}

}  // namespace

CpuKernel find_cpu_kernel(OpCode code, const std::vector<DType>& in, const std::vector<DType>& out) {
  for (const Entry& e : table())
    if (e.code == code && e.in == in && e.out == out) return e.fn;
  return nullptr;
}

}  // namespace sgrt::cpu
