// AVX-512 F32 GEMM kernel: 14 x 32 register tile (28 accumulators).
#include <immintrin.h>

#include <algorithm>

#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

struct F32x16 {
  using Elem = float;
  using reg = __m512;
  static constexpr int KU = 1, W = 16, NV = 2, MR = 14;
  static constexpr int64_t KC = 384, MC = 14 * 12, NC = 3072;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg loadb(const float* p) { return _mm512_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg dot(reg acc, reg a, reg b) { return _mm512_fmadd_ps(a, b, acc); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static float convert(float v) { return v; }
  // 16 bytes (signed: S) to floats, exactly (GGUF blocks' codes). (maskz: gcc 12
  // warns of the plain forms' undefined pass-through operand.)
  template <bool S>
  static void bytes_to_f32(const uint8_t* p, float* out) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m512i w = S ? _mm512_maskz_cvtepi8_epi32(0xFFFF, b) : _mm512_maskz_cvtepu8_epi32(0xFFFF, b);
    _mm512_storeu_ps(out, _mm512_maskz_cvtepi32_ps(0xFFFF, w));
  }

  // An IEEE binary16's value, exactly (AVX-512VL's form of F16C's conversion).
  static float half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _mm_cvtss_f32(_mm_maskz_cvtph_ps(1, _mm_cvtsi32_si128(h)));
  }

  static __mmask16 first(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }

  // FP8 / FP4 codes -> f32 by table permutes, 16 at a time, each 16 then put
  // through scale(values, j) (j: its first element; as the scalar path's
  // lut[code] * scale). 8-bit codes: 128 magnitudes in eight registers
  // (vpermt2ps picks from 32, bits 5 and 6 pick the pair) and the sign bit.
  template <DType D, class Scale>
  static bool decode_with(const Source& s, int64_t i0, int64_t n, Scale scale, float* out) {
    auto finish = [&](__m512 v, int64_t j) { _mm512_mask_storeu_ps(out + j, first(n - j), scale(v, j)); };
    if constexpr (D == DType::e4m3) {  // any 8-bit table
      const uint8_t* src = static_cast<const uint8_t*>(s.data) + i0;
      __m512 t[8];
      for (int i = 0; i < 8; ++i) t[i] = _mm512_loadu_ps(s.lut + 16 * i);
      for (int64_t j = 0; j < n; j += 16) {
        const int64_t left = n - j;
        const __m512i c = _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_maskz_loadu_epi8(first(left), src + j));
        const __mmask16 b5 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x20));
        const __mmask16 b6 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x40));
        const __m512 lo = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(t[0], c, t[1]), _mm512_permutex2var_ps(t[2], c, t[3]));
        const __m512 hi = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(t[4], c, t[5]), _mm512_permutex2var_ps(t[6], c, t[7]));
        const __m512i sign = _mm512_maskz_slli_epi32(0xFFFF, _mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
        finish(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_mask_blend_ps(b6, lo, hi)), sign)), j);
      }
      return true;
    } else if constexpr (D == DType::e2m1) {  // two codes per byte, low nibble first
      if (i0 & 1) return false;
      const uint8_t* src = static_cast<const uint8_t*>(s.data) + i0 / 2;
      const __m512 table = _mm512_loadu_ps(s.lut);  // codes 0..15
      for (int64_t j = 0; j < n; j += 16) {
        const int64_t bytes = std::min<int64_t>(8, (n - j + 1) / 2);
        const __m128i b = _mm_maskz_cvtepu8_epi16(0xFF, _mm_maskz_loadu_epi8(__mmask16((1u << bytes) - 1), src + j / 2));
        // u16 lanes (hi nibble << 8 | lo nibble) are the bytes lo0, hi0, lo1, hi1, ...
        const __m128i nib = _mm_or_si128(_mm_and_si128(b, _mm_set1_epi16(0xF)), _mm_slli_epi16(_mm_srli_epi16(b, 4), 8));
        finish(_mm512_maskz_permutexvar_ps(0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, nib), table), j);
      }
      return true;
    } else {
      return false;
    }
  }
  // sc is an inner or block scale (MX, NVFP4), 1 without one.
  template <DType D>
  static bool decode_fast(const Source& s, int64_t i0, int64_t n, float sc, float* out) {
    const __m512 m = _mm512_set1_ps(sc);
    return decode_with<D>(s, i0, n, [&](__m512 v, int64_t) { return sc == 1.0f ? v : _mm512_mul_ps(v, m); }, out);
  }
  // Element j times sc[j / kblock]: kblock 1 (a scale per K index) or a
  // multiple of 16 (each vector of 16 shares one: NVFP4's blocks, MX's).
  template <DType D>
  static bool decode_fast_blocks(const Source& s, int64_t i0, int64_t n, const float* sc, int64_t kblock, float* out) {
    if (kblock == 1)
      return decode_with<D>(s, i0, n, [&](__m512 v, int64_t j) { return _mm512_mul_ps(v, _mm512_maskz_loadu_ps(first(n - j), sc + j)); }, out);
    if (kblock % 16) return false;
    return decode_with<D>(s, i0, n, [&](__m512 v, int64_t j) { return _mm512_mul_ps(v, _mm512_set1_ps(sc[j / kblock])); }, out);
  }
};

}  // namespace

void run_avx512(const Problem& p) { run<F32x16>(p); }

}  // namespace sgrt::cpu::gemm_impl
