// Shape rules of the transformer ops (embedding, norms, attention, rope,
// dropout, silu); infer_types (shape_infer.cpp) hands these ops here.
#pragma once
#include <vector>

#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sgrt {

Status infer_transformer_types(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs,
                               std::vector<TensorType>* outs);

}  // namespace sgrt
