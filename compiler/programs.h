// Builds the named programs (train_step, eval, infer) from the forward graph,
// the backward ops and the optimizer updates.
#pragma once
#include "graph.h"

namespace sgrt::compiler {

Status build_programs(Graph& g);

}  // namespace sgrt::compiler
