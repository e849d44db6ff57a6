#include "autodiff.h"

#include <map>

namespace sgrt::compiler {
namespace {

class Differ {
 public:
  Differ(Graph& g, Backward* out) : g_(g), out_(out) {}

  Status run() {
    if (g_.loss < 0) return Status::Invalid("no loss declared (call sg.loss)");
    if (!g_.t(g_.loss).type.shape.empty())
      return Status::Invalid(g_.t(g_.loss).loc.str() + ": the loss must be a scalar, got " + type_str(g_.t(g_.loss).type));
    mark_requires();
    if (!requires_[g_.loss]) return Status::Invalid("the loss does not depend on any trained (unfrozen) parameter");
    loc_ = g_.t(g_.loss).loc;
    Attrs one;
    one.set_f("value", 1.0).set_ints("shape", {});
    int seed = emit(OpCode::Fill, {}, one);
    if (seed < 0) return st_;
    grads_[g_.loss] = seed;
    for (size_t i = g_.forward.size(); i-- > 0;) {
      const Op& op = g_.forward[i];
      if (!grads_.count(op.out[0])) continue;
      loc_ = op.loc;
      origin_ = static_cast<int>(i);
      SG_TRY(differentiate(op, grads_[op.out[0]]));
    }
    for (size_t id = 0; id < g_.tensors.size(); ++id) {
      if (g_.tensors[id].role != sg::Role::param || !grads_.count(id)) continue;
      int gid = grads_[id];
      // Two params can share one gradient tensor (a + b): give each its own.
      if (g_.tensors[gid].grad_of >= 0) {
        loc_ = g_.tensors[id].loc;
        Attrs same;
        same.set_ints("shape", g_.tensors[gid].type.shape);
        gid = emit(OpCode::Reshape, {gid}, same);
        if (gid < 0) return st_;
      }
      g_.tensors[gid].name = g_.tensors[id].name + ".grad";
      g_.tensors[gid].grad_of = static_cast<int>(id);
      out_->param_grads.push_back({static_cast<int>(id), gid});
    }
    return Status::Ok();
  }

 private:
  void mark_requires() {
    requires_.assign(g_.tensors.size(), false);
    for (size_t i = 0; i < g_.tensors.size(); ++i)
      requires_[i] = g_.tensors[i].role == sg::Role::param && !g_.tensors[i].frozen;
    for (const Op& op : g_.forward) {
      if (op.code == OpCode::Accuracy) continue;
      bool any = false;
      for (int in : op.in) any = any || requires_[in];
      for (int o : op.out) requires_[o] = any;
    }
  }

  int emit(OpCode code, std::vector<int> in, Attrs attrs = {}) {
    std::vector<int> out;
    st_ = g_.add_op_to(&out_->ops, code, std::move(in), std::move(attrs), loc_, &out, sg::Role::grad);
    if (st_.ok()) out_->ops.back().origin = origin_;
    if (requires_.size() < g_.tensors.size()) requires_.resize(g_.tensors.size(), false);
    return st_.ok() ? out[0] : -1;
  }

  // Multi-output gradient ops (norms, attention): all outputs, or empty on error.
  std::vector<int> emitn(OpCode code, std::vector<int> in, Attrs attrs = {}) {
    std::vector<int> out;
    st_ = g_.add_op_to(&out_->ops, code, std::move(in), std::move(attrs), loc_, &out, sg::Role::grad);
    if (!st_.ok()) return {};
    out_->ops.back().origin = origin_;
    requires_.resize(g_.tensors.size(), false);
    return out;
  }

  // Accumulates outs[i] into in[i] for each input that needs a gradient.
  Status accumulate_all(const std::vector<int>& in, const std::vector<int>& outs) {
    if (outs.empty()) return st_;
    for (size_t i = 0; i < outs.size(); ++i) SG_TRY(accumulate(in[i], outs[i]));
    return Status::Ok();
  }

