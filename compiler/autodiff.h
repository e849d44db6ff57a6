// Reverse-mode autodiff: appends ordinary ops that compute d loss / d param.
#pragma once
#include <utility>
#include <vector>

#include "graph.h"

namespace sgrt::compiler {

struct Backward {
  std::vector<Op> ops;
  std::vector<std::pair<int, int>> param_grads;  // (param, its gradient)
};

// Differentiates g.loss (a scalar) with respect to every param it depends on.
Status build_backward(Graph& g, Backward* out);

}  // namespace sgrt::compiler
