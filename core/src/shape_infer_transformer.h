// Shape rules of the transformer ops (embedding, norms, attention, rope,
// dropout) and of dequant_matmul, a frozen quantized base's linear;
// infer_types (shape_infer.cpp) calls one per op.
#pragma once
#include <vector>

#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sgrt {

Status infer_embedding(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_dequant_matmul(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_embedding_grad(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_norm(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_norm_grad(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_attention(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_rope(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_rope_at(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_kv_attention(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);
Status infer_dropout(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs);

}  // namespace sgrt
