#include "precision.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "recipes.h"
#include "scalify.h"
#include "sgrt/shape_infer.h"

namespace sgrt::compiler {
namespace {

struct Quantized { int q, scale, state; };
struct Clamped { int clamped, outliers; };

// fp8-static: how far above Scalify's estimate (a typical magnitude) a tensor's
// largest elements may go before the format saturates: 2^4 still leaves E4M3
// about 2^10 below the estimate before its subnormals (E5M2: 2^25).
constexpr int kEstimateHeadroomLog2 = 6;

class Rewriter {
 public:
  Rewriter(Graph& g, const Recipe& r) : g_(g), r_(r), info_(propagate_scales(g)) {}

  Status run() {
    SG_TRY(choose_kept());
    for (Program& p : g_.programs) {
      update_ = p.name == "train_step" || p.name == "grad_step";  // the training passes
      emitted_.clear();
      clamp_emitted_.clear();
      std::vector<Op> out;
      for (const Op& op : p.ops) {
        if (op.code != OpCode::MatMul || kept_.count(forward_index(op))) out.push_back(op);
        else SG_TRY(rewrite_matmul(op, &out));
      }
      if (update_ && r_.fp4_dge) SG_TRY(apply_dge(&out));
      p.ops = std::move(out);
    }
    annotate_unquantized();
    return Status::Ok();
  }

 private:
  int forward_index(const Op& op) const {
    if (op.origin >= 0) return op.origin;
    if (op.recomputes >= 0) return op.recomputes;
    for (size_t i = 0; i < g_.forward.size(); ++i)
      if (g_.forward[i].out == op.out) return static_cast<int>(i);
    return -1;
  }

  // Matmuls named by `keep` (a param name or its layer prefix) and, for recipes
  // that ask, the last forward matmul stay in f32.
  Status choose_kept() {
    int last = -1;
    std::set<std::string> used;
    std::vector<int> weighted;  // forward matmuls with a param operand
    for (size_t i = 0; i < g_.forward.size(); ++i) {
      const Op& op = g_.forward[i];
      if (op.code != OpCode::MatMul) continue;
      last = static_cast<int>(i);
      bool has_param = false;
      for (int in : op.in) has_param |= g_.t(in).role == sg::Role::param;
      if (has_param) weighted.push_back(last);
      else if (r_.keep_last_share > 0) kept_.insert(last);
      for (int in : op.in) {
        const std::string& n = g_.t(in).name;
        for (const std::string& k : g_.keep)
          if (n == k || n.rfind(k + ".", 0) == 0) {
            kept_.insert(static_cast<int>(i));
            used.insert(k);
          }
      }
    }
    for (const std::string& k : g_.keep)
      if (!used.count(k)) return Status::Invalid("precision override '" + k + "' names no matmul layer or parameter");
    if (r_.keep_last_layer && last >= 0) kept_.insert(last);
    if (r_.keep_last_share > 0 && !weighted.empty()) {
      size_t n = std::max<size_t>(1, static_cast<size_t>(std::ceil(r_.keep_last_share * weighted.size())));
      for (size_t i = weighted.size() - n; i < weighted.size(); ++i) kept_.insert(weighted[i]);
    }
    return Status::Ok();
  }

  Tensor& make_tensor(const std::string& name, TensorType type, sg::Role role, bool persistent, const Loc& loc, int* id) {
    Tensor t;
    t.name = name;
    t.type = std::move(type);
    t.role = role;
    t.persistent = persistent;
    t.loc = loc;
    *id = g_.add_tensor(std::move(t));
    return g_.tensors[*id];
  }

