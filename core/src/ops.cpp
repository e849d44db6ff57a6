#include "sgrt/ops.h"

namespace sgrt {

bool op_from_name(std::string_view name, OpCode* out) {
  for (int i = 0; i < kNumOps; ++i) {
    if (kOpInfo[i].name == name) {
      *out = static_cast<OpCode>(i);
      return true;
    }
  }
  return false;
}

}  // namespace sgrt
