// Helpers of the suites that compare CPU kernels: the ISA levels this machine
// runs (each suite runs its kernels under set_isa_limit(isa), then resets to
// kTopIsa), and how many floats two results differ in, bit for bit.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/cpu_features.h"

namespace sgrt::test {

inline std::vector<cpu::Isa> isa_paths() {
  std::vector<cpu::Isa> v;
  for (cpu::Isa i : cpu::kIsas)
    if (i <= cpu::detected_isa()) v.push_back(i);
  return v;
}

inline int64_t differing_floats(const std::vector<float>& x, const std::vector<float>& y) {
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&x[i], &y[i], 4) != 0;
  return differ;
}

}  // namespace sgrt::test