  // The scale of src in format f: compile time where Scalify proves a bound
  // (and the planner is on), otherwise the recipe's runtime source.
  ScaleSpec choose_scale(int src, const OperandFormat& f) const {
    const ScaleInfo& si = info_[src];
    ScaleSpec spec;
    spec.dtype = f.dtype;
    spec.granularity = f.granularity;
    spec.history = f.history;
    spec.static_log2 = static_cast<int>(std::lround(-std::log2(si.scale)));  // Scalify's estimate
    spec.hadamard = f.hadamard;
    spec.stochastic = f.stochastic;
    if (f.dtype == DType::bf16 || f.dtype == DType::f16) {
      spec.mode = ScaleMode::static_pow2;
      spec.static_log2 = 0;
      spec.rule = "16-bit float: no scaling needed";
    } else if (g_.plan_scales && f.granularity == QuantGranularity::tensor && si.bound > 0) {
      spec.mode = ScaleMode::static_pow2;
      spec.static_log2 = static_cast<int>(std::floor(std::log2(format_max(f.dtype) / si.bound)));
      spec.rule = "static: |x| <= " + std::to_string(si.bound) + " (" + si.rule + ")";
    } else if (g_.plan_scales && f.estimated) {
      // The estimate is a typical magnitude; the largest elements sit up to
      // 2^kEstimateHeadroomLog2 above it before the format saturates.
      spec.mode = ScaleMode::static_pow2;
      spec.static_log2 =
          static_cast<int>(std::floor(std::log2(format_max(f.dtype) / si.scale))) - kEstimateHeadroomLog2;
      spec.rule = "static from the estimate " + si.rule;
    } else if (is_block(f.granularity)) {
      spec.mode = ScaleMode::block;
      spec.rule = "block amax; Scalify estimate " + si.rule;
    } else if (f.history > 0) {
      spec.mode = ScaleMode::delayed_amax;
      spec.rule = "delayed amax over " + std::to_string(f.history) + " steps; Scalify estimate " + si.rule;
    } else {
      spec.mode = ScaleMode::current_amax;
      spec.rule = "current amax; Scalify estimate " + si.rule;
    }
    if (f.hadamard) spec.rule += "; random Hadamard transform along K";  // shown by `sgrt info`
    if (f.stochastic) spec.rule += "; stochastic rounding";
    return spec;
  }

  // quantize(src) in format f, emitted once per program and shared across
  // programs (the scale state persists; q is planned like any activation). The
  // scale plan is q's typed spec; the op's only attribute says whether this
  // program updates the state.
  Status quantize(int src, OperandFormat f, std::vector<Op>* out, Quantized* res) {
    if (!g_.plan_scales && f.dtype != DType::bf16) f = {f.dtype, QuantGranularity::tensor, 0};
    auto key = std::make_tuple(src, static_cast<int>(f.dtype), static_cast<int>(f.granularity), f.history,
                               f.hadamard, f.stochastic);
    const Tensor s = g_.t(src);  // a copy: make_tensor moves the tensors
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      // An outer-scaled tensor is quantized along each axis in turn: the axis names them apart.
      std::string base = s.name + "." + dtype_name(f.dtype) + (f.outer ? std::string(".") + granularity_name(f.granularity) : "") +
                         (f.hadamard ? ".rht" : "");
      ScaleSpec spec = choose_scale(src, f);
      std::vector<TensorType> types;
      SG_TRY(infer_types(OpCode::Quantize, {s.type, TensorType{{kStateHeader + f.history}, DType::f32}}, {}, &types, &spec)
                 .with_context(s.loc.str()));
      Quantized q;
      Loc loc = s.loc;
      make_tensor(base, types[0], s.role == sg::Role::grad ? sg::Role::grad : sg::Role::activation, false, loc, &q.q);
      make_tensor(base + ".scale", types[1], sg::Role::scale_state, true, loc, &q.scale);
      make_tensor(base + ".qstate", types[2], sg::Role::scale_state, true, loc, &q.state);
      spec.state_tensor = q.scale;
      g_.tensors[q.q].scale = std::move(spec);
      it = cache_.emplace(key, q).first;
    }
    const Quantized& q = it->second;
    Attrs a;
    a.set_i("update", update_);
    if (emitted_.insert(q.q).second)
      SG_TRY(g_.add_inplace_op_to(out, OpCode::Quantize, {src, q.state}, a, s.loc, {q.q, q.scale, q.state}));
    *res = q;
    return Status::Ok();
  }

  // clamp_outliers(src), emitted once per program and shared across programs as
  // quantize: an activation several GEMMs read (q, k and v's input) is clamped,
  // and then quantized, once.
  Status clamp(int src, const Loc& loc, std::vector<Op>* out, Clamped* res) {
    Attrs c;
    c.set_f("alpha", r_.clamp_alpha);
    auto it = clamped_.find(src);
    if (it == clamped_.end()) {
      std::vector<int> made;
      SG_TRY(g_.add_op_to(out, OpCode::ClampOutliers, {src}, c, loc, &made, sg::Role::activation));
      g_.tensors[made[0]].name = g_.t(src).name + ".clamped";
      g_.tensors[made[1]].name = g_.t(src).name + ".outliers";
      inherit(made[0], src);
      clamp_emitted_.insert(src);
      it = clamped_.emplace(src, Clamped{made[0], made[1]}).first;
    } else if (clamp_emitted_.insert(src).second) {
      SG_TRY(g_.add_inplace_op_to(out, OpCode::ClampOutliers, {src}, c, loc, {it->second.clamped, it->second.outliers}));
    }
    *res = it->second;
    return Status::Ok();
  }

