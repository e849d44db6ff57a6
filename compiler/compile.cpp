#include "compile.h"

#include "memory_plan.h"
#include "programs.h"

namespace sgrt::compiler {

Status compile(Graph& g) {
  if (g.recipe != "fp32") return Status::Invalid("unknown recipe '" + g.recipe + "' (available: fp32)");
  SG_TRY(build_programs(g));
  return plan_memory(g);
}

}  // namespace sgrt::compiler
