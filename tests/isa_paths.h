// The CPU kernels' ISA levels this machine runs, lowest first: the suites that
// compare kernels run each with set_isa_limit(isa) (and reset to kTopIsa after).
#pragma once
#include <vector>

#include "cpu/cpu_features.h"

namespace sgrt::test {

inline std::vector<cpu::Isa> isa_paths() {
  std::vector<cpu::Isa> v;
  for (cpu::Isa i : cpu::kIsas)
    if (i <= cpu::detected_isa()) v.push_back(i);
  return v;
}

}  // namespace sgrt::test
