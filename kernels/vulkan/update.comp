// SGD with momentum and AdamW (kernels/cpu/optimizer_update.cpp, PyTorch's
// order) over parameters, state and gradients in f32 or codes behind
// power-of-two scales (scales f32[kOptScaleLen], sgrt/quant.h): value =
// decode(code) / scale. One invocation per 4 elements (a word of E4M3, two of
// F16). Skipped when check_finite flagged the step.
// off = {param, grad, s1 (momentum or m), s2 (v), lr, train_state};
// p = {grad_coef word, scales word}; constant_id 1 = the dtypes, param | s1 << 4 |
// s2 << 8 | grad << 12 (specialized: an all-f32 update compiles no decode);
// dim = {scratch word, scale_w}; f = {momentum, weight_decay} (SGD) or
// {beta1, beta2, eps, weight_decay} (AdamW). OP = op code | phase << 8.
// Low-precision state takes the CPU's two passes (scratch: 3 amaxes, 3 scales):
//   1: the new values from the old scales; their amaxes (atomicMax on |x| bits)
//   2: one invocation: the next scales (cpu::next_scale)
//   3: the new values again (the same operations: identical), stored under them
//   4: one invocation: the scales tensor updated; scratch cleared
// An all-f32 update is phase 3 alone.
#version 450
#include "quant.glsl"
layout(local_size_x = 256) in;

const uint CODE = OP & 0xFFu, PHASE = OP >> 8;
const uint kStep = 0u, kSkipStep = 2u;
const uint kOptScaleM = 0u, kOptScaleV = 1u, kOptScaleW = 2u, kOptScaleG = 3u;  // OptScaleSlot

#define SC pc.p[1]
#define SCR pc.dim[0]
layout(constant_id = 1) const uint DTYPES = 0u;
uint dtype(uint k) { return (DTYPES >> (4u * k)) & 15u; }  // 0 param, 1 s1, 2 s2, 3 grad
uint nstate() { return CODE == OP_AdamwUpdate ? 2u : 1u; }

struct Vals { float w, s1, s2, g; };

// This step's constants: lr, grad_coef and AdamW's lr / (1 - b1^t),
// sqrt(1 - b2^t) and 1 - lr * weight_decay (set by main).
float lr, coef, stepsize, bc2_sqrt, decay;

void constants() {
  lr = F[pc.off[4]];
  coef = F[pc.p[0]];
  if (CODE != OP_AdamwUpdate) return;
  // b^t by repeated squaring: exact for t = 1, a few ulps otherwise, where
  // pow()'s exp2(t log2 b) may be off by far more for b near 1.
  float p1 = 1.0, p2 = 1.0, q1 = pc.f[0], q2 = pc.f[1];
  for (uint t = uint(I[pc.off[5] + kStep]) + 1u; t != 0u; t >>= 1, q1 *= q1, q2 *= q2)
    if ((t & 1u) != 0u) { p1 *= q1; p2 *= q2; }
  stepsize = lr / (1.0 - p1);
  bc2_sqrt = sqrt(1.0 - p2);
  decay = 1.0 - lr * pc.f[3];
}

// Element i after this step (old values read under the scales tensor's scales).
Vals step(uint i) {
  Vals x = Vals(load_scaled(dtype(0u), pc.off[0], i, F[SC + kOptScaleW]), load_scaled(dtype(1u), pc.off[2], i, F[SC + kOptScaleM]),
                nstate() == 2u ? load_scaled(dtype(2u), pc.off[3], i, F[SC + kOptScaleV]) : 0.0,
                load_scaled(dtype(3u), pc.off[1], i, F[SC + kOptScaleG]));
  if (CODE == OP_SgdUpdate) {
    float gi = x.g * coef + pc.f[1] * x.w;
    x.s1 = pc.f[0] * x.s1 + gi;
    x.w -= lr * x.s1;
    return x;
  }
  float b1 = pc.f[0], b2 = pc.f[1], gi = x.g * coef;
  x.w *= decay;
  x.s1 = b1 * x.s1 + (1.0 - b1) * gi;
  x.s2 = b2 * x.s2 + (1.0 - b2) * gi * gi;
  x.w -= stepsize * x.s1 / (sqrt(x.s2) / bc2_sqrt + pc.f[2]);
  return x;
}

