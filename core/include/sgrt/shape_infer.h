// Output types of every op from its input types and attributes. The compiler
// runs it as the DSL builds the graph; the runtime runs it again on a loaded
// file, so a file whose shapes disagree with its ops is rejected at load.
#pragma once
#include <vector>

#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/scale_spec.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sgrt {

// Fills *outs (op_info(code).num_outputs entries) after checking the op's
// attributes against ops.def (check_op_attrs). The message names the op and the
// offending shapes or attribute; callers add the source location. `quant` is the
// typed scale spec of a quantize's output (required) or of a qmatmul's two
// operands (optional: their scale tensors are then checked against it).
Status infer_types(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs,
                   std::vector<TensorType>* outs, const ScaleSpec* quant = nullptr);

}  // namespace sgrt
