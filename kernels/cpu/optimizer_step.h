// One pass of SGD or AdamW over elements [b, e) of a parameter, its state and its
// gradient, each f32 or the codes of a narrower format behind a power-of-two scale
// (cpu/optimizer_state.h): decoded, stepped and encoded a vector at a time, in
// registers, compiled per ISA (optimizer_step_kernels.h) so the conversions, the
// square root and the divide take the CPU's widest vectors. optimizer_update.cpp
// runs the passes. Plain pointers, as elementwise_args.h.
#pragma once
#include <cstdint>

#include "sgrt/dtype.h"

namespace sgrt::cpu {

struct OptimizerStepArgs {
  bool adamw;     // false: SGD with momentum
  bool store;     // false: the first pass, which only measures the new values' amaxes
  bool scale_w;   // the first pass measures the new parameter too (O3's master scale)
  DType wt, s1t, s2t, gt;
  void *w, *s1, *s2;  // parameter, first and second state (AdamW's m and v; SGD's momentum)
  const void* g;      // gradient, before grad_coef
  float inv[4];       // value = decode(code) * inv: w, s1, s2, g (1 for f32)
  float scale[3];     // code = encode(value * scale): w, s1, s2 (the second pass)
  float coef;         // the clip factor
  float lr, mu, wd;   // SGD
  float decay, b1, b2, step, bc2_sqrt, eps;  // AdamW (decay = 1 - lr wd, step = lr / (1 - b1^t))
};

// The dtypes (w, s1, s2, g) a kernel exists for: fp32, O1, and O2/O3 (f16 master,
// e4m3 m, f16 v, e5m2 gradient); SGD's missing s2 counts as f32 or f16.
bool optimizer_step_supports(DType w, DType s1, DType s2, DType g, bool adamw);

// One pass over [b, e). The first pass leaves in amax[0..2] the largest |new value|
// of w (only with scale_w), s1 and s2 as float bits (a NaN above every number);
// the second stores the new values.
void optimizer_step_avx2(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]);    // optimizer_step_avx2.cpp
void optimizer_step_avx512(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]);  // optimizer_step_avx512.cpp
// The widest ISA this CPU has (optimizer_step.cpp).
void optimizer_step(const OptimizerStepArgs& a, int64_t b, int64_t e, uint32_t amax[3]);

// sum g[i]^2 over [0, n) in double, row_reduce.h's lane order: check_finite's
// squared gradient norm (finite exactly when every g is), per ISA as above.
double grad_sum_squares_avx2(const float* g, int64_t n);
double grad_sum_squares_avx512(const float* g, int64_t n);
double grad_sum_squares(const float* g, int64_t n);

}  // namespace sgrt::cpu
