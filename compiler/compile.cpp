#include "compile.h"

#include "memory_plan.h"
#include "precision.h"
#include "programs.h"

namespace sgrt::compiler {

Status compile(Graph& g) {
  SG_TRY(build_programs(g));
  SG_TRY(apply_precision(g));
  return plan_memory(g);
}

}  // namespace sgrt::compiler
