// sg.lora's `base`: the frozen weights of a LoRA model as q8_0 / q4_1 blocks
// (each param's base_dtype, set by name from the script).
#include "frozen_base.h"

#include <vector>

namespace sgrt::compiler {
namespace {

bool could_be_blocks(const Graph& g, const Tensor& t) {
  return t.role == sg::Role::param && dtype_is_block(t.base_dtype) && (t.frozen || g.infer_only) &&
         t.type.dtype == DType::f32 && t.type.shape.size() == 2 && t.type.shape[1] % dtype_block_size(t.base_dtype) == 0;
}

// Input `i` of `op` can read a block tensor: W of x @ W^T, or an embedding table.
bool reads_blocks(const Op& op, size_t i) {
  if (op.code == OpCode::Embedding) return i == 0;
  return op.code == OpCode::MatMul && i == 1 && op.attrs.i("trans_b") && !op.attrs.i("trans_a");
}

}  // namespace

Status store_frozen_base(Graph& g) {
  std::vector<bool> blocks(g.tensors.size());
  for (size_t id = 0; id < g.tensors.size(); ++id) blocks[id] = could_be_blocks(g, g.tensors[id]);
  for (const Op& op : g.forward)
    for (size_t i = 0; i < op.in.size(); ++i)
      if (!reads_blocks(op, i)) blocks[op.in[i]] = false;
  for (const auto& list : {g.outputs, g.metrics})
    for (const auto& [name, id] : list) blocks[id] = false;
  for (size_t id = 0; id < g.tensors.size(); ++id)
    if (blocks[id]) g.tensors[id].type.dtype = g.tensors[id].base_dtype;
  for (Op& op : g.forward)
    if (op.code == OpCode::MatMul && blocks[op.in[1]]) {
      op.code = OpCode::DequantMatMul;  // x @ dequant(W)^T: same output type
      op.attrs = Attrs{};
    }
  return Status::Ok();
}

}  // namespace sgrt::compiler
