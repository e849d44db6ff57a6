// GLSL mirror of formats.h (Vulkan compute): the same integer algorithms, so every
// backend encodes and decodes bit for bit alike. Include after `#version 450`.
// Spec fields: exp_bits, man_bits, bias, max_code, nan_code, inf_code, saturate, nan_is_max.
#ifndef SGRT_FORMATS_GLSL
#define SGRT_FORMATS_GLSL

struct FmtSpec {
  int exp_bits; int man_bits; int bias;
  uint max_code; uint nan_code; uint inf_code;
  bool saturate; bool nan_is_max;
};
const FmtSpec FMT_E4M3 = FmtSpec(4, 3, 7, 0x7Eu, 0x7Fu, 0u, true, true);
const FmtSpec FMT_E5M2 = FmtSpec(5, 2, 15, 0x7Bu, 0x7Fu, 0x7Cu, true, false);
const FmtSpec FMT_E2M1 = FmtSpec(2, 1, 1, 0x7u, 0x7u, 0u, true, false);
const FmtSpec FMT_F16 = FmtSpec(5, 10, 15, 0x7BFFu, 0x7FFFu, 0x7C00u, false, false);
const FmtSpec FMT_BF16 = FmtSpec(8, 7, 127, 0x7F7Fu, 0x7FFFu, 0x7F80u, false, false);

uint fmt_shift_round(uint v, int s, bool stochastic, uint noise) {
  if (s >= 32) return 0u;
  uint mask = (1u << uint(s)) - 1u;
  if (stochastic) return (v + (noise & mask)) >> uint(s);
  uint q = v >> uint(s), rem = v & mask, half_ = 1u << uint(s - 1);
  return q + ((rem > half_ || (rem == half_ && (q & 1u) != 0u)) ? 1u : 0u);
}

uint fmt_encode(FmtSpec S, float x, bool stochastic, uint noise) {
  uint u = floatBitsToUint(x);
  uint sgn = (u >> 31) << uint(S.exp_bits + S.man_bits);
  uint a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return S.nan_code;
  uint over = sgn | (S.saturate ? S.max_code : S.inf_code);
  if (a == 0x7F800000u) return over;
  int fe = int(a >> 23);
  uint m = fe != 0 ? ((a & 0x7FFFFFu) | 0x800000u) : a;
  int te = (fe != 0 ? fe : 1) - 127 + S.bias;
  int shift = 23 - S.man_bits + (te < 1 ? 1 - te : 0);
  if (te > (1 << S.exp_bits)) return over;
  uint base = te < 1 ? 0u : uint(te - 1) << uint(S.man_bits);
  uint code = base + fmt_shift_round(m, shift, stochastic, noise);
  return code > S.max_code ? over : (sgn | code);
}

float fmt_decode(FmtSpec S, uint code) {
  int nbits = S.exp_bits + S.man_bits;
  uint sgn = ((code >> uint(nbits)) & 1u) << 31;
  uint mag = code & ((1u << uint(nbits)) - 1u);
  uint e = mag >> uint(S.man_bits), m = mag & ((1u << uint(S.man_bits)) - 1u);
  uint emax = (1u << uint(S.exp_bits)) - 1u;
  if ((S.nan_is_max && mag == (1u << uint(nbits)) - 1u) || (S.inf_code != 0u && e == emax))
    return uintBitsToFloat(sgn | ((m != 0u || S.nan_is_max) ? 0x7FC00000u : 0x7F800000u));
  if (e == 0u) {
    int p = 1 - S.bias - S.man_bits;
    float scale = p >= -126 ? uintBitsToFloat(uint(p + 127) << 23) : uintBitsToFloat(1u << uint(p + 149));
    return uintBitsToFloat(sgn | floatBitsToUint(float(m) * scale));
  }
  return uintBitsToFloat(sgn | ((e - uint(S.bias) + 127u) << 23) | (m << uint(23 - S.man_bits)));
}

// E8M0: 2^(code - 127), 0xFF = NaN. round_up: CUDA's cudaRoundPosInf, else cudaRoundZero.
uint fmt_e8m0_encode(float x, bool round_up) {
  uint a = floatBitsToUint(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0xFFu;
  uint b = round_up ? (a >> 16) + ((a & 0xFFFFu) != 0u ? 1u : 0u) : a >> 16;
  uint e = b >> 7;
  if (round_up && (b & 0x7Fu) != 0u && b > 0x40u && b < 0x7F80u) e += 1u;
  return e >= 0xFFu ? 0xFEu : e;
}
float fmt_e8m0_decode(uint c) {
  c &= 0xFFu;
  if (c == 0xFFu) return uintBitsToFloat(0x7FC00000u);
  return uintBitsToFloat(c != 0u ? c << 23 : 0x00400000u);
}

// Counter-based random word for stochastic rounding (same as fmt::sr_random; the
// index here is 32-bit, equal to the C++ one for indices below 2^32).
uint fmt_mix32(uint x) {
  x ^= x >> 16; x *= 0x7FEB352Du;
  x ^= x >> 15; x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}
uint fmt_sr_random(uint seed, uint index) { return fmt_mix32(fmt_mix32(index ^ fmt_mix32(seed + 0x9E3779B9u))); }

// GGUF's block formats (gguf_blocks.h): one element from its block's f16 fields
// (as bits) and its code. `precise`: ggml's order (product, then sum), no FMA
// contraction, so the values match the C++ decoders bit for bit.
float fmt_q8_0_value(uint d_bits, uint code) {
  precise float v = float(int(code << 24) >> 24) * fmt_decode(FMT_F16, d_bits);
  return v;
}
float fmt_q4_1_value(uint d_bits, uint m_bits, uint nibble) {
  precise float v = float(nibble) * fmt_decode(FMT_F16, d_bits) + fmt_decode(FMT_F16, m_bits);
  return v;
}

#endif
