// Low-precision number formats: encode (float -> code) and decode (code -> float)
// for E4M3 (OCP e4m3fn), E5M2, E2M1, E8M0, FP16 and BF16 (NUMERICS.md §1).
//
// One header for host C++ and CUDA device code: integer bit manipulation only,
// no <cmath>, no memcpy; kernels/formats/formats.glsl mirrors it for Vulkan.
//
// Encoding matches the CUDA toolkit's conversions bit for bit (tests/test_formats.cpp):
//   - FP8/FP4: round-to-nearest-even, saturate to max finite (satfinite, also for
//     ±inf), NaN -> the canonical NaN code 0x7F (E2M1 has no NaN: NaN -> +6).
//   - FP16/BF16: IEEE round-to-nearest-even, overflow -> ±inf, NaN -> 0x7FFF.
//   - E8M0: |x| rounded down (or up) to a power of two, clipped to [2^-127, 2^127],
//     NaN -> 0xFF (as __nv_cvt_float_to_e8m0 with __NV_SATFINITE).
// Stochastic variants take a 32-bit random word (see sr_random) and round up with
// probability equal to the discarded fraction: noise below the last kept bit, then
// truncate. Overflow and NaN follow the nearest-even rules.
#pragma once
#include <stdint.h>

#if defined(__CUDACC__)
#define SGRT_HD __host__ __device__
#else
#define SGRT_HD
#endif

namespace sgrt::fmt {

SGRT_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}
SGRT_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// A sign/exponent/mantissa format narrower than FP32.
struct Spec {
  int exp_bits, man_bits, bias;
  uint32_t max_code;  // largest finite magnitude code
  uint32_t nan_code;  // what NaN encodes to
  uint32_t inf_code;  // magnitude code of inf; 0 when the format has no inf
  bool saturate;      // finite overflow (and inf) -> max_code instead of inf
  bool nan_is_max;    // E4M3: the all-ones magnitude is NaN (no inf)
};
// Functions, not variables, so CUDA device code can use them too.
SGRT_HD constexpr Spec spec_e4m3() { return {4, 3, 7, 0x7E, 0x7F, 0, true, true}; }
SGRT_HD constexpr Spec spec_e5m2() { return {5, 2, 15, 0x7B, 0x7F, 0x7C, true, false}; }
SGRT_HD constexpr Spec spec_e2m1() { return {2, 1, 1, 0x7, 0x7, 0, true, false}; }
SGRT_HD constexpr Spec spec_f16() { return {5, 10, 15, 0x7BFF, 0x7FFF, 0x7C00, false, false}; }
SGRT_HD constexpr Spec spec_bf16() { return {8, 7, 127, 0x7F7F, 0x7FFF, 0x7F80, false, false}; }
// Host-side names for the same specs.
inline constexpr Spec kE4M3 = spec_e4m3(), kE5M2 = spec_e5m2(), kE2M1 = spec_e2m1(),
                      kF16 = spec_f16(), kBF16 = spec_bf16();

// Largest finite values, for scale computation.
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;
constexpr float kE2M1Max = 6.0f;
constexpr float kF16Max = 65504.0f;

// v >> s rounded: nearest-even when noise == 0 and even, or stochastic: add the
// low s bits of noise then truncate.
SGRT_HD inline uint32_t shift_round(uint32_t v, int s, bool stochastic, uint32_t noise) {
  if (s >= 32) return 0;  // value below half the smallest step (v < 2^24)
  const uint32_t mask = (1u << s) - 1u;
  if (stochastic) return (v + (noise & mask)) >> s;
  const uint32_t q = v >> s, rem = v & mask, half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// float -> code of format S (sign at bit exp_bits + man_bits).
SGRT_HD inline uint32_t encode(const Spec& S, float x, bool stochastic = false, uint32_t noise = 0) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 31) << (S.exp_bits + S.man_bits);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return S.nan_code;
  const uint32_t over = sign | (S.saturate ? S.max_code : S.inf_code);
  if (a == 0x7F800000u) return over;
  const int fe = static_cast<int>(a >> 23);
  // Float subnormals have no implicit bit and the exponent of the smallest normal.
  const uint32_t m = fe ? ((a & 0x7FFFFFu) | 0x800000u) : a;
  const int te = (fe ? fe : 1) - 127 + S.bias;  // biased target exponent
  // Target normals keep man_bits; subnormals lose 1 - te more bits. Rounding may
  // carry into the exponent field, which is the correct next value.
  const int shift = 23 - S.man_bits + (te < 1 ? 1 - te : 0);
  const uint32_t base = te < 1 ? 0u : static_cast<uint32_t>(te - 1) << S.man_bits;
  if (te > (1 << S.exp_bits)) return over;  // far past the range (keeps base in 32 bits)
  const uint32_t code = base + shift_round(m, shift, stochastic, noise);
  return code > S.max_code ? over : (sign | code);
}

