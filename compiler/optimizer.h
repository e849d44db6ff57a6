// Optimizer lowering: state tensors and in-place update ops for each param.
#pragma once
#include "autodiff.h"

namespace sgrt::compiler {

// Appends lr_schedule, one update per (param, grad) and step_increment to *ops.
Status lower_optimizer(Graph& g, const Backward& bw, std::vector<Op>* ops);

}  // namespace sgrt::compiler
