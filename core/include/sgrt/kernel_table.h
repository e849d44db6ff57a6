// A backend's kernel table: (op, input dtypes, output dtypes) -> kernel. Every
// backend keeps one beside its kernels, in the same shape: kernels/<backend>/
// table.cpp defines kernel_table() (CPU kernels, CUDA binders, Vulkan lowerings).
#pragma once
#include <algorithm>
#include <vector>

#include "sgrt/dtype.h"
#include "sgrt/ops.h"

namespace sgrt {

// How an entry's dtypes admit an op's: exactly; variadic (the last input dtype
// repeats zero or more times); any (the op's shape rule already admits only dtypes the kernel handles).
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
        if (ins.size() + 1 < in.size() || out != outs) return false;
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

// A backend's table: an f32 entry to `elementwise` for every op of ops.def's
// elementwise families (shape unary or binary) that declares `backend`, then `rest`.
template <class Fn>
std::vector<KernelEntry<Fn>> with_elementwise(uint8_t backend, Fn elementwise, std::vector<KernelEntry<Fn>> rest) {
  std::vector<KernelEntry<Fn>> t;
  for (int c = 0; c < kNumOps; ++c) {
    const OpInfo& op = kOpInfo[c];
    if (op.shape == OpShape::own || !(op.backends & backend)) continue;
    std::vector<DType> in(op.shape == OpShape::unary ? 1 : 2, DType::f32);
    t.push_back({static_cast<OpCode>(c), std::move(in), {DType::f32}, elementwise});
  }
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

// Whether `table` has an entry for `code` with any dtypes.
template <class Fn>
bool table_has_op(const std::vector<KernelEntry<Fn>>& table, OpCode code) {
  return std::any_of(table.begin(), table.end(), [code](const KernelEntry<Fn>& e) { return e.code == code; });
}

}  // namespace sgrt
