// Static memory plan: one arena. Persistent tensors (params, optimizer state,
// inputs) come first; every other tensor gets an offset from liveness, so two
// tensors share bytes only when no program has both alive at once.
#pragma once
#include "graph.h"

namespace sgrt::compiler {

constexpr uint64_t kArenaAlignment = 64;

Status plan_memory(Graph& g);

}  // namespace sgrt::compiler
