#include "sgrt/dtype.h"

#include <cstring>

namespace sgrt {

static const char* const kDTypeNames[kNumDTypes] = {"f32", "f16", "bf16", "e4m3", "e5m2", "e2m1", "e8m0", "i32", "q8_0", "q4_1"};

const char* dtype_name(DType t) {
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDTypes ? kDTypeNames[i] : "invalid";
}

bool dtype_from_name(const char* name, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (std::strcmp(name, kDTypeNames[i]) == 0) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

}  // namespace sgrt
