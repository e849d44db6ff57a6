#include "accumulate.h"

namespace sgrt::compiler {

Status accumulate_gradients(Graph& g, const std::vector<Op>& forward, Backward& bw, int64_t k, Program* grad_step) {
  grad_step->name = "grad_step";
  grad_step->ops = forward;
  grad_step->ops.insert(grad_step->ops.end(), bw.ops.begin(), bw.ops.end());
  for (auto& [param, grad] : bw.param_grads) {
    const Loc loc = g.t(param).loc;
    const Shape shape = g.t(param).type.shape;
    Tensor acc;
    acc.name = g.t(param).name + ".grad_acc";
    acc.type = {shape, DType::f32};
    acc.role = sg::Role::grad;
    acc.persistent = true;  // zeros at init: Init's default
    acc.loc = loc;
    int a = g.add_tensor(std::move(acc));
    SG_TRY(g.add_inplace_op_to(&grad_step->ops, OpCode::Add, {a, grad}, {}, loc, {a}));

    // train_step: the mean over the k micro-batches, then the accumulator back to zero.
    std::vector<int> sum, mean;
    SG_TRY(g.add_op_to(&bw.ops, OpCode::Add, {a, grad}, {}, loc, &sum, sg::Role::grad));
    Attrs inv;
    inv.set_f("alpha", 1.0 / static_cast<double>(k));
    SG_TRY(g.add_op_to(&bw.ops, OpCode::Scale, {sum[0]}, inv, loc, &mean, sg::Role::grad));
    Attrs zero;
    zero.set_f("value", 0.0).set_ints("shape", shape);
    SG_TRY(g.add_inplace_op_to(&bw.ops, OpCode::Fill, {}, zero, loc, {a}));
    g.tensors[mean[0]].name = g.t(grad).name + ".mean";
    g.tensors[mean[0]].grad_of = param;
    grad = mean[0];
  }
  return Status::Ok();
}

}  // namespace sgrt::compiler
