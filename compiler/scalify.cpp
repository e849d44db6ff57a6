#include "scalify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sgrt::compiler {

double pow2_floor(double x) { return x > 0 ? std::exp2(std::floor(std::log2(x))) : 0.0; }

double add_scale(double sa, double sb) {
  double hi = std::max(sa, sb), lo = std::min(sa, sb);
  return pow2_floor(hi * std::sqrt(1.0 + (lo / hi) * (lo / hi)));
}

double matmul_scale(double sa, double sb, int64_t k) { return sa * sb * pow2_floor(std::sqrt(static_cast<double>(k))); }

double reduce_sum_scale(double sa, int64_t n) { return sa * pow2_floor(std::sqrt(static_cast<double>(n))); }

double rescale_factor(const std::vector<float>& data, RescaleNorm norm) {
  double acc = 0;
  for (float v : data) {
    double a = std::fabs(v);
    if (norm == RescaleNorm::max) acc = std::max(acc, a);
    else acc += norm == RescaleNorm::l1 ? a : a * a;
  }
  double n = static_cast<double>(data.size());
  if (norm == RescaleNorm::l1) acc /= n;
  if (norm == RescaleNorm::l2) acc = std::sqrt(acc / n);
  return std::max(pow2_floor(acc), std::exp2(-14.0));
}

