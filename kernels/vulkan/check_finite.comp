// check_finite (kernels/cpu/optimizer.cpp): flags the step when any gradient
// holds a NaN or inf and computes the clipping factor from the global norm.
// off = {grad, -, -, -, train_state, grad_coef}, f[0] = clip, p[0] = the
// scratch words of one gradient (OP 0) or of the first of n (OP 1): two each,
// its sum of squares (float bits) and its flag.
//   0: one gradient (n elements), one workgroup, beside the other gradients'
//      workgroups: the flag when any element's bits are non-finite, and the
//      sum of squares (a fixed tree: deterministic);
//   1: the n gradients' sums added in gradient order, the skip flag, the run
//      and total counters, grad_coef = min(1, clip / (norm + 1e-6)) when
//      clip > 0 and the step is finite, else 1; the scratch words cleared.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

const uint kSkipStep = 2u, kNonfiniteRun = 3u, kNonfiniteTotal = 4u;

shared float partial[256];

void main() {
  uint ts = pc.off[4], coef = pc.off[5], words = pc.p[0], t = gl_LocalInvocationID.x;
  if (OP == 0u) {
    float acc = 0.0;
    bool bad = false;
    for (uint i = t; i < pc.n; i += 256u) {
      uint bits = U[pc.off[0] + i];
      bad = bad || (bits & 0x7F800000u) == 0x7F800000u;
      float g = uintBitsToFloat(bits);
      acc += g * g;
    }
    if (bad) scratch[words + 1u] = 1u;  // every writer writes 1
    partial[t] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
      if (t < s) partial[t] += partial[t + s];
      barrier();
    }
    if (t == 0u) scratch[words] = floatBitsToUint(partial[0]);
    return;
  }
  if (t != 0u) return;
  float sum = 0.0;
  uint bad = 0u;
  for (uint k = 0u; k < pc.n; ++k, words += 2u) {
    sum += uintBitsToFloat(scratch[words]);
    bad |= scratch[words + 1u];
    scratch[words] = 0u;
    scratch[words + 1u] = 0u;
  }
  int skip = bad != 0u ? 1 : 0;
  I[ts + kSkipStep] = skip;
  I[ts + kNonfiniteRun] = skip != 0 ? I[ts + kNonfiniteRun] + 1 : 0;
  I[ts + kNonfiniteTotal] += skip;
  float clip = pc.f[0];
  F[coef] = skip == 0 && clip > 0.0 ? min(1.0, clip / (sqrt(sum) + 1e-6)) : 1.0;
}
