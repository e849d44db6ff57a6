#include "sgrt/ops.h"

namespace sgrt {

namespace op_table {
// Names the rows of ops.def use, in scope only while the table is built.
namespace grad_of {
enum : int32_t {
#define OP(e, name, nin, nout, kind, shape, grad, rule, backends, version, attrs) e,
#include "sgrt/ops.def"
#undef OP
  Composite = kGradComposite,
  None = kGradNone,
};
}  // namespace grad_of
constexpr uint8_t CPU = kBackendCpu, CUDA = kBackendCuda, VK = kBackendVulkan;
using enum OpKind;
using enum OpShape;
using enum ScaleRule;
}  // namespace op_table

using namespace op_table;
const OpInfo kOpInfo[] = {
#define OP(e, name, nin, nout, kind, shape, g, rule, backends, version, attrs) \
  {name, nin, nout, kind, shape, grad_of::g, rule, backends, version, attrs},
#include "sgrt/ops.def"
#undef OP
};

bool op_from_name(std::string_view name, OpCode* out) {
  for (int i = 0; i < kNumOps; ++i) {
    if (kOpInfo[i].name == name) {
      *out = static_cast<OpCode>(i);
      return true;
    }
  }
  return false;
}

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::unset: return "unset";
    case AttrKind::i: return "i";
    case AttrKind::f: return "f";
    case AttrKind::ints: return "ints";
  }
  return "invalid";
}

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::forward: return "forward";
    case OpKind::gradient: return "gradient";
    case OpKind::optimizer: return "optimizer";
    case OpKind::precision: return "precision";
  }
  return "invalid";
}

const char* op_shape_name(OpShape s) {
  switch (s) {
    case OpShape::unary: return "unary";
    case OpShape::binary: return "binary";
    case OpShape::own: return "own";
  }
  return "invalid";
}

const char* scale_rule_name(ScaleRule r) {
  switch (r) {
    case ScaleRule::sum: return "sum";
    case ScaleRule::product: return "product";
    case ScaleRule::quotient: return "quotient";
    case ScaleRule::matmul: return "matmul";
    case ScaleRule::reduce_sum: return "reduce_sum";
    case ScaleRule::scale_alpha: return "scale_alpha";
    case ScaleRule::unchanged: return "unchanged";
    case ScaleRule::unchanged_dy: return "unchanged_dy";
    case ScaleRule::dy_scale: return "dy_scale";
    case ScaleRule::attention_grad: return "attention_grad";
    case ScaleRule::bounded_by_input: return "bounded_by_input";
    case ScaleRule::unit_range: return "unit_range";
    case ScaleRule::convex_of_v: return "convex_of_v";
    case ScaleRule::rotation: return "rotation";
    case ScaleRule::normalized_gain: return "normalized_gain";
    case ScaleRule::dropout: return "dropout";
    case ScaleRule::fill: return "fill";
    case ScaleRule::xent_grad: return "xent_grad";
    case ScaleRule::masked_xent_grad: return "masked_xent_grad";
    case ScaleRule::unscaled: return "unscaled";
  }
  return "invalid";
}

Status op_attr_decls(OpCode code, std::vector<AttrDecl>* out) {
  out->clear();
  std::string_view spec = op_info(code).attrs;
  while (!spec.empty()) {
    size_t end = spec.find(' ');
    std::string_view item = spec.substr(0, end);
    spec = end == std::string_view::npos ? std::string_view() : spec.substr(end + 1);
    if (item.empty()) continue;
    AttrDecl d;
    if (item.back() == '?') {
      d.required = false;
      item.remove_suffix(1);
    }
    size_t colon = item.find(':');
    std::string_view kind = colon == std::string_view::npos ? std::string_view() : item.substr(colon + 1);
    d.name = std::string(item.substr(0, colon));
    d.kind = kind == "i" ? AttrKind::i : kind == "f" ? AttrKind::f : kind == "ints" ? AttrKind::ints : AttrKind::unset;
    if (d.name.empty() || d.kind == AttrKind::unset)
      return Status::Invalid("ops.def: op " + std::string(op_info(code).name) + " declares a bad attribute '" +
                             std::string(item) + "'");
    out->push_back(std::move(d));
  }
  return Status::Ok();
}

}  // namespace sgrt
