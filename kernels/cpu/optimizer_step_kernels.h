// Internal: optimizer_step.h's loops, written once and compiled per ISA by
// optimizer_step.cpp (the baseline) and optimizer_step_avx2.cpp / _avx512.cpp.
// Internal linkage, as elementwise_kernels.h, so no AVX-512 copy can reach the
// baseline path. IEEE adds, multiplies, divides and square roots with no
// contraction (kernels/CMakeLists.txt): every width gives the same bits, which are
// PyTorch's operation order element by element.
#pragma once
#include <cstdint>

#include "cpu/optimizer_step.h"

namespace sgrt::cpu {
namespace optimizer_step_impl {
namespace {

void run(const OptimizerStepArgs& args) {
  const OptimizerStepArgs a = args;  // a local copy: the stores cannot alias its fields
  float *w = a.w, *s1 = a.s1, *s2 = a.s2;
  const float* g = a.g;
  if (!a.adamw) {
    for (int64_t i = 0; i < a.n; ++i) {
      const float gi = g[i] * a.coef + a.wd * w[i];
      s1[i] = a.mu * s1[i] + gi;
    }
    if (!a.moments_only)
      for (int64_t i = 0; i < a.n; ++i) w[i] -= a.lr * s1[i];
    return;
  }
  const float c1 = 1.f - a.b1, c2 = 1.f - a.b2;
  for (int64_t i = 0; i < a.n; ++i) {
    const float gi = g[i] * a.coef;
    s1[i] = a.b1 * s1[i] + c1 * gi;
    s2[i] = a.b2 * s2[i] + c2 * gi * gi;
  }
  if (!a.moments_only)
    for (int64_t i = 0; i < a.n; ++i) w[i] = w[i] * a.decay - a.step * s1[i] / (__builtin_sqrtf(s2[i]) / a.bc2_sqrt + a.eps);
}

}  // namespace
}  // namespace optimizer_step_impl
}  // namespace sgrt::cpu
