// check_finite (kernels/cpu/optimizer.cpp): flags the step when any gradient
// holds a NaN or inf and computes the clipping factor from the global norm, in
// three phases, one dispatch each (OP is the phase); off = {grad, -, -, -,
// train_state, grad_coef}, f[0] = clip:
//   0: clear the flag and the sum of squares (kept in grad_coef meanwhile);
//   1: one gradient (n elements), one workgroup: flag non-finite bits, add its
//      sum of squares (a fixed tree: deterministic);
//   2: the run and total counters, and grad_coef = min(1, clip / (norm + 1e-6))
//      when clip > 0 and the step is finite, else 1.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

const uint kSkipStep = 2u, kNonfiniteRun = 3u, kNonfiniteTotal = 4u;

shared float partial[256];

void main() {
  uint ts = pc.off[4], coef = pc.off[5], t = gl_LocalInvocationID.x;
  if (OP == 1u) {
    float acc = 0.0;
    bool bad = false;
    for (uint i = t; i < pc.n; i += 256u) {
      uint bits = U[pc.off[0] + i];
      bad = bad || (bits & 0x7F800000u) == 0x7F800000u;
      float g = uintBitsToFloat(bits);
      acc += g * g;
    }
    if (bad) I[ts + kSkipStep] = 1;
    partial[t] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
      if (t < s) partial[t] += partial[t + s];
      barrier();
    }
    if (t == 0u) F[coef] += partial[0];
    return;
  }
  if (t != 0u) return;
  if (OP == 0u) {
    I[ts + kSkipStep] = 0;
    F[coef] = 0.0;
  } else {
    int skip = I[ts + kSkipStep];
    I[ts + kNonfiniteRun] = skip != 0 ? I[ts + kNonfiniteRun] + 1 : 0;
    I[ts + kNonfiniteTotal] += skip;
    float clip = pc.f[0];
    F[coef] = skip == 0 && clip > 0.0 ? min(1.0, clip / (sqrt(F[coef]) + 1e-6)) : 1.0;
  }
}
