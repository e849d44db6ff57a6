// quantize_grad (kernels/cpu/optimizer_update.cpp): a gradient to E4M3, E5M2 or
// F16 under its current amax, with its L2 norm, in the optimizer's scales
// (scales[kOptScaleG], scales[kOptGradNorm]); a non-finite gradient keeps the
// scale (its norm is inf or NaN and flags the step). off = {grad, q, scales};
// n; p[0] = q's dtype; dim[0] = scratch word: amax bits, non-finite flags
// (1: inf, 2: NaN), then one partial sum of squares per workgroup. OP = phase:
//   0: amax (NaN ignored, as std::max) and the non-finite flags
//   1: per workgroup, the sum of (g 2^-k)^2 with 2^k <= amax (no overflow), a fixed tree
//   2: one invocation: the partials in order, the scale and norm; scratch cleared
//   3: the codes, one invocation per output word
#version 450
#include "quant.glsl"
layout(local_size_x = 256) in;

const uint kOptScaleG = 3u, kOptGradNorm = 4u;
#define G pc.off[0]
#define SC pc.off[2]
#define SCR pc.dim[0]

shared float partial[256];

// k with amax = m 2^k, m in [1, 2).
int amax_exponent(uint amax) {
  int e;
  frexp24(amax, e);
  return e - 1;
}

void main() {
  uint t = gl_LocalInvocationID.x, amax = scratch[SCR];
  if (OP == 0u) {
    uint m = 0u, bad = 0u;
    FOR_EACH_INDEX(i, pc.n) {
      uint a = U[G + i] & 0x7FFFFFFFu;
      if (a < 0x7F800000u) m = max(m, a);
      else bad |= a == 0x7F800000u ? 1u : 2u;
    }
    if (m != 0u) atomicMax(scratch[SCR], m);
    if (bad != 0u) atomicOr(scratch[SCR + 1u], bad);
  } else if (OP == 1u) {
    int k = amax == 0u ? 0 : amax_exponent(amax);
    float acc = 0.0;
    FOR_EACH_INDEX(i, pc.n) {
      float g = mul_pow2(F[G + i], -k);
      acc += g * g;
    }
    partial[t] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
      if (t < s) partial[t] += partial[t + s];
      barrier();
    }
    if (t == 0u) scratch[SCR + 2u + gl_WorkGroupID.x] = floatBitsToUint(partial[0]);
  } else if (OP == 2u) {
    if (gl_GlobalInvocationID.x != 0u) return;
    uint bad = scratch[SCR + 1u], groups = pc.p[1];
    float sum = 0.0;
    for (uint w = 0u; w < groups; ++w) sum += uintBitsToFloat(scratch[SCR + 2u + w]);
    if (bad == 0u) {
      bool kept;
      F[SC + kOptScaleG] = pow2(scale_exponent(amax, fmt_max_bits(pc.p[0]), 0, log2_of(F[SC + kOptScaleG]), kept));
      F[SC + kOptGradNorm] = mul_pow2(sqrt(sum), amax == 0u ? 0 : amax_exponent(amax));
    } else {
      F[SC + kOptGradNorm] = uintBitsToFloat((bad & 2u) != 0u ? 0x7FC00000u : 0x7F800000u);
    }
    for (uint w = 0u; w < 2u + groups; ++w) scratch[SCR + w] = 0u;
  } else {
    uint dt = pc.p[0], bits = dt_bits(dt), per = 32u / bits;
    int e = log2_of(F[SC + kOptScaleG]);
    FOR_EACH_INDEX(w, (pc.n + per - 1u) / per) {
      uint word = 0u;
      for (uint j = 0u; j < per && w * per + j < pc.n; ++j)
        word |= fmt_encode(fmt_of(dt), mul_pow2(F[G + w * per + j], e), false, 0u) << (bits * j);
      U[pc.off[1] + w] = word;
    }
  }
}
