// The optimizer step at AVX2 (8 lanes) width.
#include "cpu/optimizer_step_kernels.h"

namespace sgrt::cpu {

void optimizer_step_avx2(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]) {
  optimizer_step_impl::run<8>(a, b, e, amax);
}

double grad_sum_squares_avx2(const float* g, int64_t n) { return optimizer_step_impl::sum_squares(g, n); }

}  // namespace sgrt::cpu