  // Reshapes a gradient whose element count matches but whose shape does not
  // (the 2-D views of matmul).
  int fit(int grad, const Shape& shape) {
    if (grad < 0 || g_.t(grad).type.shape == shape) return grad;
    Attrs a;
    a.set_ints("shape", shape);
    return emit(OpCode::Reshape, {grad}, a);
  }

  // Adds a contribution to x's gradient.
  Status accumulate(int x, int grad) {
    if (grad < 0) return st_;
    if (!requires_[x]) return Status::Ok();
    grad = fit(grad, g_.t(x).type.shape);
    if (grad < 0) return st_;
    auto it = grads_.find(x);
    if (it == grads_.end()) {
      grads_[x] = grad;
      return Status::Ok();
    }
    int sum = emit(OpCode::Add, {it->second, grad});
    if (sum < 0) return st_;
    it->second = sum;
    return Status::Ok();
  }

  static Attrs mm(bool ta, bool tb) {
    Attrs a;
    a.set_i("trans_a", ta).set_i("trans_b", tb);
    return a;
  }

  Status differentiate(const Op& op, int dy) {
    const std::vector<int>& in = op.in;
    int y = op.out[0];
    auto need = [&](size_t i) { return requires_[in[i]]; };
    switch (op.code) {
      case OpCode::MatMul: {
        bool ta = op.attrs.i("trans_a"), tb = op.attrs.i("trans_b");
        int a = in[0], b = in[1];
        if (need(0)) {
          int da = !ta ? emit(OpCode::MatMul, {dy, b}, mm(false, !tb))
                       : emit(OpCode::MatMul, {b, dy}, mm(tb, true));
          SG_TRY(accumulate(a, da));
        }
        if (need(1)) {
          int db = !tb ? emit(OpCode::MatMul, {a, dy}, mm(!ta, false))
                       : emit(OpCode::MatMul, {dy, a}, mm(true, ta));
          SG_TRY(accumulate(b, db));
        }
        return Status::Ok();
      }
      case OpCode::Add:
        SG_TRY(accumulate(in[0], dy));
        return accumulate(in[1], dy);
      case OpCode::Sub:
        SG_TRY(accumulate(in[0], dy));
        return need(1) ? accumulate(in[1], emit(OpCode::Neg, {dy})) : Status::Ok();
      case OpCode::Mul:
        if (need(0)) SG_TRY(accumulate(in[0], emit(OpCode::Mul, {dy, in[1]})));
        return need(1) ? accumulate(in[1], emit(OpCode::Mul, {dy, in[0]})) : Status::Ok();
      case OpCode::Div: {
        int da = emit(OpCode::Div, {dy, in[1]});  // dy / b; also d/db = -(dy / b) * y
        if (need(0)) SG_TRY(accumulate(in[0], da));
        if (!need(1)) return Status::Ok();
        int t = da < 0 ? -1 : emit(OpCode::Mul, {da, y});
        return accumulate(in[1], t < 0 ? -1 : emit(OpCode::Neg, {t}));
      }
      case OpCode::Neg: return accumulate(in[0], emit(OpCode::Neg, {dy}));
      case OpCode::Scale: return accumulate(in[0], emit(OpCode::Scale, {dy}, op.attrs));
      // relu_grad by the output: y > 0 exactly where x > 0 (a NaN x gives y 0 or
      // NaN, neither > 0), so x can die after the forward, and a backend that
      // writes relu's output in its product's store never writes x at all.
      case OpCode::Relu: return accumulate(in[0], emit(OpCode::ReluGrad, {y, dy}));
      case OpCode::Gelu: return accumulate(in[0], emit(OpCode::GeluGrad, {in[0], dy}));
      case OpCode::Tanh: return accumulate(in[0], emit(OpCode::TanhGrad, {y, dy}));
      case OpCode::Sigmoid: return accumulate(in[0], emit(OpCode::SigmoidGrad, {y, dy}));
      case OpCode::Exp: return accumulate(in[0], emit(OpCode::Mul, {dy, y}));
      case OpCode::Log: return accumulate(in[0], emit(OpCode::Div, {dy, in[0]}));
      case OpCode::Sqrt: {  // dy / (2 y)
        Attrs two;
        two.set_f("alpha", 2.0);
        return accumulate(in[0], emit(OpCode::Div, {dy, emit(OpCode::Scale, {y}, two)}));
      }
      case OpCode::Reshape: return accumulate(in[0], fit(dy, g_.t(in[0]).type.shape));
      case OpCode::Transpose: {
        const std::vector<int64_t>& perm = op.attrs.ints("perm");
        std::vector<int64_t> inv(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
        Attrs a;
        a.set_ints("perm", inv);
        return accumulate(in[0], emit(OpCode::Transpose, {dy}, a));
      }
      case OpCode::BroadcastTo: case OpCode::SumTo: {
        Attrs a;
        a.set_ints("shape", g_.t(in[0]).type.shape);
        return accumulate(in[0], emit(op.code == OpCode::BroadcastTo ? OpCode::SumTo : OpCode::BroadcastTo, {dy}, a));
      }
      case OpCode::Slice: case OpCode::Pad: {  // each other's gradient: slice's window is pad's interior
        const Shape xs = g_.t(in[0]).type.shape;
        bool slice = op.code == OpCode::Slice;
        std::vector<int64_t> lo = op.attrs.ints(slice ? "starts" : "before"), other(xs.size());
        const Shape& ys = g_.t(y).type.shape;
        for (size_t k = 0; k < xs.size(); ++k) other[k] = slice ? xs[k] - lo[k] - ys[k] : xs[k];
        Attrs a;
        a.set_ints(slice ? "before" : "starts", lo).set_ints(slice ? "after" : "sizes", other);
        return accumulate(in[0], emit(slice ? OpCode::Pad : OpCode::Slice, {dy}, a));
      }
      case OpCode::ReduceSum: case OpCode::ReduceMean: {
        const Shape xs = g_.t(in[0]).type.shape;  // a copy: emitting adds tensors
        int64_t axis;
        normalize_axis(op.attrs.i("axis"), xs.size(), &axis);
        Shape kept = xs;
        kept[axis] = 1;
        int g = fit(dy, kept);
        if (op.code == OpCode::ReduceMean && g >= 0) {
          Attrs s;
          s.set_f("alpha", 1.0 / static_cast<double>(xs[axis]));
          g = emit(OpCode::Scale, {g}, s);
        }
        Attrs b;
        b.set_ints("shape", xs);
        return accumulate(in[0], g < 0 ? -1 : emit(OpCode::BroadcastTo, {g}, b));
      }
      case OpCode::ReduceMax: return accumulate(in[0], emit(OpCode::ReduceMaxGrad, {in[0], y, dy}, op.attrs));
      case OpCode::Softmax: return accumulate(in[0], emit(OpCode::SoftmaxGrad, {y, dy}, op.attrs));
      case OpCode::LogSoftmax: return accumulate(in[0], emit(OpCode::LogSoftmaxGrad, {y, dy}, op.attrs));
      case OpCode::SoftmaxXent: return accumulate(in[0], emit(OpCode::SoftmaxXentGrad, {in[0], in[1], dy}));
      case OpCode::MaskedXent: return accumulate(in[0], emit(OpCode::MaskedXentGrad, {in[0], in[1], in[2], dy}));
      case OpCode::Embedding: {
        Attrs a;
        a.set_i("vocab", g_.t(in[0]).type.shape[0]);
        return accumulate(in[0], emit(OpCode::EmbeddingGrad, {in[1], dy}, a));
      }
      case OpCode::LayerNorm:  // (x, gain, bias) -> (y, mean, rstd)
        return accumulate_all(in, emitn(OpCode::LayerNormGrad, {in[0], in[1], op.out[1], op.out[2], dy}, op.attrs));
      case OpCode::RmsNorm:  // (x, gain) -> (y, rstd)
        return accumulate_all(in, emitn(OpCode::RmsNormGrad, {in[0], in[1], op.out[1], dy}, op.attrs));
      case OpCode::Attention:  // (q, k, v) -> (y, lse)
        return accumulate_all(in, emitn(OpCode::AttentionGrad, {in[0], in[1], in[2], y, op.out[1], dy}, op.attrs));
      case OpCode::Silu: return accumulate(in[0], emit(OpCode::SiluGrad, {in[0], dy}));
      case OpCode::Rope: {  // a rotation: its gradient is the inverse rotation
        Attrs a = op.attrs;
        a.set_i("inverse", !op.attrs.i("inverse"));
        return accumulate(in[0], emit(OpCode::Rope, {dy}, a));
      }
      // Linear in x with the mask of this step: the same op on dy, same seed and step.
      case OpCode::Dropout: return accumulate(in[0], emit(OpCode::Dropout, {dy, in[1]}, op.attrs));
      case OpCode::Accuracy: case OpCode::Fill: return Status::Ok();
      // Decoding ops (a KV cache) run in inference programs only.
      case OpCode::DequantMatMul: {  // (x, w): only x has a gradient; a block-format w is frozen
        if (need(1))
          return Status::Invalid(op.loc.str() + ": " + g_.t(in[1]).name + " is stored as " +
                                 dtype_name(g_.t(in[1]).type.dtype) + " and cannot be trained: freeze it");
        Attrs a;
        a.set_i("transpose_w", !op.attrs.i("transpose_w"));
        return accumulate(in[0], emit(OpCode::DequantMatMul, {dy, in[1]}, a));
      }
      case OpCode::Im2col: {  // the transpose of a copy: each dx element gathers its copies
        Attrs a = op.attrs;
        const Shape& xs = g_.t(in[0]).type.shape;
        a.set_ints("size", {xs[1], xs[2]});
        return accumulate(in[0], emit(OpCode::Col2im, {dy}, a));
      }
      // Training passes the batch statistic through (eval programs have no backward).
      case OpCode::RunningStat: return accumulate(in[0], dy);
      case OpCode::RopeAt: case OpCode::KvAttention: break;
      // Gradient and optimizer ops never appear in the forward graph.
      case OpCode::ReluGrad: case OpCode::GeluGrad: case OpCode::TanhGrad: case OpCode::SigmoidGrad:
      case OpCode::ReduceMaxGrad: case OpCode::SoftmaxGrad: case OpCode::LogSoftmaxGrad:
      case OpCode::SoftmaxXentGrad: case OpCode::LrSchedule: case OpCode::SgdUpdate:
      case OpCode::AdamwUpdate: case OpCode::StepIncrement: case OpCode::kCount:
      case OpCode::EmbeddingGrad: case OpCode::LayerNormGrad: case OpCode::RmsNormGrad:
      case OpCode::AttentionGrad: case OpCode::SiluGrad: case OpCode::Col2im: case OpCode::MaskedXentGrad:
      // Low-precision ops are inserted after autodiff (compiler/precision.cpp).
      case OpCode::Quantize: case OpCode::QMatMul: case OpCode::DgeGrad: case OpCode::ClampOutliers:
      case OpCode::CheckFinite: case OpCode::Dequantize: case OpCode::QuantizeGrad:
        break;
    }
    return Status::Invalid(op.loc.str() + ": no gradient rule for " + std::string(op_info(op.code).name));
  }

  Graph& g_;
  Backward* out_;
  std::vector<bool> requires_;
  std::map<int, int> grads_;
  Loc loc_;
  int origin_ = -1;
  Status st_;
};

}  // namespace

Status build_backward(Graph& g, Backward* out) { return Differ(g, out).run(); }

}  // namespace sgrt::compiler
