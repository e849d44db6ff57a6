// The op table, generated from ops.def: one OpInfo per op code.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sgrt/attrs.h"
#include "sgrt/status.h"

namespace sgrt {

enum class OpCode : int32_t {
#define OP(e, name, nin, nout, kind, shape, grad, rule, backends, version, attrs) e,
#include "sgrt/ops.def"
#undef OP
  kCount
};
constexpr int kNumOps = static_cast<int>(OpCode::kCount);

enum class OpKind : uint8_t { forward, gradient, optimizer, precision };

// ops.def's shape column: elementwise families whose shape rule and kernel-table
// entries come from the table, or `own`.
enum class OpShape : uint8_t { unary, binary, own };

// How Scalify's planner (compiler/scalify.cpp) estimates an op's first output
// scale s and bound b from its inputs' (NUMERICS.md §3). Every op names one;
// the planner's switch over this enum has no default.
enum class ScaleRule : uint8_t {
  sum,               // add, sub: s = P(max sqrt(1 + (min/max)^2)), b = ba + bb
  product,           // s = sa sb, b = ba bb
  quotient,          // s = sa / sb, unbounded
  matmul,            // s = sa sb P(sqrt(K))
  reduce_sum,        // s = sa P(sqrt(N)), b = ba N
  scale_alpha,       // s = P(sa |alpha|)
  unchanged,         // s, b of input 0 (layout ops, neg, relu, mean, max, embedding rows)
  unchanged_dy,      // s, b of input 1 (relu_grad's dy)
  bounded_by_input,  // |f(x)| <= |x|: s, b of input 0 (gelu, silu)
  unit_range,        // output in [-1, 1]: s = b = 1
  convex_of_v,       // attention: convex combinations of v's (input 2) rows
  rotation,          // rope: s of input 0, b sqrt(2) times
  normalized_gain,   // norms: unit-RMS rows times the gain's (input 1) scale
  dropout,           // s = P(sa / (1 - p))
  fill,              // |value|
  xent_grad,         // (softmax - onehot) / N * dloss: |dloss| / N
  masked_xent_grad,  // (softmax - onehot) mask_r / sum(mask) * dloss: s = |dloss| / N, b = |dloss|
  unscaled,          // not estimated: outputs not seeded otherwise get scale 1
  dy_scale,          // gradients whose derivative is of order 1 (gelu, silu, tanh, sigmoid):
                     // every output takes the last input's (dy's) scale, no bound
  attention_grad,    // (q, k, v, y, lse, dy) -> dq ~ s_dy s_v s_k, dk ~ s_dy s_v s_q, dv ~ s_dy
};

// The kernel tables that implement an op (ops.def's backends column).
enum BackendMask : uint8_t { kBackendCpu = 1, kBackendCuda = 2, kBackendVulkan = 4 };

// The gradient column: an op code, or one of these.
constexpr int32_t kGradComposite = -1;  // autodiff emits ordinary ops
constexpr int32_t kGradNone = -2;       // no gradient flows through it

struct OpInfo {
  std::string_view name;
  int num_inputs;   // -1: variadic
  int num_outputs;
  OpKind kind;
  OpShape shape;
  int32_t gradient;  // OpCode, kGradComposite or kGradNone
  ScaleRule scale_rule;
  uint8_t backends;  // BackendMask bits
  int version;
  std::string_view attrs;  // "name:kind[?] ..." (ops.def's header)
};

// One row per op, in ops.def's order (core/src/ops.cpp). Defined once there,
// not inline here: an inline table is a copy in every object that reads it
// (3.6 KB each in the static library, which the size check counts).
extern const OpInfo kOpInfo[kNumOps];

inline const OpInfo& op_info(OpCode c) { return kOpInfo[static_cast<int>(c)]; }
inline bool op_is_elementwise(OpCode c) { return op_info(c).shape != OpShape::own; }
inline bool op_code_valid(int32_t code) { return code >= 0 && code < kNumOps; }
// The input that an op's output `out` writes in place, or -1: kv_attention
// appends to its caches (outputs 1, 2 are inputs 3, 4), running_stat updates its
// running statistic (output 1 is input 1). The compiler gives such an output the
// input's tensor.
inline int op_inplace_input(OpCode c, int out) {
  if (c == OpCode::KvAttention && out > 0) return out + 2;
  if (c == OpCode::RunningStat && out == 1) return 1;
  return -1;
}
// The input whose bytes an op's output 0 may take when no op reads that input
// later, or -1. Every backend's kernel for such an op reads each element (and
// whatever else of the input it needs) before writing that element of the
// output: the cross-entropy gradients, whose output is the logits' shape (a
// language model's [tokens, vocabulary], the largest tensor of its step).
inline int op_overwritable_input(OpCode c) {
  return c == OpCode::SoftmaxXentGrad || c == OpCode::MaskedXentGrad ? 0 : -1;
}
// Returns false when no op has this name.
bool op_from_name(std::string_view name, OpCode* out);

// An op's declared attribute (ops.def's last column, parsed).
struct AttrDecl {
  std::string name;
  AttrKind kind = AttrKind::unset;
  bool required = true;
};
// The attributes `code` declares; an error names the op when its column does not parse.
Status op_attr_decls(OpCode code, std::vector<AttrDecl>* out);
const char* attr_kind_name(AttrKind k);
const char* op_kind_name(OpKind k);
const char* op_shape_name(OpShape s);
const char* scale_rule_name(ScaleRule r);

}  // namespace sgrt
