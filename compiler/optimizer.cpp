#include "optimizer.h"

#include <tuple>

#include "sgrt/quant.h"

namespace sgrt::compiler {
namespace {

// FP8-LM's levels (NUMERICS.md §5) as storage formats. Below fp32 the parameter
// the graph reads is an f32 working copy made from a low-precision master at the
// start of each program; the update writes the master. O3 gives the FP16
// master a per-tensor scale. Weight gradients are kept in FP8 from the moment
// backward completes them to the update (E5M2, the gradient format, under a
// per-tensor current scale). Which format the GEMMs see is the recipe's choice.
struct Level {
  const char* name;
  DType master, grad, m, v;  // v: AdamW's second moment (SGD has only the first)
  bool scale_master;
};
constexpr Level kLevels[] = {
    {"fp32", DType::f32, DType::f32, DType::f32, DType::f32, false},
    {"O1", DType::f16, DType::e5m2, DType::f32, DType::f32, false},
    {"O2", DType::f16, DType::e5m2, DType::e4m3, DType::f16, false},
    {"O3", DType::f16, DType::e5m2, DType::e4m3, DType::f16, true},
};

const Level* find_level(const std::string& name) {
  for (const Level& l : kLevels)
    if (name == l.name) return &l;
  return nullptr;
}

int add_state(Graph& g, const std::string& name, TensorType type, const Loc& loc, bool persistent = true) {
  Tensor t;
  t.name = name;
  t.type = std::move(type);
  t.role = sg::Role::opt_state;
  t.persistent = persistent;
  t.loc = loc;
  return g.add_tensor(std::move(t));
}

// Inserts quantize_grad right after backward's last write of `grad`, so the f32
// gradient dies there; returns the low-precision copy.
Status quantize_grad_after(Graph& g, Backward& bw, int grad, int scales, DType dtype, int* q) {
  size_t last = 0;
  for (size_t i = 0; i < bw.ops.size(); ++i)
    for (int o : bw.ops[i].out) if (o == grad) last = i;
  Tensor t;
  t.name = g.t(grad).name + "." + dtype_name(dtype);
  t.type = {g.t(grad).type.shape, dtype};
  t.role = sg::Role::grad;
  t.loc = g.t(grad).loc;
  *q = g.add_tensor(std::move(t));
  Attrs a;
  a.set_i("dtype", static_cast<int64_t>(dtype));
  std::vector<Op> op;
  SG_TRY(g.add_inplace_op_to(&op, OpCode::QuantizeGrad, {grad, scales}, a, g.t(grad).loc, {*q, scales}));
  bw.ops.insert(bw.ops.begin() + static_cast<std::ptrdiff_t>(last) + 1, op[0]);
  return Status::Ok();
}

}  // namespace

bool is_opt_level(const std::string& name) { return find_level(name) != nullptr; }

Status lower_optimizer(Graph& g, Backward& bw, OptimizerOps* out) {
  const OptimizerConfig& o = g.optimizer;
  if (o.kind == sg::OptimizerKind::none) return Status::Invalid("no optimizer declared (sg.optimizer.sgd or sg.optimizer.adamw)");
  const Level* level = find_level(o.state);
  if (!level) return Status::Invalid("unknown optimizer state level '" + o.state + "' (fp32, O1, O2, O3)");
  std::vector<Op>* ops = &out->updates;
  Loc loc{g.source, 0};
  // Dropout may have made the train state already (it reads the step).
  g.train_state = g.find_tensor("train_state");
  if (g.train_state < 0) g.train_state = add_state(g, "train_state", {{kTrainStateLen}, DType::i32}, loc);
  Attrs sched;
  sched.set_f("lr", o.lr).set_i("schedule", static_cast<int64_t>(o.schedule))
      .set_i("warmup", o.warmup_steps).set_f("min_lr_ratio", o.min_lr_ratio);
  std::vector<int> res;
  SG_TRY(g.add_op_to(ops, OpCode::LrSchedule, {g.train_state}, sched, loc, &res, sg::Role::opt_state));
  g.lr = res[0];
  g.tensors[g.lr].name = "lr";
  g.tensors[g.lr].persistent = true;

  // Per parameter: its optimizer scales and, below fp32, its gradient in FP8.
  std::vector<std::tuple<int, int, int>> updates;  // (param, gradient as the update reads it, scales)
  for (auto [param, grad] : bw.param_grads) {
    int scales = add_state(g, g.t(param).name + ".opt_scales", {{kOptScaleLen}, DType::f32}, g.t(param).loc);
    g.tensors[scales].init.kind = sg::InitKind::ones;
    int read = grad;
    if (level->grad != DType::f32) SG_TRY(quantize_grad_after(g, bw, grad, scales, level->grad, &read));
    updates.push_back({param, read, scales});
  }

  // A step whose gradients hold a NaN or inf updates nothing (the kernels read
  // the flag check_finite leaves in the train state); the same pass gives the
  // global norm and the clipping coefficient every update multiplies in. FP8
  // gradients were measured in f32 by quantize_grad, which left their norms.
  int coef = add_state(g, "grad_coef", {{}, DType::f32}, loc, false);
  bool norms = level->grad != DType::f32;
  std::vector<int> check{g.train_state};
  for (auto [param, grad, scales] : updates) check.push_back(norms ? scales : grad);
  Attrs clip;
  clip.set_f("clip", o.clip).set_i("norms", norms);
  SG_TRY(g.add_inplace_op_to(ops, OpCode::CheckFinite, check, clip, loc, {g.train_state, coef}));

  for (auto [param, grad, scales] : updates) {
    const Tensor& p = g.t(param);
    // Decoupled weight decay applies to matrices, not to biases and gains.
    double decay = p.type.shape.size() >= 2 ? o.weight_decay : 0.0;
    Attrs a;
    a.set_f("weight_decay", decay).set_i("scale_w", level->scale_master);
    Loc ploc = p.loc;
    std::string pname = p.name;
    Shape shape = p.type.shape;
    Init init = p.init;
    int master = param;
    if (level->master != DType::f32) {
      master = add_state(g, pname + ".master", {shape, level->master}, ploc);
      g.tensors[master].init = init;  // Session::init rounds the initial values into it
      g.tensors[param].persistent = false;
      Attrs d;
      d.set_i("slot", kOptScaleW);
      SG_TRY(g.add_inplace_op_to(&out->prologue, OpCode::Dequantize, {master, scales}, d, ploc, {param}));
    }
    if (o.kind == sg::OptimizerKind::sgd) {
      int mom = add_state(g, pname + ".momentum", {shape, level->m}, ploc);
      a.set_f("momentum", o.momentum);
      SG_TRY(g.add_inplace_op_to(ops, OpCode::SgdUpdate, {master, grad, mom, g.lr, g.train_state, scales, coef}, a, ploc,
                                 {master, mom, scales}));
    } else {
      int m = add_state(g, pname + ".adam_m", {shape, level->m}, ploc);
      int v = add_state(g, pname + ".adam_v", {shape, level->v}, ploc);
      a.set_f("beta1", o.beta1).set_f("beta2", o.beta2).set_f("eps", o.eps);
      SG_TRY(g.add_inplace_op_to(ops, OpCode::AdamwUpdate, {master, grad, m, v, g.lr, g.train_state, scales, coef}, a,
                                 ploc, {master, m, v, scales}));
    }
  }
  return g.add_inplace_op_to(ops, OpCode::StepIncrement, {g.train_state}, {}, loc, {g.train_state});
}

}  // namespace sgrt::compiler
