#include "optimizer.h"

#include "sgrt/quant.h"

namespace sgrt::compiler {
namespace {

int add_state(Graph& g, const std::string& name, TensorType type, const Loc& loc) {
  Tensor t;
  t.name = name;
  t.type = std::move(type);
  t.role = sg::Role::opt_state;
  t.persistent = true;
  t.loc = loc;
  return g.add_tensor(std::move(t));
}

}  // namespace

Status lower_optimizer(Graph& g, const Backward& bw, std::vector<Op>* ops) {
  const OptimizerConfig& o = g.optimizer;
  if (o.kind == sg::OptimizerKind::none) return Status::Invalid("no optimizer declared (sg.optimizer.sgd or sg.optimizer.adamw)");
  Loc loc{g.source, 0};
  // Dropout may have made the train state already (it reads the step).
  g.train_state = g.find_tensor("train_state");
  if (g.train_state < 0) g.train_state = add_state(g, "train_state", {{kTrainStateLen}, DType::i32}, loc);
  Attrs sched;
  sched.set_f("lr", o.lr).set_i("schedule", static_cast<int64_t>(o.schedule))
      .set_i("warmup", o.warmup_steps).set_f("min_lr_ratio", o.min_lr_ratio);
  std::vector<int> out;
  SG_TRY(g.add_op_to(ops, OpCode::LrSchedule, {g.train_state}, sched, loc, &out, sg::Role::opt_state));
  g.lr = out[0];
  g.tensors[g.lr].name = "lr";
  g.tensors[g.lr].persistent = true;

  // A step whose gradients hold a NaN or inf updates nothing (the kernels read
  // the flag check_finite leaves in the train state).
  std::vector<int> check{g.train_state};
  for (auto [param, grad] : bw.param_grads) check.push_back(grad);
  SG_TRY(g.add_inplace_op_to(ops, OpCode::CheckFinite, check, {}, loc, {g.train_state}));

  for (auto [param, grad] : bw.param_grads) {
    const Tensor& p = g.t(param);
    // Decoupled weight decay applies to matrices, not to biases and gains.
    double decay = p.type.shape.size() >= 2 ? o.weight_decay : 0.0;
    Attrs a;
    a.set_f("weight_decay", decay);
    Loc ploc = p.loc;
    std::string pname = p.name;
    TensorType ptype = p.type;
    if (o.kind == sg::OptimizerKind::sgd) {
      int mom = add_state(g, pname + ".momentum", ptype, ploc);
      a.set_f("momentum", o.momentum);
      SG_TRY(g.add_inplace_op_to(ops, OpCode::SgdUpdate, {param, grad, mom, g.lr, g.train_state}, a, ploc, {param, mom}));
    } else {
      int m = add_state(g, pname + ".adam_m", ptype, ploc);
      int v = add_state(g, pname + ".adam_v", ptype, ploc);
      a.set_f("beta1", o.beta1).set_f("beta2", o.beta2).set_f("eps", o.eps);
      SG_TRY(g.add_inplace_op_to(ops, OpCode::AdamwUpdate, {param, grad, m, v, g.lr, g.train_state}, a, ploc,
                                 {param, m, v}));
    }
  }
  return g.add_inplace_op_to(ops, OpCode::StepIncrement, {g.train_state}, {}, loc, {g.train_state});
}

}  // namespace sgrt::compiler
