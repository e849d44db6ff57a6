// Optimizer lowering: state tensors and in-place update ops for each param, in
// the precision the optimizer's state level asks for (docs/optimizer.md).
#pragma once
#include <string>

#include "autodiff.h"

namespace sgrt::compiler {

struct OptimizerOps {
  std::vector<Op> prologue;  // low-precision masters -> f32 working params, first in every program
  std::vector<Op> updates;   // lr_schedule, check_finite, one update per (param, grad), step_increment
};

// Below fp32 it also inserts into bw.ops each gradient's quantize_grad.
Status lower_optimizer(Graph& g, Backward& bw, OptimizerOps* out);

// The state levels ("fp32", "O1", "O2", "O3"), for error messages and --opt-level.
bool is_opt_level(const std::string& name);

}  // namespace sgrt::compiler
