// The compiler's passes, in order, over a graph the DSL built.
#pragma once
#include "graph.h"

namespace sgrt::compiler {

// autodiff + optimizer lowering -> programs -> precision and scale plan -> memory plan.
Status compile(Graph& g);

}  // namespace sgrt::compiler