// code -> float for format S.
SGRT_HD inline float decode(const Spec& S, uint32_t code) {
  const int nbits = S.exp_bits + S.man_bits;
  const uint32_t sign = ((code >> nbits) & 1u) << 31;
  const uint32_t mag = code & ((1u << nbits) - 1u);
  const uint32_t e = mag >> S.man_bits, m = mag & ((1u << S.man_bits) - 1u);
  const uint32_t emax = (1u << S.exp_bits) - 1u;
  if ((S.nan_is_max && mag == (1u << nbits) - 1u) || (S.inf_code && e == emax))
    return bits_float(sign | (m || S.nan_is_max ? 0x7FC00000u : 0x7F800000u));
  if (e == 0) {
    // Subnormal m * 2^(1 - bias - man_bits): exact in float for every format here.
    const int p = 1 - S.bias - S.man_bits;  // >= -133
    const float scale = p >= -126 ? bits_float(static_cast<uint32_t>(p + 127) << 23)
                                  : bits_float(1u << (p + 149));
    return bits_float(sign | float_bits(static_cast<float>(m) * scale));
  }
  return bits_float(sign | ((e - S.bias + 127) << 23) | (m << (23 - S.man_bits)));
}

SGRT_HD inline uint8_t e4m3_encode(float x) { return static_cast<uint8_t>(encode(spec_e4m3(), x)); }
SGRT_HD inline uint8_t e5m2_encode(float x) { return static_cast<uint8_t>(encode(spec_e5m2(), x)); }
SGRT_HD inline uint8_t e2m1_encode(float x) { return static_cast<uint8_t>(encode(spec_e2m1(), x)); }
SGRT_HD inline uint16_t f16_encode(float x) { return static_cast<uint16_t>(encode(spec_f16(), x)); }
SGRT_HD inline uint16_t bf16_encode(float x) { return static_cast<uint16_t>(encode(spec_bf16(), x)); }
SGRT_HD inline float e4m3_decode(uint32_t c) { return decode(spec_e4m3(), c & 0xFFu); }
SGRT_HD inline float e5m2_decode(uint32_t c) { return decode(spec_e5m2(), c & 0xFFu); }
SGRT_HD inline float e2m1_decode(uint32_t c) { return decode(spec_e2m1(), c & 0xFu); }
SGRT_HD inline float f16_decode(uint32_t c) { return decode(spec_f16(), c & 0xFFFFu); }
SGRT_HD inline float bf16_decode(uint32_t c) { return bits_float((c & 0xFFFFu) << 16); }

// Stochastic rounding: `r` is a uniform random 32-bit word (use sr_random).
SGRT_HD inline uint8_t e4m3_encode_sr(float x, uint32_t r) { return static_cast<uint8_t>(encode(spec_e4m3(), x, true, r)); }
SGRT_HD inline uint8_t e5m2_encode_sr(float x, uint32_t r) { return static_cast<uint8_t>(encode(spec_e5m2(), x, true, r)); }
SGRT_HD inline uint8_t e2m1_encode_sr(float x, uint32_t r) { return static_cast<uint8_t>(encode(spec_e2m1(), x, true, r)); }
SGRT_HD inline uint16_t f16_encode_sr(float x, uint32_t r) { return static_cast<uint16_t>(encode(spec_f16(), x, true, r)); }
SGRT_HD inline uint16_t bf16_encode_sr(float x, uint32_t r) { return static_cast<uint16_t>(encode(spec_bf16(), x, true, r)); }

// E8M0 (unsigned power of two 2^(code - 127), 0xFF = NaN): the MX block scale.
enum class E8M0Round : uint8_t { down, up };  // CUDA's cudaRoundZero / cudaRoundPosInf
SGRT_HD inline uint8_t e8m0_encode(float x, E8M0Round mode = E8M0Round::down) {
  const uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0xFF;
  // Like CUDA: first round |x| to BF16 in the same direction, then take its exponent.
  const uint32_t b = mode == E8M0Round::down ? a >> 16 : (a >> 16) + ((a & 0xFFFFu) ? 1u : 0u);
  uint32_t e = b >> 7;
  if (mode == E8M0Round::up && (b & 0x7Fu) && b > 0x40u && b < 0x7F80u) ++e;
  return static_cast<uint8_t>(e >= 0xFF ? 0xFE : e);
}
SGRT_HD inline float e8m0_decode(uint32_t c) {
  c &= 0xFFu;
  if (c == 0xFF) return bits_float(0x7FC00000u);
  return bits_float(c ? c << 23 : 0x00400000u);  // code 0 is 2^-127, a float subnormal
}

// 2^e as a float for e in [-126, 127] (scales are powers of two).
SGRT_HD inline float exp2i(int e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

// Counter-based random words for stochastic rounding: a hash of (seed, index), so a
// tensor rounds the same way on any thread count or device. (lowbias32 mixer.)
SGRT_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16; x *= 0x7FEB352Du;
  x ^= x >> 15; x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}
SGRT_HD inline uint32_t sr_random(uint32_t seed, uint64_t index) {
  return mix32(mix32(static_cast<uint32_t>(index) ^ mix32(seed + 0x9E3779B9u)) +
               static_cast<uint32_t>(index >> 32));
}

}  // namespace sgrt::fmt