namespace {

std::string num(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string p2(double s) { return "2^" + std::to_string(static_cast<int>(std::lround(std::log2(s)))); }

// A parameter's initial standard deviation, the scale Scalify starts it at.
double init_scale(const Tensor& t) {
  switch (t.init.kind) {
    case sg::InitKind::uniform: return pow2_floor(std::max(1e-30, (t.init.b - t.init.a) / std::sqrt(12.0)));
    case sg::InitKind::normal: return pow2_floor(std::max(1e-30, static_cast<double>(t.init.b)));
    default: return 1.0;
  }
}

class Propagator {
 public:
  explicit Propagator(const Graph& g) : g_(g), info_(g.tensors.size()) {}

  std::vector<ScaleInfo> run() {
    for (size_t id = 0; id < g_.tensors.size(); ++id) seed(static_cast<int>(id));
    for (const Program& p : g_.programs)
      for (const Op& op : p.ops) visit(op);
    return std::move(info_);
  }

 private:
  void seed(int id) {
    const Tensor& t = g_.tensors[id];
    ScaleInfo& s = info_[id];
    if (t.role == sg::Role::param) {
      s = {init_scale(t), -1, "param init std"};
    } else if (t.role == sg::Role::input && t.range) {
      double bound = std::max(std::fabs(t.range->lo), std::fabs(t.range->hi));
      s = {bound > 0 ? pow2_floor(bound) : 1.0, bound,
           "declared range [" + num(t.range->lo) + ", " + num(t.range->hi) + "]"};
    } else if (t.role == sg::Role::input) {
      s = {1.0, -1, "input, unit scale assumed"};
    }
  }

  void set(int id, double scale, double bound, std::string rule) { info_[id] = {scale, bound, std::move(rule)}; }

  void visit(const Op& op) {
    auto in = [&](size_t i) -> const ScaleInfo& { return info_[op.in[i]]; };
    auto bounded = [&](size_t i) { return in(i).bound >= 0; };
    int y = op.out.empty() ? -1 : op.out[0];
    std::string name(op_info(op.code).name);
    switch (op_info(op.code).scale_rule) {  // ops.def's scale rule column; no default
      case ScaleRule::sum: {
        double s = add_scale(in(0).scale, in(1).scale);
        set(y, s, bounded(0) && bounded(1) ? in(0).bound + in(1).bound : -1, name + ": P(max sqrt(1 + (min/max)^2)) = " + p2(s));
        break;
      }
      case ScaleRule::product:
        set(y, in(0).scale * in(1).scale, bounded(0) && bounded(1) ? in(0).bound * in(1).bound : -1, name + ": sa sb");
        break;
      case ScaleRule::quotient: set(y, in(0).scale / in(1).scale, -1, name + ": sa / sb"); break;
      case ScaleRule::matmul: {
        const Shape& a = g_.t(op.in[0]).type.shape;
        int64_t k = op.attrs.i("trans_a") ? numel(a) / a.back() : a.back();
        double s = matmul_scale(in(0).scale, in(1).scale, k);
        set(y, s, -1, name + ": sa sb P(sqrt(" + std::to_string(k) + ")) = " + p2(s));
        break;
      }
      case ScaleRule::reduce_sum: {
        int64_t n = numel(g_.t(op.in[0]).type.shape) / std::max<int64_t>(1, numel(g_.t(y).type.shape));
        double s = reduce_sum_scale(in(0).scale, n);
        set(y, s, bounded(0) ? in(0).bound * static_cast<double>(n) : -1, name + ": sa P(sqrt(" + std::to_string(n) + "))");
        break;
      }
      case ScaleRule::scale_alpha: {
        double a = std::fabs(op.attrs.f("alpha"));
        set(y, pow2_floor(in(0).scale * a), bounded(0) ? in(0).bound * a : -1, name + ": sa |alpha|");
        break;
      }
      case ScaleRule::unchanged: set(y, in(0).scale, in(0).bound, name + ": scale unchanged"); break;
      case ScaleRule::unchanged_dy: set(y, in(1).scale, in(1).bound, name + ": dy's scale unchanged"); break;
      case ScaleRule::bounded_by_input:
        set(y, in(0).scale, bounded(0) ? in(0).bound : -1, name + ": |" + name + "(x)| <= |x|");
        break;
      case ScaleRule::unit_range: set(y, 1.0, 1.0, name + ": output in [-1, 1]"); break;
      case ScaleRule::convex_of_v: set(y, in(2).scale, in(2).bound, name + ": convex combinations of v's rows"); break;
      case ScaleRule::rotation:  // each pair turns: |y| <= sqrt(2) max|x|
        set(y, in(0).scale, bounded(0) ? in(0).bound * std::sqrt(2.0) : -1, name + ": a rotation, scale unchanged");
        break;
      case ScaleRule::normalized_gain: set(y, in(1).scale, -1, name + ": unit-RMS rows times the gain's scale"); break;
      case ScaleRule::dropout: {
        double keep = 1.0 / (1.0 - op.attrs.f("p"));
        set(y, pow2_floor(in(0).scale * keep), bounded(0) ? in(0).bound * keep : -1, name + ": sa / (1 - p)");
        break;
      }
      case ScaleRule::fill:
        set(y, pow2_floor(std::max(1e-30, std::fabs(op.attrs.f("value")))), std::fabs(op.attrs.f("value")), name);
        break;
      case ScaleRule::xent_grad: {
        // (softmax - onehot) / N * dloss: each entry within |dloss| / N.
        double n = static_cast<double>(g_.t(op.in[0]).type.shape[0]);
        double b = bounded(2) ? in(2).bound / n : -1;
        set(y, pow2_floor(in(2).scale / n), b, name + ": |dloss| / N");
        break;
      }
      case ScaleRule::masked_xent_grad: {
        // (softmax - onehot) mask_r / sum(mask) * dloss: |dloss| / N when every row
        // counts; a row is bounded by |dloss| only (it may be the one that counts).
        double n = static_cast<double>(g_.t(op.in[0]).type.shape[0]);
        set(y, pow2_floor(in(3).scale / n), bounded(3) ? in(3).bound : -1, name + ": |dloss| / N, within |dloss|");
        break;
      }
      case ScaleRule::dy_scale:
        for (int o : op.out) set(o, info_[op.in.back()].scale, -1, name + ": dy's scale (a derivative of order 1)");
        break;
      case ScaleRule::attention_grad: {
        // dv = P^T dy: convex combinations, dy's scale. dq = dS K / sqrt(Dh) with
        // dS = P (dy v^T - rowsum): the softmax weights keep the sums convex and
        // the sqrt(Dh) of dy v^T cancels the 1 / sqrt(Dh); dk alike with q.
        const double dy = in(5).scale;
        set(op.out[0], dy * in(2).scale * in(1).scale, -1, name + ": dq ~ s_dy s_v s_k");
        set(op.out[1], dy * in(2).scale * in(0).scale, -1, name + ": dk ~ s_dy s_v s_q");
        set(op.out[2], dy, -1, name + ": dv ~ s_dy");
        break;
      }
      case ScaleRule::unscaled:
        for (int o : op.out)
          if (info_[o].rule.empty()) set(o, 1.0, -1, name + ": unscaled in FP32, output scale 1");
        break;
    }
  }

  const Graph& g_;
  std::vector<ScaleInfo> info_;
};

}  // namespace

std::vector<ScaleInfo> propagate_scales(const Graph& g) { return Propagator(g).run(); }

}  // namespace sgrt::compiler
