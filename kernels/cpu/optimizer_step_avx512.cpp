// The optimizer step at AVX-512 (16 lanes) width.
#include "cpu/optimizer_step_kernels.h"

namespace sgrt::cpu {

void optimizer_step_avx512(const OptimizerStepArgs& a) { optimizer_step_impl::run(a); }

}  // namespace sgrt::cpu
