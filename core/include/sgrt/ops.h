// The op table, generated from ops.def.
#pragma once
#include <cstdint>
#include <string_view>

namespace sgrt {

enum class OpCode : int32_t {
#define OP(e, name, nin, nout) e,
#include "sgrt/ops.def"
#undef OP
  kCount
};
constexpr int kNumOps = static_cast<int>(OpCode::kCount);

struct OpInfo {
  std::string_view name;
  int num_inputs;   // -1: variadic
  int num_outputs;
};

inline constexpr OpInfo kOpInfo[] = {
#define OP(e, name, nin, nout) {name, nin, nout},
#include "sgrt/ops.def"
#undef OP
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == kNumOps, "ops.def and kOpInfo disagree");

inline const OpInfo& op_info(OpCode c) { return kOpInfo[static_cast<int>(c)]; }
inline bool op_code_valid(int32_t code) { return code >= 0 && code < kNumOps; }
// Returns false when no op has this name.
bool op_from_name(std::string_view name, OpCode* out);

}  // namespace sgrt
