// Precision assignment and scale planning: rewrites every program's matmuls
// for the graph's recipe (quantize + qmatmul, FP4's clamping and DGE), choosing
// each quantized tensor's scale source from the Scalify plan.
#pragma once
#include "graph.h"

namespace sgrt::compiler {

// Runs after build_programs, before plan_memory.
Status apply_precision(Graph& g);

}  // namespace sgrt::compiler
