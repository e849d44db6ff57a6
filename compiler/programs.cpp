#include "programs.h"

#include <algorithm>

#include "accumulate.h"
#include "autodiff.h"
#include "optimizer.h"
#include "recompute.h"

namespace sgrt::compiler {
namespace {

// The forward ops that `targets` depend on, in their original order.
// Persistent tensors are sources: a cache that another program's op writes in
// place holds its value from that run, it does not pull that program in.
std::vector<Op> ops_for(const Graph& g, const std::vector<int>& targets) {
  std::vector<bool> needed(g.tensors.size(), false);
  for (int t : targets) needed[t] = true;
  std::vector<bool> keep(g.forward.size(), false);
  for (size_t i = g.forward.size(); i-- > 0;) {
    const Op& op = g.forward[i];
    for (int o : op.out) keep[i] = keep[i] || needed[o];
    if (keep[i])
      for (int in : op.in)
        if (!g.t(in).persistent) needed[in] = true;
  }
  std::vector<Op> ops;
  for (size_t i = 0; i < g.forward.size(); ++i)
    if (keep[i]) ops.push_back(g.forward[i]);
  return ops;
}

// Evaluation and inference run every op with a training mode (its `training`
// attribute: dropout, running_stat) in inference mode: no dropout, the running
// statistics left as they are.
std::vector<Op> inference_mode(std::vector<Op> ops) {
  for (Op& op : ops)
    if (op.attrs.has("training")) op.attrs.set_i("training", 0);
  return ops;
}

// Prepends the prologue ops (low-precision masters to f32 working params)
// whose outputs the program reads.
void with_prologue(const std::vector<Op>& prologue, Program* p) {
  std::vector<Op> ops;
  for (const Op& pre : prologue)
    for (const Op& op : p->ops)
      if (std::find(op.in.begin(), op.in.end(), pre.out[0]) != op.in.end()) {
        ops.push_back(pre);
        break;
      }
  ops.insert(ops.end(), p->ops.begin(), p->ops.end());
  p->ops = std::move(ops);
}

}  // namespace

Status build_programs(Graph& g) {
  std::vector<int> eval_targets{g.loss};
  for (auto& [name, id] : g.metrics) eval_targets.push_back(id);
  std::vector<int> infer_targets, declared;
  for (auto& [name, ids] : g.declared_programs) declared.insert(declared.end(), ids.begin(), ids.end());
  for (auto& [name, id] : g.outputs)
    if (std::find(declared.begin(), declared.end(), id) == declared.end()) infer_targets.push_back(id);
  Backward bw;
  OptimizerOps opt;
  if (!g.infer_only) {  // infer_only: frozen weights (a pretrained model's generation), nothing to train
    SG_TRY(build_backward(g, &bw));
    std::vector<Op> forward = ops_for(g, eval_targets);
    Program grad_step;
    if (g.train.accumulate > 1) SG_TRY(accumulate_gradients(g, forward, bw, g.train.accumulate, &grad_step));
    SG_TRY(lower_optimizer(g, bw, &opt));
    if (g.train.accumulate > 1) {
      SG_TRY(recompute_checkpoints(g, forward.size(), &grad_step));
      g.programs.push_back(std::move(grad_step));
    }
    Program train{"train_step", std::move(forward)};
    const size_t forward_ops = train.ops.size();
    train.ops.insert(train.ops.end(), bw.ops.begin(), bw.ops.end());
    train.ops.insert(train.ops.end(), opt.updates.begin(), opt.updates.end());
    SG_TRY(recompute_checkpoints(g, forward_ops, &train));
    g.programs.push_back(std::move(train));
  }
  g.programs.push_back(Program{"eval", inference_mode(ops_for(g, eval_targets))});
  if (!infer_targets.empty()) g.programs.push_back(Program{"infer", inference_mode(ops_for(g, infer_targets))});
  for (auto& [name, ids] : g.declared_programs) g.programs.push_back(Program{name, inference_mode(ops_for(g, ids))});
  for (Program& p : g.programs) with_prologue(opt.prologue, &p);
  return Status::Ok();
}

}  // namespace sgrt::compiler
