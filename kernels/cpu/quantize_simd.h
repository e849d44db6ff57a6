// Internal: cpu/quantize_kernels.h's loops written once on GCC/Clang vector
// extensions of N 32-bit lanes, instantiated per ISA by quantize_<isa>.cpp.
//
// The encode is formats/formats.h's, branch-free: the same integer arithmetic on
// exponent and mantissa with every case (subnormal target, rounding carry,
// overflow, inf, NaN) a select, so every lane gets the scalar code bit for bit.
// Everything has internal linkage, like gemm_driver.h: each file compiles its own
// copy with its own ISA flags, so the linker can never pick an AVX-512 copy for
// the AVX2 or generic path; for the same reason nothing here calls an inline
// function of another header (arm_neon.h's intrinsics, in quantize_neon.cpp's
// SGRT_QUANT_NEON parts, are builtins: always inlined, never linked).
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/quantize_kernels.h"
#include "cpu/vec_transpose.h"
#include "formats/formats.h"
#include "formats/hadamard.h"  // its constants only
#ifdef SGRT_QUANT_NEON  // quantize_neon.cpp: NEON intrinsics where gcc's lowering is poor
#include <arm_neon.h>
#endif
#if defined(__AVX512F__) || defined(__AVX2__)  // quantize_avx512.cpp / _avx2.cpp: vcvtph2ps, vpmovzxbd (always-inlined intrinsics, like NEON's)
#include <immintrin.h>
#endif