// Stores v[0, count) at elements i0.. (i0 a multiple of 4): f32 as is, codes of v * scale.
void store4(uint dt, uint off, uint i0, uint count, float v[4], float scale) {
  if (dt == DT_F32) {
    for (uint j = 0u; j < count; ++j) F[off + i0 + j] = v[j];
    return;
  }
  uint bits = dt_bits(dt), per = 32u / bits;
  for (uint w = 0u; w * per < count; ++w) {
    uint word = 0u;
    for (uint j = 0u; j < per && w * per + j < count; ++j)
      word |= fmt_encode(fmt_of(dt), mul_pow2(v[w * per + j], log2_of(scale)), false, 0u) << (bits * j);
    U[off + i0 / per + w] = word;
  }
}

shared uint red[256];
uint wg_max(uint v) {
  uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) red[t] = max(red[t], red[t + s]);
    barrier();
  }
  uint r = red[0];
  barrier();
  return r;
}

// cpu::next_scale: f32 stays at 1; an amax of 0, inf or NaN keeps the scale.
float next_scale(uint dt, float scale, uint amax) {
  bool kept;
  return dt == DT_F32 ? 1.0 : pow2(scale_exponent(amax, fmt_max_bits(dt), 0, log2_of(scale), kept));
}

void main() {
  if (I[pc.off[5] + kSkipStep] != 0) return;
  constants();
  uint first = gl_GlobalInvocationID.x == 0u ? 1u : 0u;
  if (PHASE == 1u) {
    uint m[3] = uint[3](0u, 0u, 0u);
    FOR_EACH_INDEX(u, (pc.n + 3u) / 4u)
      for (uint i = 4u * u; i < min(4u * u + 4u, pc.n); ++i) {
        Vals x = step(i);
        float v[3] = float[3](x.w, x.s1, x.s2);
        for (uint k = 0u; k < 3u; ++k) {
          uint a = floatBitsToUint(v[k]) & 0x7FFFFFFFu;
          if (a <= 0x7F800000u) m[k] = max(m[k], a);  // std::max(amax, NaN) keeps amax
        }
      }
    for (uint k = 0u; k < 3u; ++k) {
      uint r = wg_max(m[k]);
      if (gl_LocalInvocationID.x == 0u && r != 0u) atomicMax(scratch[SCR + k], r);
    }
  } else if (PHASE == 2u && first != 0u) {
    uint slot[3] = uint[3](kOptScaleW, kOptScaleM, kOptScaleV);
    for (uint k = 0u; k < 3u; ++k) {
      float s = F[SC + slot[k]];
      bool scaled = k == 0u ? pc.dim[1] != 0u : k < nstate() + 1u;
      scratch[SCR + 3u + k] = floatBitsToUint(scaled ? next_scale(dtype(k), s, scratch[SCR + k]) : s);
    }
  } else if (PHASE == 3u) {
    float sc[3];
    for (uint k = 0u; k < 3u; ++k) sc[k] = uintBitsToFloat(scratch[SCR + 3u + k]);
    FOR_EACH_INDEX(u, (pc.n + 3u) / 4u) {
      uint i0 = 4u * u, count = min(4u, pc.n - i0);
      float w[4], s1[4], s2[4];
      for (uint j = 0u; j < count; ++j) {
        Vals x = step(i0 + j);
        w[j] = x.w;
        s1[j] = x.s1;
        s2[j] = x.s2;
      }
      store4(dtype(0u), pc.off[0], i0, count, w, sc[0]);
      store4(dtype(1u), pc.off[2], i0, count, s1, sc[1]);
      if (nstate() == 2u) store4(dtype(2u), pc.off[3], i0, count, s2, sc[2]);
    }
  } else if (PHASE == 4u && first != 0u) {
    F[SC + kOptScaleW] = uintBitsToFloat(scratch[SCR + 3u]);
    F[SC + kOptScaleM] = uintBitsToFloat(scratch[SCR + 4u]);
    if (nstate() == 2u) F[SC + kOptScaleV] = uintBitsToFloat(scratch[SCR + 5u]);
    for (uint k = 0u; k < 6u; ++k) scratch[SCR + k] = 0u;
  }
}
