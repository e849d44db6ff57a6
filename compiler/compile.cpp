#include "compile.h"

#include "frozen_base.h"
#include "memory_plan.h"
#include "precision.h"
#include "programs.h"

namespace sgrt::compiler {

namespace {

// With a data set declared, train_step and eval take every input they read from
// it: an input it does not bind would stay zero (a label of all zeros scores
// accuracy 1). Inputs only infer reads are the caller's to set (sgrt_set_input).
Status check_inputs_bound(const Graph& g) {
  if (g.data.dataset.empty()) return Status::Ok();
  for (const Program& p : g.programs) {
    if (p.name != "train_step" && p.name != "eval") continue;
    for (const Op& op : p.ops)
      for (int id : op.in) {
        const Tensor& t = g.t(id);
        if (t.role != sg::Role::input) continue;
        bool bound = false;
        for (const auto& [field, tensor] : g.data.fields) bound |= tensor == id;
        if (!bound)
          return Status::Invalid(t.loc.str() + ": input '" + t.name + "' is read by " + p.name + " but the " + g.data.dataset +
                                 " data set does not bind it (bind it in sg.data." + g.data.dataset + "{...})");
      }
  }
  return Status::Ok();
}

}  // namespace

Status compile(Graph& g) {
  SG_TRY(store_frozen_base(g));
  SG_TRY(build_programs(g));
  SG_TRY(check_inputs_bound(g));
  SG_TRY(apply_precision(g));
  return plan_memory(g);
}

}  // namespace sgrt::compiler
