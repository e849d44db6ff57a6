// optimizer_step_kernels.h at the CPU's widest vectors.
#include "cpu/cpu_features.h"
#include "cpu/optimizer_step_kernels.h"

namespace sgrt::cpu {

void optimizer_step(const OptimizerStepArgs& a) {
#if defined(__x86_64__)
  // The square root and divide are most of an O2 update's arithmetic.
  if (active_isa() >= Isa::avx512) return optimizer_step_avx512(a);
  if (active_isa() >= Isa::avx2) return optimizer_step_avx2(a);
#endif
  optimizer_step_impl::run(a);
}

}  // namespace sgrt::cpu
