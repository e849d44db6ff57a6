// Low-precision helpers of the quantizer, the GEMM and dge_grad: formats by
// sgrt::DType code, codes packed below word size in the arena, exact
// power-of-two scaling and the scale-exponent rule (cpu/quantize.h), and the FP4
// DGE derivative (formats/fp4_dge.h). Bit manipulation where a float operation
// could flush subnormals, so every device rounds as the CPU does.
#ifndef SGRT_QUANT_GLSL
#define SGRT_QUANT_GLSL

#include "common.glsl"
#include "formats/formats.glsl"

// sgrt/dtype.h
const uint DT_F32 = 0u, DT_F16 = 1u, DT_BF16 = 2u, DT_E4M3 = 3u, DT_E5M2 = 4u, DT_E2M1 = 5u;

FmtSpec fmt_of(uint dt) {
  return dt == DT_E4M3 ? FMT_E4M3 : dt == DT_E5M2 ? FMT_E5M2 : dt == DT_E2M1 ? FMT_E2M1 : dt == DT_F16 ? FMT_F16 : FMT_BF16;
}
uint dt_bits(uint dt) { return dt == DT_F32 ? 32u : dt <= DT_BF16 ? 16u : dt == DT_E2M1 ? 4u : 8u; }
// cpu::format_max as bits: 448, 57344, 6, 65504, the largest BF16.
uint fmt_max_bits(uint dt) {
  return dt == DT_E4M3 ? 0x43E00000u : dt == DT_E5M2 ? 0x47600000u : dt == DT_E2M1 ? 0x40C00000u
       : dt == DT_F16 ? 0x477FE000u : 0x7F7F0000u;
}

// Element i of a tensor at word `off` holding `bits`-bit codes, low bits first.
uint load_code(uint off, uint i, uint bits) {
  if (bits == 32u) return U[off + i];
  uint per = 32u / bits;
  return (U[off + i / per] >> (bits * (i % per))) & ((1u << bits) - 1u);
}
float decode(uint dt, uint code) {
  return dt == DT_F32 ? uintBitsToFloat(code) : dt == DT_BF16 ? uintBitsToFloat(code << 16) : fmt_decode(fmt_of(dt), code);
}

// 2^k for k in [-149, 127] (std::ldexp(1.0f, k)), and k of a normal 2^k (std::ilogb).
float pow2(int k) { return uintBitsToFloat(k >= -126 ? uint(k + 127) << 23 : 1u << uint(k + 149)); }
int log2_of(float s) { return int((floatBitsToUint(s) >> 23) & 0xFFu) - 127; }

// a = |v| bits, finite and non-zero: v = m * 2^(e - 24) with m in [2^23, 2^24)
// (std::frexp's exponent e, mantissa m / 2^24).
uint frexp24(uint a, out int e) {
  int fe = int(a >> 23);
  uint m = fe != 0 ? (a & 0x7FFFFFu) | 0x800000u : a;
  int sh = 23 - findMSB(m);
  e = max(fe, 1) - 126 - sh;
  return m << uint(sh);
}

// x * 2^e rounded to nearest even, as IEEE f32 multiplication by 2^e.
float mul_pow2(float x, int e) {
  uint u = floatBitsToUint(x), s = u & 0x80000000u, a = u & 0x7FFFFFFFu;
  if (a == 0u || a >= 0x7F800000u) return x;
  int ex;
  uint m = frexp24(a, ex);
  int be = ex + e + 126;  // the result's biased exponent
  if (be >= 255) return uintBitsToFloat(s | 0x7F800000u);
  if (be >= 1) return uintBitsToFloat(s | (uint(be) << 23) | (m & 0x7FFFFFu));
  return uintBitsToFloat(s | fmt_shift_round(m, 1 - be, false, 0u));
}

// a / b for a, b >= 0, rounded to nearest even as IEEE division (OpFDiv may be off
// by an ulp or two): the mantissas' quotient one bit at a time. Quotients outside
// the normal range fall back to OpFDiv.
float div_rn(float a, float b) {
  uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  if (ua == 0u || ub == 0u || ua >= 0x7F800000u || ub >= 0x7F800000u) return a / b;
  int ea, eb;
  uint ma = frexp24(ua, ea), mb = frexp24(ub, eb);
  int e = ea - eb + 127;  // the biased exponent when ma >= mb
  if (ma < mb) { ma <<= 1; --e; }
  if (e < 1 || e > 254) return a / b;
  uint q = 0u;  // 26 bits of ma / mb in [1, 2): 23 fraction bits, guard, round
  for (int i = 0; i < 26; ++i) {
    q <<= 1;
    if (ma >= mb) { ma -= mb; q |= 1u; }
    ma <<= 1;
  }
  uint m = q >> 2, rest = (q & 3u) | (ma != 0u ? 1u : 0u);  // bit 1: guard; bit 0: sticky
  m += rest > 2u || (rest == 2u && (m & 1u) != 0u) ? 1u : 0u;
  if (m == 0x1000000u) { m >>= 1; ++e; }  // rounded up to 2
  return uintBitsToFloat(e > 254 ? 0x7F800000u : uint(e) << 23 | (m & 0x7FFFFFu));
}

// Element i of an f32 tensor, or of codes stored as decode(code) / scale (the
// optimizer's power-of-two scales: exact).
float load_scaled(uint dt, uint off, uint i, float scale) {
  return dt == DT_F32 ? F[off + i] : mul_pow2(decode(dt, load_code(off, i, dt_bits(dt))), -log2_of(scale));
}

// cpu::scale_exponent: floor(log2(fmt_max / amax)) - margin clamped to [-126, 127]
// from the bits of amax >= 0; `prev` and kept = true when amax is 0, inf or NaN.
int scale_exponent(uint amax, uint fmax, int margin, int prev, out bool kept) {
  kept = amax == 0u || amax >= 0x7F800000u;
  if (kept) return prev;
  int ea, ef;
  uint ma = frexp24(amax, ea), mf = frexp24(fmax, ef);
  return clamp(ef - ea - (mf < ma ? 1 : 0) - margin, -126, 127);
}

// fmt::dge_derivative, k = 5, clamped at 3.
float dge_derivative(float x) {
  float ax = abs(x);
  if (ax >= 6.0) return 1.0 / 5.0;
  float lo, d;
  if (ax < 2.0) { d = 0.5; lo = floor(ax / d) * d; }
  else if (ax < 4.0) { d = 1.0; lo = floor(ax); }
  else { d = 2.0; lo = 4.0; }
  float u = abs(2.0 * (ax - lo) / d - 1.0);
  if (u == 0.0) return 3.0;
  float g = pow(u, 1.0 / 5.0 - 1.0) / 5.0;
  return g < 3.0 ? g : 3.0;
}

#endif
