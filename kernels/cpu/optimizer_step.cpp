// optimizer_step_kernels.h at the baseline's 4 lanes, and the choice of the CPU's
// widest copy.
#if defined(__aarch64__)
#define SGRT_QUANT_NEON 1  // quantize_simd.h's fcvtn/fcvtl and xtn/uxtl (NEON is AArch64's baseline)
#endif
#include "cpu/cpu_features.h"
#include "cpu/optimizer_step_kernels.h"

namespace sgrt::cpu {

bool optimizer_step_supports(DType w, DType s1, DType s2, DType g, bool adamw) {
  using D = DType;
  const bool s2_ok = !adamw || s2 == (s1 == D::e4m3 ? D::f16 : D::f32);
  if (w == D::f32) return s1 == D::f32 && s2_ok && g == D::f32;
  return w == D::f16 && (s1 == D::f32 || s1 == D::e4m3) && s2_ok && g == D::e5m2;
}

void optimizer_step(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]) {
#if defined(__x86_64__)
  if (active_isa() >= Isa::avx512) return optimizer_step_avx512(a, b, e, amax);
  if (active_isa() >= Isa::avx2) return optimizer_step_avx2(a, b, e, amax);
#endif
  optimizer_step_impl::run<4>(a, b, e, amax);
}

double grad_sum_squares(const float* g, int64_t n) {
#if defined(__x86_64__)
  if (active_isa() >= Isa::avx512) return grad_sum_squares_avx512(g, n);
  if (active_isa() >= Isa::avx2) return grad_sum_squares_avx2(g, n);
#endif
  return optimizer_step_impl::sum_squares(g, n);
}

}  // namespace sgrt::cpu