  // A tensor the rewrite made (clamped, transposed) carries its source's estimate.
  void inherit(int id, int from) {
    if (info_.size() <= static_cast<size_t>(id)) info_.resize(id + 1);
    info_[id] = info_[from];
  }

  // Block scales run along a row of the stored matrix: if the contracting
  // dimension is the other one, hand the GEMM a transposed copy.
  Status k_major(int* src, bool* trans, bool is_b, std::vector<Op>* out, const Loc& loc) {
    bool rows_are_k = is_b ? !*trans : *trans;
    if (!rows_are_k) return Status::Ok();
    Status st;
    const Shape& s = g_.t(*src).type.shape;
    std::vector<int> res;
    int x = *src;
    if (s.size() != 2) {
      Attrs r;
      r.set_ints("shape", {numel(s) / s.back(), s.back()});
      SG_TRY(g_.add_op_to(out, OpCode::Reshape, {x}, r, loc, &res, g_.t(x).role));
      inherit(res[0], x);
      x = res[0];
    }
    Attrs t;
    t.set_ints("perm", {1, 0});
    SG_TRY(g_.add_op_to(out, OpCode::Transpose, {x}, t, loc, &res, g_.t(x).role));
    inherit(res[0], x);
    *src = res[0];
    *trans = !*trans;
    return Status::Ok();
  }

  Status rewrite_matmul(const Op& op, std::vector<Op>* out) {
    bool forward = op.origin < 0;
    bool trans[2] = {op.attrs.i("trans_a") != 0, op.attrs.i("trans_b") != 0};
    int src[2] = {op.in[0], op.in[1]};
    // A backward matmul without a weight operand is a weight gradient dW = dy^T x.
    const bool wgrad = !forward && g_.t(src[0]).role != sg::Role::param && g_.t(src[1]).role != sg::Role::param;
    const bool square_weight_blocks =
        is_k_chunked(r_.weight.granularity) || r_.weight.granularity == QuantGranularity::nvfp4_16x16;
    OperandFormat fmt[2];
    for (int i = 0; i < 2; ++i) {
      const Tensor& t = g_.t(src[i]);
      bool is_param = t.role == sg::Role::param;
      fmt[i] = forward ? (is_param ? r_.weight : r_.activation) : (t.role == sg::Role::grad ? r_.grad : r_.saved);
      // 128x128 and 16x16 weight blocks are square: the backward GEMMs read the same
      // quantized weight (transposed), as DeepSeek-V3's and NVIDIA's recipes do.
      if (is_param && square_weight_blocks) fmt[i] = r_.weight;
      // Both operands along the same K through the same orthogonal transform.
      if (wgrad && r_.hadamard_wgrad) fmt[i].hadamard = true;
      // Weights change every step: their own amax, in the backward GEMMs too
      // (so FP8 recipes reuse the forward's quantized copy).
      if (is_param) fmt[i].history = 0;
      // Per outer index: A's is M (its stored rows unless transposed), B's is N
      // (its stored rows only when transposed).
      bool rows_outer = i == 0 ? !trans[i] : trans[i];
      if (fmt[i].outer) fmt[i].granularity = rows_outer ? QuantGranularity::row : QuantGranularity::column;
    }
    // FP4 outlier clamping: the activation operand is clamped before quantizing
    // and the residual goes through an f32 matmul with the other operand.
    int residual = -1, act = -1;
    if (forward && r_.clamp_alpha > 0) {
      for (int i = 0; i < 2; ++i)
        if (g_.t(src[i]).role != sg::Role::param) act = i;
      if (act >= 0) {
        Clamped c;
        SG_TRY(clamp(src[act], op.loc, out, &c));
        residual = c.outliers;
        src[act] = c.clamped;
      }
    }
    Quantized q[2];
    int qsrc[2] = {src[0], src[1]};
    bool qtrans[2] = {trans[0], trans[1]};
    for (int i = 0; i < 2; ++i) {
      QuantGranularity gr = g_.plan_scales ? fmt[i].granularity : QuantGranularity::tensor;
      if (is_block(gr)) SG_TRY(k_major(&qsrc[i], &qtrans[i], i == 1, out, op.loc));
      SG_TRY(quantize(qsrc[i], fmt[i], out, &q[i]));
    }
    Attrs mm;  // each operand's granularity is its q tensor's spec
    mm.set_i("trans_a", qtrans[0]).set_i("trans_b", qtrans[1]);
    std::vector<int> in{q[0].q, q[0].scale, q[0].state, q[1].q, q[1].scale, q[1].state};
    if (residual < 0) return g_.add_inplace_op_to(out, OpCode::QMatMul, in, mm, op.loc, op.out);
    std::vector<int> main, comp, sum;
    SG_TRY(g_.add_op_to(out, OpCode::QMatMul, in, mm, op.loc, &main, sg::Role::activation));
    std::vector<int> cin{op.in[0], op.in[1]};
    cin[act] = residual;
    SG_TRY(g_.add_op_to(out, OpCode::MatMul, cin, op.attrs, op.loc, &comp, sg::Role::activation));
    return g_.add_inplace_op_to(out, OpCode::Add, {main[0], comp[0]}, {}, op.loc, op.out);
  }