namespace sgrt::cpu::quant_impl {
namespace {

template <int N>
struct Vec {
  typedef uint32_t u32 __attribute__((vector_size(4 * N)));
  typedef int32_t i32 __attribute__((vector_size(4 * N)));
  typedef float f32 __attribute__((vector_size(4 * N)));
  typedef uint64_t u64 __attribute__((vector_size(4 * N)));
  typedef uint16_t u16 __attribute__((vector_size(2 * N)));
  typedef uint8_t u8 __attribute__((vector_size(N)));
  typedef uint8_t u8h __attribute__((vector_size(N / 2)));
};

template <class T, class S>
T splat(S s) {
  return T{} + s;
}

// The same bits as another vector (or scalar) type of the same size.
template <class T, class S>
T as(S v) {
  return __builtin_bit_cast(T, v);
}

template <class T>
T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <int N>
typename Vec<N>::u32 iota() {
  typename Vec<N>::u32 v{};
  for (int j = 0; j < N; ++j) v[j] = static_cast<uint32_t>(j);
  return v;
}

// formats.h's mix32 / sr_random, lane-wise: element i0 + lane's random word.
template <class U>
U mix(U x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

template <int N>
typename Vec<N>::u32 sr_noise(uint32_t key, uint64_t i0) {
  using U = typename Vec<N>::u32;
  const U lo0 = splat<U>(static_cast<uint32_t>(i0));
  const U lo = lo0 + iota<N>();
  const U hi = splat<U>(static_cast<uint32_t>(i0 >> 32)) - as<U>(lo < lo0);  // carry past 2^32
  return mix(mix(lo ^ key) + hi);
}

// The largest finite value of S as float bits (a normal number in every format).
template <fmt::Spec S>
constexpr uint32_t max_bits() {
  const uint32_t e = S.max_code >> S.man_bits, m = S.max_code & ((1u << S.man_bits) - 1u);
  return ((e - S.bias + 127u) << 23) | (m << (23 - S.man_bits));
}

// IEEE binary16, which NEON converts to and from in hardware.
template <fmt::Spec S>
constexpr bool is_f16() {
  return S.exp_bits == 5 && S.man_bits == 10 && !S.saturate;
}

// fmt::encode(S, v) (nearest even) for the FP8 formats by float arithmetic: adding
// c = 2^(E + 23 - man_bits), E the value's exponent clamped to the format's
// normal range (its least normal exponent below, one past its largest above),
// leaves the sum's last bit worth one step of the format at that exponent, so
// (|v| + c) - c is |v| rounded to the format's grid, nearest even (the float
// add's rounding; the grid's parity is the code's). The code is then read off
// that float's bits (subnormals: r / step). Fewer operations than the integer
// path below.
template <int N, fmt::Spec S>
[[gnu::always_inline]] inline typename Vec<N>::u32 encode_fp8_nearest(typename Vec<N>::f32 v) {
  using U = typename Vec<N>::u32;
  using I = typename Vec<N>::i32;
  using F = typename Vec<N>::f32;
  constexpr int emin = 1 - S.bias, emax = static_cast<int>(S.max_code >> S.man_bits) - S.bias;
  const U u = as<U>(v), a = u & 0x7FFFFFFFu;
  const I e = as<I>(a >> 23) - 127;
  const I ec = e < emin ? splat<I>(emin) : (e > emax + 1 ? splat<I>(emax + 1) : e);
  const F c = as<F>(as<U>(ec + (127 + 23 - S.man_bits)) << 23);
  const F r = (as<F>(a) + c) - c;
  const U normal = (as<U>(r) >> (23 - S.man_bits)) - static_cast<uint32_t>((127 - S.bias) << S.man_bits);
  const U sub = __builtin_convertvector(r * __builtin_bit_cast(float, static_cast<uint32_t>(S.bias - 1 + S.man_bits + 127) << 23), U);
  const U code = r < __builtin_bit_cast(float, static_cast<uint32_t>(emin + 127) << 23) ? sub : normal;
  const U sign = (u >> 31) << (S.exp_bits + S.man_bits);
  const U out = sign | (r > __builtin_bit_cast(float, max_bits<S>()) ? splat<U>(S.saturate ? S.max_code : S.inf_code) : code);
  return a > 0x7F800000u ? splat<U>(S.nan_code) : out;
}

// fmt::encode(S, v, stochastic, noise) on every lane. Always inlined: gcc otherwise
// calls it from the unswitched encode loops, spilling their accumulators around it.
template <int N, fmt::Spec S>
[[gnu::always_inline]] inline typename Vec<N>::u32 encode_vec(typename Vec<N>::f32 v, typename Vec<N>::u32 noise, bool stochastic) {
  using U = typename Vec<N>::u32;
  using I = typename Vec<N>::i32;
#ifdef SGRT_QUANT_NEON
  if constexpr (N == 4 && is_f16<S>()) {
    if (!stochastic) {
      // fcvtn: IEEE binary16, nearest even (FPCR's default rounding, which Linux gives
      // every process): formats.h's f16 code for every float but NaN, which gets nan_code.
      const float32x4_t f = as<float32x4_t>(v);
      const uint32x4_t h = vmovl_u16(vreinterpret_u16_f16(vcvt_f16_f32(f)));
      return as<U>(vbslq_u32(vceqq_f32(f, f), h, vdupq_n_u32(S.nan_code)));
    }
  }
#endif
#ifdef __AVX512F__
  if constexpr (N == 16 && is_f16<S>()) {
    if (!stochastic) {
      // vcvtps2ph: IEEE binary16, nearest even, as the NEON path above (O2/O3 store
      // their FP16 master and second moment this way every step).
      const __m512 f = as<__m512>(v);
      const U h = __builtin_convertvector(as<typename Vec<N>::u16>(_mm512_maskz_cvtps_ph(0xFFFF, f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), U);
      return v == v ? h : splat<U>(S.nan_code);
    }
  }
#endif
  if constexpr (S.exp_bits >= 4 && S.man_bits <= 3)
    if (!stochastic) return encode_fp8_nearest<N, S>(v);
  const U u = as<U>(v);
  const U sign = (u >> 31) << (S.exp_bits + S.man_bits);
  const U a = u & 0x7FFFFFFFu;
  const U fe = a >> 23;
  const I normal = fe != 0;
  // Float subnormals have no implicit bit and the exponent of the smallest normal.
  const U m = normal ? ((a & 0x7FFFFFu) | 0x800000u) : a;
  const I te = as<I>(normal ? fe : splat<U>(1u)) + (S.bias - 127);
  const I sub = te < 1;
  const I shift = (23 - S.man_bits) + (sub ? 1 - te : splat<I>(0));
  const I gone = shift >= 32;  // below half the smallest step: rounds to 0
  const U s = as<U>(gone ? splat<I>(31) : shift);
  const U mask = (splat<U>(1u) << s) - 1u;
  U r;
  if (stochastic) {
    r = (m + (noise & mask)) >> s;
  } else {
    // Nearest even: adding half a step less one, plus one when the truncation is odd,
    // carries into the kept bits exactly when the scalar rounds up (s >= 1).
    r = (m + (mask >> 1) + ((m >> s) & 1u)) >> s;
  }
  r = gone ? splat<U>(0u) : r;
  const U base = sub ? splat<U>(0u) : as<U>(te - 1) << S.man_bits;
  const U code = base + r;
  const U over = sign | (S.saturate ? S.max_code : S.inf_code);
  const I is_over = (te > (1 << S.exp_bits)) | (code > S.max_code) | (a == 0x7F800000u);
  const U out = is_over ? over : (sign | code);
  return a > 0x7F800000u ? splat<U>(S.nan_code) : out;
}

// fmt::decode(S, code) on every lane (codes of 16 bits at most).
template <int N, fmt::Spec S>
typename Vec<N>::f32 decode_vec(typename Vec<N>::u32 code) {
  using U = typename Vec<N>::u32;
  using F = typename Vec<N>::f32;
#ifdef SGRT_QUANT_NEON
  if constexpr (N == 4 && is_f16<S>()) {
    // fcvtl is exact; a NaN becomes sign | 0x7FC00000 as in formats.h, not fcvtl's
    // quieted payload.
    const float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u16(vmovn_u32(as<uint32x4_t>(code))));
    const uint32x4_t bits = vreinterpretq_u32_f32(f);
    const uint32x4_t nan = vorrq_u32(vandq_u32(bits, vdupq_n_u32(0x80000000u)), vdupq_n_u32(0x7FC00000u));
    return as<F>(vbslq_u32(vceqq_f32(f, f), bits, nan));
  }
#endif
#ifdef __AVX512F__
  if constexpr (N == 16 && is_f16<S>()) {
    // vcvtph2ps is exact; a NaN becomes sign | 0x7FC00000 as in formats.h (O2's
    // FP16 weights are decoded every step: 5.6% of the MLP's step the generic way).
    // (maskz: gcc 12 warns of the plain forms' undefined pass-through operand.)
    const __m512 f = _mm512_maskz_cvtph_ps(0xFFFF, as<__m256i>(__builtin_convertvector(code, typename Vec<N>::u16)));
    const U bits = as<U>(f);
    return as<F>(f == f ? bits : ((bits & 0x80000000u) | 0x7FC00000u));
  }
  if constexpr (N == 16 && S.exp_bits == 5 && S.man_bits == 2)  // E5M2 is binary16's top byte
    return decode_vec<N, fmt::spec_f16()>(code << 8);
#endif
  constexpr int nbits = S.exp_bits + S.man_bits;
  constexpr uint32_t emax = (1u << S.exp_bits) - 1u;
  const U sign = ((code >> nbits) & 1u) << 31;
  const U mag = code & ((1u << nbits) - 1u);
  const U e = mag >> S.man_bits, m = mag & ((1u << S.man_bits) - 1u);
  const U normal = sign | ((e + (127 - S.bias)) << 23) | (m << (23 - S.man_bits));
  // Subnormal m * 2^(1 - bias - man_bits): exact in float for every format here.
  constexpr int p = 1 - S.bias - S.man_bits;
  static_assert(p >= -126, "the subnormal step is a normal float");
  const F small = __builtin_convertvector(m, F) * __builtin_bit_cast(float, static_cast<uint32_t>(p + 127) << 23);
  U out = e == 0u ? (sign | as<U>(small)) : normal;
  if constexpr (S.nan_is_max) out = mag == ((1u << nbits) - 1u) ? (sign | 0x7FC00000u) : out;
  if constexpr (S.inf_code != 0) out = e == emax ? (sign | (m != 0u ? splat<U>(0x7FC00000u) : splat<U>(0x7F800000u))) : out;
  return as<F>(out);
}

// N codes of `bytes` bytes each at p, widened to 32 bits.
template <int N, int bytes>
typename Vec<N>::u32 load_codes(const uint8_t* p) {
  using W = Vec<N>;
#ifdef SGRT_QUANT_NEON
  // uxtl instead of gcc's lane-by-lane inserts for the vector extensions' conversions.
  if constexpr (N == 4) {
    if constexpr (bytes == 1) {
      const uint16x8_t h = vmovl_u8(vcreate_u8(load<uint32_t>(p)));
      return as<typename W::u32>(vmovl_u16(vget_low_u16(h)));
    } else {
      return as<typename W::u32>(vmovl_u16(vcreate_u16(load<uint64_t>(p))));
    }
  }
#endif
#ifdef __AVX512F__
  // vpmovzxbd: gcc 12 widens the 16-byte vector below through general registers,
  // a byte at a time (half of an O1 update's time went there).
  if constexpr (N == 16 && bytes == 1) return as<typename W::u32>(_mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#endif
#ifdef __AVX2__
  if constexpr (N == 8 && bytes == 1) return as<typename W::u32>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#endif
  if constexpr (bytes == 1) return __builtin_convertvector(load<typename W::u8>(p), typename W::u32);
  else return __builtin_convertvector(load<typename W::u16>(p), typename W::u32);
}

template <int N, fmt::Spec S>
void decode_span(const DecodeArgs& args) {
  const DecodeArgs a = args;  // a local copy: the stores through out cannot alias it
  using W = Vec<N>;
  constexpr int bytes = (S.exp_bits + S.man_bits + 1) / 8;
  const uint8_t* src = static_cast<const uint8_t*>(a.q) + a.i0 * bytes;
  int64_t j = 0;
  for (; j + N <= a.n; j += N) {
    const typename W::f32 v = decode_vec<N, S>(load_codes<N, bytes>(src + bytes * j)) * a.mult;
    std::memcpy(a.out + j, &v, sizeof v);
  }
  if (j < a.n) {  // the tail through N-wide scratch
    typename W::u32 c{};
    for (int l = 0; l < a.n - j; ++l) c[l] = bytes == 1 ? src[j + l] : load<uint16_t>(src + 2 * (j + l));
    const typename W::f32 v = decode_vec<N, S>(c) * a.mult;
    for (int l = 0; l < a.n - j; ++l) a.out[j + l] = v[l];
  }
}

template <int N>
void decode(const DecodeArgs& a) {
  switch (a.fmt) {
    case DType::e4m3: return decode_span<N, fmt::spec_e4m3()>(a);
    case DType::e5m2: return decode_span<N, fmt::spec_e5m2()>(a);
    case DType::f16: return decode_span<N, fmt::spec_f16()>(a);
    default: return;
  }
}

template <fmt::Spec S>
void put_code(void* q, int64_t i, uint32_t code) {
  constexpr int bits = S.exp_bits + S.man_bits + 1;
  if constexpr (bits == 4) {
    uint8_t& b = static_cast<uint8_t*>(q)[i >> 1];
    b = (i & 1) ? static_cast<uint8_t>((b & 0x0F) | (code << 4)) : static_cast<uint8_t>((b & 0xF0) | code);
  } else if constexpr (bits == 8) {
    static_cast<uint8_t*>(q)[i] = static_cast<uint8_t>(code);
  } else {
    static_cast<uint16_t*>(q)[i] = static_cast<uint16_t>(code);
  }
}

// Codes of elements [e, e + N) (e even for 4-bit codes) into q.
template <int N, int bits>
void store_codes(void* q, int64_t e, typename Vec<N>::u32 code) {
  using W = Vec<N>;
#ifdef SGRT_QUANT_NEON
  // gcc lowers the narrowing conversions below to a lane-by-lane insert on AArch64.
  if constexpr (N == 4 && bits == 8) {
    const uint16x4_t h = vmovn_u32(as<uint32x4_t>(code));
    vst1_lane_u32(reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(q) + e),
                  vreinterpret_u32_u8(vmovn_u16(vcombine_u16(h, h))), 0);
    return;
  } else if constexpr (N == 4 && bits == 16) {
    vst1_u16(static_cast<uint16_t*>(q) + e, vmovn_u32(as<uint32x4_t>(code)));
    return;
  }
#endif
  if constexpr (bits == 4) {  // pairs of codes -> bytes, low nibble first
    const typename W::u64 p = as<typename W::u64>(code);
    const typename W::u8h b = __builtin_convertvector((p | (p >> 28)) & 0xFFu, typename W::u8h);
    std::memcpy(static_cast<uint8_t*>(q) + (e >> 1), &b, sizeof b);
  } else if constexpr (bits == 8) {
    const typename W::u8 b = __builtin_convertvector(code, typename W::u8);
    std::memcpy(static_cast<uint8_t*>(q) + e, &b, sizeof b);
  } else {
    const typename W::u16 h = __builtin_convertvector(code, typename W::u16);
    std::memcpy(static_cast<uint16_t*>(q) + e, &h, sizeof h);
  }
}

// E2M1's round to nearest even, saturating at 6, of magnitudes a >= 0 (NaN: 6):
// adding c = 2^(E + 22), E a's exponent clamped to [0, 3], leaves the sum's last
// bit worth E2M1's step at a (0.5 below 2, 1 below 4, then 2), so (a + c) - c is
// a rounded to that step, nearest even; even multiples of the step are E2M1's even
// codes (encode_fp8_nearest's arithmetic with the exponent clamped as integers).
template <int N>
typename Vec<N>::f32 e2m1_magnitude(typename Vec<N>::f32 a) {
  using F = typename Vec<N>::f32;
  using U = typename Vec<N>::u32;
  const U e = as<U>(a) & 0x7F800000u;
  const U ec = e < (127u << 23) ? splat<U>(127u << 23) : (e > (130u << 23) ? splat<U>(130u << 23) : e);
  const F c = as<F>(ec + (22u << 23));
  const F r = (a + c) - c;
  return r < 6.0f ? r : splat<F>(6.0f);
}

// The E2M1 code of a value whose bits are v (for the sign) and magnitude's bits
// mag, r being e2m1_magnitude of that magnitude: r's index on the grid 0, .5, 1,
// 1.5, 2, 3, 4, 6, the sign above it; NaN takes the NaN code (7, no sign) as
// fmt::encode does.
template <int N>
typename Vec<N>::u32 e2m1_code_of(typename Vec<N>::u32 v, typename Vec<N>::u32 mag, typename Vec<N>::f32 r) {
  using F = typename Vec<N>::f32;
  using U = typename Vec<N>::u32;
  const F index = r < 2.0f ? r * 2.0f : (r < 4.0f ? r + 2.0f : r * 0.5f + 4.0f);
  const U code = ((v >> 31) << 3) | __builtin_convertvector(index, U);
  return mag > 0x7F800000u ? splat<U>(7u) : code;
}

// fmt::encode(spec_e2m1(), v) without the general encoder's exponent arithmetic.
// test_quantize_simd compares it with the scalar encoder on every float.
template <int N>
typename Vec<N>::u32 e2m1_code(typename Vec<N>::f32 v) {
  using U = typename Vec<N>::u32;
  const U bits = as<U>(v), mag = bits & 0x7FFFFFFFu;
  return e2m1_code_of<N>(bits, mag, e2m1_magnitude<N>(as<typename Vec<N>::f32>(mag)));
}

// SR: stochastic rounding, a template argument so the loop holds no branch on it.
template <int N, fmt::Spec S, bool SR>
EncodeCounts encode_span(const EncodeArgs& args) {
  // A local copy: the code stores cannot alias it, so its fields stay in registers
  // (through `args` every store through q reloads them) and the loop unswitches.
  const EncodeArgs a = args;
  using W = Vec<N>;
  using U = typename W::u32;
  using I = typename W::i32;
  using F = typename W::f32;
  constexpr int bits = S.exp_bits + S.man_bits + 1;
  constexpr uint32_t magmask = (1u << (bits - 1)) - 1u;
  const uint32_t key = mix(a.seed + 0x9E3779B9u);
  I sat{}, under{};
  const F mult0 = splat<F>(a.mult[0]);  // read once: stores through q could alias it
  const int shift = a.mult_block > 1 ? __builtin_ctzll(static_cast<uint64_t>(a.mult_block)) : 0;
  // The multipliers of elements [j, j + k): a block's one broadcast when the
  // lanes share it (the blocks are whole vectors but for an odd E2M1 start).
  auto mult_at = [&](int64_t j, int k) {
    if (a.mult_block == 0) return mult0;
    if (a.mult_block == 1 && k == N) return load<F>(a.mult + j);
    if (a.mult_block > 1 && k == N && (j >> shift) == ((j + N - 1) >> shift)) return splat<F>(a.mult[j >> shift]);
    F m{};
    for (int l = 0; l < k; ++l) m[l] = a.mult[(j + l) >> shift];
    return m;
  };
  // Codes of elements [j, j + N) and their counts; lanes at or past `valid` count nothing.
  auto block = [&](const float* xp, int64_t j, int valid) {
    const F x = load<F>(xp);
    const F v = x * mult_at(j, valid);
    const U noise = SR ? sr_noise<N>(key, static_cast<uint64_t>(a.i0 + j)) : U{};
    U code;
    if constexpr (!SR && S.exp_bits == 2 && S.man_bits == 1) code = e2m1_code<N>(v);
    else code = encode_vec<N, S>(v, noise, SR);
    const I live = valid >= N ? splat<I>(-1) : (iota<N>() < static_cast<uint32_t>(valid));
    const U av = as<U>(v) & 0x7FFFFFFFu, ax = as<U>(x) & 0x7FFFFFFFu;
    sat += live & (av > max_bits<S>()) & (av <= 0x7F800000u);
    under += live & (ax != 0u) & ((code & magmask) == 0u);
    return code;
  };
  // One element at a time: an odd E2M1 start and the tail, through N-wide scratch.
  auto partial = [&](int64_t j, int k) {
    float xs[N] = {};
    for (int l = 0; l < k; ++l) xs[l] = a.x[j + l];
    const U code = block(xs, j, k);
    for (int l = 0; l < k; ++l) put_code<S>(a.q, a.i0 + j + l, code[l]);
  };
  int64_t j = 0;
  if (bits == 4 && (a.i0 & 1) && a.n > 0) partial(j++, 1);
  for (; j + N <= a.n; j += N) {
    const U code = block(a.x + j, j, N);
    store_codes<N, bits>(a.q, a.i0 + j, code);
  }
  if (j < a.n) partial(j, static_cast<int>(a.n - j));
  EncodeCounts c;
  for (int l = 0; l < N; ++l) {
    c.saturated -= sat[l];
    c.underflow -= under[l];
  }
  return c;
}

template <int N, bool SR>
EncodeCounts encode_rounded(const EncodeArgs& a) {
  switch (a.fmt) {
    case DType::e4m3: return encode_span<N, fmt::spec_e4m3(), SR>(a);
    case DType::e5m2: return encode_span<N, fmt::spec_e5m2(), SR>(a);
    case DType::e2m1: return encode_span<N, fmt::spec_e2m1(), SR>(a);
    case DType::f16: return encode_span<N, fmt::spec_f16(), SR>(a);
    case DType::bf16: return encode_span<N, fmt::spec_bf16(), SR>(a);
    default: return {};
  }
}

template <int N>
EncodeCounts encode(const EncodeArgs& a) {
  return a.stochastic ? encode_rounded<N, true>(a) : encode_rounded<N, false>(a);
}

// Non-negative floats order as their bit patterns, and NaNs above +inf.
template <int N>
float amax(const float* x, int64_t n) {
  using U = typename Vec<N>::u32;
  U acc0{}, acc1{};
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const U a = load<U>(x + i) & 0x7FFFFFFFu, b = load<U>(x + i + N) & 0x7FFFFFFFu;
    acc0 = a > acc0 ? a : acc0;
    acc1 = b > acc1 ? b : acc1;
  }
  if (i + N <= n) {  // one vector left (a 16-element block's only one at N = 16)
    const U a = load<U>(x + i) & 0x7FFFFFFFu;
    acc0 = a > acc0 ? a : acc0;
    i += N;
  }
  acc0 = acc1 > acc0 ? acc1 : acc0;
  uint32_t m = 0;
  for (int l = 0; l < N; ++l) m = acc0[l] > m ? acc0[l] : m;
  for (; i < n; ++i) {
    const uint32_t b = load<uint32_t>(x + i) & 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  return __builtin_bit_cast(float, m);
}

// amax<N> of nb consecutive blocks of `block` elements (a multiple of N) into out:
// N blocks' lane-wise maxima at a time, transposed in registers so one max per
// row gives all N blocks' results (no lane-by-lane reduction per block).
template <int N>
void block_amax(const float* x, int64_t nb, int64_t block, float* out) {
  using U = typename Vec<N>::u32;
  for (int64_t g = 0; g < nb; g += N) {
    const int lanes = nb - g < N ? static_cast<int>(nb - g) : N;
    U t[N];
    for (int l = 0; l < N; ++l) {
      t[l] = U{};
      for (int64_t i = 0; l < lanes && i < block; i += N) {
        const U a = load<U>(x + (g + l) * block + i) & 0x7FFFFFFFu;
        t[l] = a > t[l] ? a : t[l];
      }
    }
    transpose_tile<N>(t);
    U m = t[0];
    for (int i = 1; i < N; ++i) m = t[i] > m ? t[i] : m;
    for (int l = 0; l < lanes; ++l) out[g + l] = __builtin_bit_cast(float, m[l]);
  }
}

// formats/nvfp4.h's nvfp4_block_scale ("four over six") for nb whole blocks of 16
// (x: nb * 16 contiguous elements) into scales[b], one block per lane: its amax,
// both E4M3 candidates with their multipliers and units, both sums of squares
// (nvfp4_block_sse's operations on |x|, whose squares are the same), then the
// choice. The squares are computed a vector at a time and transposed in
// registers, so each block's 16 add in element order as the scalar loop's do,
// N blocks' sums advancing together. With q, the chosen candidate's rounded
// magnitudes, kept from that pass, give the blocks' E2M1 codes (encode's of
// x * mult at nearest, counts and all) without a second rounding pass.
template <int N>
void nvfp4_blocks(const float* x, int64_t nb, float ts, uint8_t* scales, uint8_t* q, EncodeCounts* counts) {
  using U = typename Vec<N>::u32;
  using I = typename Vec<N>::i32;
  using F = typename Vec<N>::f32;
  constexpr fmt::Spec E = fmt::spec_e4m3();
  constexpr int B = 16;  // kNvfp4Block
  static_assert(B % N == 0, "a block is whole vectors");
  const float six_ts = 6.0f * ts, four_ts = 4.0f * ts;
  I sat{}, under{};
  for (int64_t g = 0; g < nb; g += N) {
    const int lanes = nb - g < N ? static_cast<int>(nb - g) : N;
    const float* xg = x + g * B;
    alignas(64) float am[N] = {};
    block_amax<N>(xg, lanes, B, am);
    const F a = load<F>(am);
    const U six = encode_vec<N, E>(a / six_ts, U{}, false), four = encode_vec<N, E>(a / four_ts, U{}, false);
    // p = 2^k puts the amax in [1, 2) (nvfp4_block_sse), k clamped to a normal power.
    const I k = 127 - as<I>((as<U>(a) >> 23) & 0xFFu);
    const I kc = k < -126 ? splat<I>(-126) : (k > 127 ? splat<I>(127) : k);
    const F p = as<F>(as<U>(kc + 127) << 23);
    const F d4 = decode_vec<N, E>(four) * ts, d6 = decode_vec<N, E>(six) * ts;
    const F m4 = d4 > 0.0f ? 1.0f / d4 : F{}, m6 = d6 > 0.0f ? 1.0f / d6 : F{}, u4 = d4 * p, u6 = d6 * p;
    alignas(64) float rounded[2][N * B];  // per candidate (four, six), block l's at [l B, (l + 1) B)
    // One candidate's sums of squares, lane l block g + l's (one candidate at a
    // time: the N rows of squares fill half the vector registers).
    auto sse = [&](F m, F u, float* r) {
      F acc{};
      for (int j = 0; j < B; j += N) {
        F t[N];  // row l: block g + l's squares of elements [j, j + N); then transposed
        for (int l = 0; l < N; ++l) {
          if (l >= lanes) {
            t[l] = F{};
            continue;
          }
          const F ax = as<F>(load<U>(xg + l * B + j) & 0x7FFFFFFFu);
          const F rv = e2m1_magnitude<N>(ax * m[l]);
          const F e = ax * p[l] - rv * u[l];
          t[l] = e * e;
          if (q) std::memcpy(r + l * B + j, &rv, sizeof rv);
        }
        transpose_tile<N>(t);
        for (int i = 0; i < N; ++i) acc += t[i];  // element j + i of every block, in element order
      }
      return acc;
    };
    const F acc4 = sse(m4, u4, rounded[0]), acc6 = sse(m6, u6, rounded[1]);
    // The choice lane-wise, without a branch (it goes either way at random).
    const I use4 = (four != six) & (acc4 < acc6);
    const U chosen = use4 ? four : six;
    const F mult = use4 ? m4 : m6;
    for (int l = 0; l < lanes; ++l) scales[g + l] = static_cast<uint8_t>(chosen[l]);
    if (!q) continue;
    for (int l = 0; l < lanes; ++l) {
      const float* r = rounded[use4[l] ? 0 : 1] + l * B;
      for (int j = 0; j < B; j += N) {
        const U xb = load<U>(xg + l * B + j), ax = xb & 0x7FFFFFFFu;
        const U av = as<U>(as<F>(ax) * mult[l]);
        const U code = e2m1_code_of<N>(xb, av, load<F>(r + j));
        sat += (av > max_bits<fmt::spec_e2m1()>()) & (av <= 0x7F800000u);
        under += (ax != 0u) & ((code & 7u) == 0u);
        store_codes<N, 4>(q, (g + l) * B + j, code);
      }
    }
  }
  for (int l = 0; l < N; ++l) {
    counts->saturated -= sat[l];
    counts->underflow -= under[l];
  }
}

template <int N>
void amax_cols(const float* x, int64_t rows, int64_t cols, uint32_t* acc) {
  using U = typename Vec<N>::u32;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    int64_t c = 0;
    for (; c + N <= cols; c += N) {
      const U a = load<U>(xr + c) & 0x7FFFFFFFu, m = load<U>(acc + c);
      const U out = a > m ? a : m;
      std::memcpy(acc + c, &out, sizeof out);
    }
    for (; c < cols; ++c) {
      const uint32_t b = load<uint32_t>(xr + c) & 0x7FFFFFFFu;
      acc[c] = b > acc[c] ? b : acc[c];
    }
  }
}

// x with lanes l and l ^ H exchanged (__builtin_shufflevector: GCC 12+ and Clang).
template <uint32_t H, class V, size_t... L>
V exchange_lanes(V x, std::index_sequence<L...>) {
  return __builtin_shufflevector(x, x, static_cast<int>(L ^ H)...);
}

// Butterfly stages H, 2H, .. 8 of hadamard16 on a block held in 16 / N vectors x:
// element j pairs with j ^ H (a lane exchange below N, a vector pair from N on)
// and becomes a + b below, a - b above: the scalar loop's operands in its order.
template <int N, uint32_t H>
void butterflies(typename Vec<N>::f32* x, typename Vec<N>::u32 lane) {
  if constexpr (H < 16) {
    constexpr int V = 16 / N;
    if constexpr (H < N) {
      for (int k = 0; k < V; ++k) {
        const typename Vec<N>::f32 p = exchange_lanes<H>(x[k], std::make_index_sequence<N>());
        x[k] = (lane & H) != 0u ? p - x[k] : x[k] + p;
      }
    } else {
      constexpr int hv = static_cast<int>(H) / N;
      for (int k = 0; k < V; ++k)
        if ((k & hv) == 0) {
          const typename Vec<N>::f32 a = x[k], c = x[k + hv];
          x[k] = a + c;
          x[k + hv] = a - c;
        }
    }
    butterflies<N, 2 * H>(x, lane);
  }
}

// formats/hadamard.h's hadamard16 on nb contiguous blocks of 16 at in into out,
// bit for bit: the signs as sign bits, the butterflies above, the exact 1/4.
template <int N>
void hadamard16_blocks(const float* in, float* out, int64_t nb) {
  using F = typename Vec<N>::f32;
  using U = typename Vec<N>::u32;
  constexpr int B = 16, V = B / N;
  static_assert(B % N == 0, "a block is whole vectors");
  const U lane = iota<N>();
  U flip[V];  // diag(s) as sign bits
  for (int k = 0; k < V; ++k) flip[k] = ((splat<U>(fmt::kHadamardSigns) >> (lane + static_cast<uint32_t>(k * N))) & 1u) << 31;
  for (int64_t b = 0; b < nb; ++b) {
    F x[V];
    for (int k = 0; k < V; ++k) x[k] = as<F>(load<U>(in + B * b + N * k) ^ flip[k]);
    butterflies<N, 1>(x, lane);
    for (int k = 0; k < V; ++k) {
      const F y = x[k] * 0.25f;
      std::memcpy(out + B * b + N * k, &y, sizeof y);
    }
  }
}

// cpu::scale_exponent(amax[b], fmt_max, margin, 0) for nb block amaxes (>= 0,
// as block_amax gives them), N blocks at a time: the exponents of fmt_max / amax
// from the bits, a subnormal amax scaled by 2^64 first (exact) as frexp would
// normalize it; kept (amax 0, NaN or inf) takes e = 0. scales[b] is the E8M0 code
// of 2^-e (0xFF, OCP's NaN, for a NaN or an infinity), mult[b] = 2^e.
template <int N>
int64_t mx_scales(const float* amax, int64_t nb, float fmt_max, int margin, uint8_t* scales, float* mult) {
  using U = typename Vec<N>::u32;
  using I = typename Vec<N>::i32;
  using F = typename Vec<N>::f32;
  const uint32_t fb = __builtin_bit_cast(uint32_t, fmt_max);  // a normal float for every format
  const int ef = static_cast<int>(fb >> 23) - 126;
  I kept_count{};
  for (int64_t g = 0; g < nb; g += N) {
    const int lanes = nb - g < N ? static_cast<int>(nb - g) : N;
    F a{};  // lanes past nb: 0, kept, not counted
    std::memcpy(&a, amax + g, sizeof(float) * lanes);
    const U ab = as<U>(a);
    const I kept = (ab == 0u) | (ab >= 0x7F800000u);
    const I sub = (ab >> 23) == 0u;
    const U an = as<U>(sub ? a * 0x1p64f : a);
    const I ea = as<I>(an >> 23) - (126 + (sub & 64));
    const I below = (fb & 0x7FFFFFu) < (an & 0x7FFFFFu);
    const I e0 = ef - ea + below - margin;  // below is -1 where set
    const I e = kept ? I{} : (e0 < -126 ? splat<I>(-126) : (e0 > 127 ? splat<I>(127) : e0));
    const U code = (kept & (ab != 0u)) ? splat<U>(0xFFu) : as<U>(127 - e);
    const F m = as<F>(as<U>(e + 127) << 23);
    kept_count -= kept & (iota<N>() < static_cast<uint32_t>(lanes));
    for (int l = 0; l < lanes; ++l) {
      scales[g + l] = static_cast<uint8_t>(code[l]);
      mult[g + l] = m[l];
    }
  }
  int64_t total = 0;
  for (int l = 0; l < N; ++l) total += kept_count[l];
  return total;
}

template <int N>
constexpr Kernels make_kernels() {
  return {&amax<N>, &amax_cols<N>, &encode<N>, &decode<N>, &nvfp4_blocks<N>,
          &hadamard16_blocks<N>, &block_amax<N>, &mx_scales<N>};
}

}  // namespace
}  // namespace sgrt::cpu::quant_impl
