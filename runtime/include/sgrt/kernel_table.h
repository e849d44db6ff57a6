// A backend's kernel table: (op, input dtypes, output dtypes) -> kernel. The CPU
// kernels, the CUDA binders and the Vulkan lowerings each keep one.
#pragma once
#include <algorithm>
#include <vector>

#include "sgrt/dtype.h"
#include "sgrt/ops.h"

namespace sgrt {

// How an entry's dtypes admit an op's: exactly; variadic (the last input dtype
// repeats); any (the op's shape rule already admits only dtypes the kernel handles).
enum class KernelMatch { exact, variadic, any };

template <class Fn>
struct KernelEntry {
  OpCode code;
  std::vector<DType> in, out;
  Fn fn;
  KernelMatch match = KernelMatch::exact;

  bool matches(const std::vector<DType>& ins, const std::vector<DType>& outs) const {
    switch (match) {
      case KernelMatch::exact: return in == ins && out == outs;
      case KernelMatch::any: return true;
      case KernelMatch::variadic:
        if (ins.size() < in.size() || out != outs) return false;
        for (size_t k = 0; k < ins.size(); ++k)
          if (ins[k] != in[std::min(k, in.size() - 1)]) return false;
        return true;
    }
    return false;
  }
};

// The first entry of `table` for `code` whose dtypes match; nullptr if none.
template <class Fn>
Fn find_kernel(const std::vector<KernelEntry<Fn>>& table, OpCode code, const std::vector<DType>& in,
               const std::vector<DType>& out) {
  for (const KernelEntry<Fn>& e : table)
    if (e.code == code && e.matches(in, out)) return e.fn;
  return nullptr;
}

}  // namespace sgrt