  // FP4: each quantized weight's gradient is multiplied by the DGE derivative
  // right after it is complete; later ops (clipping, updates) read the result.
  Status apply_dge(std::vector<Op>* ops) {
    for (auto& [key, entry] : cache_) {
      auto [src, dtype, gran, hist, hadamard, stochastic] = key;
      if (static_cast<DType>(dtype) != DType::e2m1 || static_cast<QuantGranularity>(gran) != QuantGranularity::column ||
          g_.t(src).role != sg::Role::param)
        continue;
      int grad = -1;
      for (size_t id = 0; id < g_.tensors.size(); ++id)
        if (g_.tensors[id].grad_of == src) grad = static_cast<int>(id);
      if (grad < 0) continue;
      size_t last_write = 0;
      for (size_t i = 0; i < ops->size(); ++i)
        for (int o : (*ops)[i].out) if (o == grad) last_write = i;
      std::vector<Op> tail(ops->begin() + last_write + 1, ops->end());
      ops->resize(last_write + 1);
      std::vector<int> res;
      SG_TRY(g_.add_op_to(ops, OpCode::DgeGrad, {grad, src, entry.scale}, {}, g_.t(src).loc, &res, sg::Role::grad));
      g_.tensors[res[0]].name = g_.t(grad).name + ".dge";
      for (Op& op : tail)
        for (int& in : op.in) if (in == grad) in = res[0];
      ops->insert(ops->end(), tail.begin(), tail.end());
    }
    return Status::Ok();
  }

  // Tensors left in f32 still show their Scalify estimate in `sgrt info`.
  void annotate_unquantized() {
    for (size_t id = 0; id < info_.size(); ++id) {
      ScaleSpec& s = g_.tensors[id].scale;
      if (s.mode != ScaleMode::none || info_[id].rule.empty()) continue;
      s.static_log2 = static_cast<int>(std::lround(-std::log2(info_[id].scale)));
      s.rule = "f32; Scalify estimate " + info_[id].rule;
    }
  }

  Graph& g_;
  const Recipe& r_;
  std::vector<ScaleInfo> info_;
  std::set<int> kept_;
  bool update_ = false;
  std::set<int> emitted_;
  std::map<std::tuple<int, int, int, int, bool, bool>, Quantized> cache_;
  std::set<int> clamp_emitted_;
  std::map<int, Clamped> clamped_;  // by source tensor (one alpha per recipe)
};

}  // namespace

Status apply_precision(Graph& g) {
  Recipe r;
  SG_TRY(find_recipe(g.recipe, &r));
  SG_TRY(apply_switches(g.switches, &r));
  if (!r.low_precision) {
    for (const std::string& k : g.keep)
      if (g.find_tensor(k) < 0 && g.find_tensor(k + ".w") < 0)
        return Status::Invalid("precision override '" + k + "' names no matmul layer or parameter");
    return Status::Ok();
  }
  return Rewriter(g, r).run();
}

}  // namespace sgrt::compiler
