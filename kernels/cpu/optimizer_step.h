// One optimizer step over a block of f32 values, in place: the arithmetic of SGD
// and AdamW, compiled per ISA (optimizer_step_kernels.h) so its square root and
// divide take the CPU's widest vectors. optimizer_update.cpp decodes the state
// into these blocks and encodes it back. Plain pointers, as elementwise_args.h.
#pragma once
#include <cstdint>

namespace sgrt::cpu {

struct OptimizerStepArgs {
  bool adamw;          // false: SGD with momentum
  bool moments_only;   // the state's new values only; w is neither read by AdamW nor written
  int64_t n;
  float *w, *s1, *s2;  // parameter, first and second state (AdamW's m and v; SGD's momentum)
  const float* g;      // gradient, before grad_coef
  float coef;          // the clip factor
  float lr, mu, wd;    // SGD
  float decay, b1, b2, step, bc2_sqrt, eps;  // AdamW (decay = 1 - lr wd, step = lr / (1 - b1^t))
};

void optimizer_step_avx2(const OptimizerStepArgs& a);    // optimizer_step_avx2.cpp
void optimizer_step_avx512(const OptimizerStepArgs& a);  // optimizer_step_avx512.cpp
void optimizer_step(const OptimizerStepArgs& a);         // optimizer_step.cpp: the widest ISA this CPU has

}  // namespace sgrt::cpu
