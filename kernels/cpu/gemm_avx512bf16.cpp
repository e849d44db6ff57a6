// AVX512_BF16 kernel for FP8/FP4/BF16 inputs: panels hold BF16 pairs along K and the
// inner loop is vdpbf16ps (two products per lane, FP32 accumulation); 14 x 32 tile.
#include <immintrin.h>

#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

struct BF16x16 {
  using Elem = uint16_t;
  using reg = __m512;
  static constexpr int KU = 2, W = 16, NV = 2, MR = 14;
  static constexpr int64_t KC = 768, MC = 14 * 12, NC = 3072;
  static reg zero() { return _mm512_setzero_ps(); }
  static __m512bh loadb(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static __m512bh bcast(const uint16_t* p) {
    int32_t pair;
    std::memcpy(&pair, p, 4);
    return (__m512bh)_mm512_set1_epi32(pair);
  }
  static reg dot(reg acc, __m512bh a, __m512bh b) { return _mm512_dpbf16_ps(acc, a, b); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  // Inputs here are exact in BF16 (see gemm.h), so truncation is exact.
  static uint16_t convert(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>(u >> 16);
  }

  // BF16 lanes times a scale, as convert(decoded * sc): widened to f32, multiplied,
  // truncated back (exact for the products gemm.h allows on this path). The maskz
  // forms: GCC 12 warns on the plain ones' undefined pass-through operand.
  static __m256i scaled_half(__m256i h, __m512 m) {
    const __m512 f = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
    return _mm512_maskz_cvtepi32_epi16(0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, _mm512_castps_si512(_mm512_mul_ps(f, m)), 16));
  }
  // 32 lanes: 0-15 times lo's lanes, 16-31 times hi's.
  static __m512i scaled2(__m512i v, __m512 lo, __m512 hi) {
    const __m256i l = scaled_half(_mm512_maskz_extracti64x4_epi64(0xF, v, 0), lo);
    const __m256i h = scaled_half(_mm512_maskz_extracti64x4_epi64(0xF, v, 1), hi);
    return _mm512_maskz_inserti64x4(0xFF, _mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), l, 0), h, 1);
  }
  static __m512i scaled(__m512i v, float sc) { return sc == 1.0f ? v : scaled2(v, _mm512_set1_ps(sc), _mm512_set1_ps(sc)); }

  // FP8 / FP4 codes -> BF16 bits, 32 at a time, by table permutes (vpermt2w /
  // vpermw), each 32 then put through scale(bits, j) (j: its first element).
  template <DType D, class Scale>
  static bool decode_with(const Source& s, int64_t i0, int64_t n, Scale scale, uint16_t* out) {
    if constexpr (D == DType::e4m3) {  // any 8-bit table: 128 magnitudes + the sign bit
      const uint8_t* src = static_cast<const uint8_t*>(s.data) + i0;
      const __m512i t0 = _mm512_loadu_si512(s.lut_bf16), t1 = _mm512_loadu_si512(s.lut_bf16 + 32);
      const __m512i t2 = _mm512_loadu_si512(s.lut_bf16 + 64), t3 = _mm512_loadu_si512(s.lut_bf16 + 96);
      for (int64_t j = 0; j < n; j += 32) {
        const __mmask32 m = n - j >= 32 ? ~__mmask32{0} : (__mmask32{1} << (n - j)) - 1;
        const __m512i c = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + j));
        const __m512i lo = _mm512_permutex2var_epi16(t0, c, t1), hi = _mm512_permutex2var_epi16(t2, c, t3);
        const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, _mm512_set1_epi16(0x40)), lo, hi);
        const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(c, _mm512_set1_epi16(0x80)), 8);
        _mm512_mask_storeu_epi16(out + j, m, scale(_mm512_or_si512(mag, sign), j));
      }
      return true;
    } else if constexpr (D == DType::e2m1) {  // two codes per byte, low nibble first
      if (i0 & 1) return false;
      const uint8_t* src = static_cast<const uint8_t*>(s.data) + i0 / 2;
      const __m512i table = _mm512_loadu_si512(s.lut_bf16);  // codes 0..15 (32 entries read)
      for (int64_t j = 0; j < n; j += 32) {
        const int64_t left = n - j;
        const __mmask16 mb = left >= 32 ? __mmask16(0xFFFF) : __mmask16((1u << ((left + 1) / 2)) - 1);
        const __m256i b = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mb, src + j / 2));
        // u16 lanes (hi nibble << 8 | lo nibble) are the bytes lo0, hi0, lo1, hi1, ...
        const __m256i nib = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi16(0xF)),
                                            _mm256_slli_epi16(_mm256_srli_epi16(b, 4), 8));
        const __m512i c = _mm512_cvtepu8_epi16(nib);
        const __mmask32 m = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
        _mm512_mask_storeu_epi16(out + j, m, scale(_mm512_permutexvar_epi16(c, table), j));
      }
      return true;
    } else {
      return false;
    }
  }
  // sc is an inner or block scale (MX, NVFP4), 1 without one.
  template <DType D>
  static bool decode_fast(const Source& s, int64_t i0, int64_t n, float sc, uint16_t* out) {
    return decode_with<D>(s, i0, n, [sc](__m512i v, int64_t) { return scaled(v, sc); }, out);
  }
  // Element j times sc[j / kblock]: kblock 1 (fp4's per-input-channel scales, a
  // vector of them per 16 lanes) or a multiple of 16 (each 16 lanes share one).
  template <DType D>
  static bool decode_fast_blocks(const Source& s, int64_t i0, int64_t n, const float* sc, int64_t kblock, uint16_t* out) {
    if (kblock == 1) {
      auto lanes = [&](int64_t j) {  // sc[j, j + 16) where below n
        const int64_t left = n - j;
        return _mm512_maskz_loadu_ps(left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1), sc + j);
      };
      return decode_with<D>(s, i0, n, [&](__m512i v, int64_t j) { return scaled2(v, lanes(j), lanes(j + 16)); }, out);
    }
    if (kblock % 16) return false;
    return decode_with<D>(s, i0, n, [&](__m512i v, int64_t j) {
      const float lo = sc[j / kblock];
      return scaled2(v, _mm512_set1_ps(lo), _mm512_set1_ps(j + 16 < n ? sc[(j + 16) / kblock] : lo));
    }, out);
  }
};

}  // namespace

void run_avx512_bf16(const Problem& p) { run<BF16x16>(p); }

}  // namespace sgrt::cpu::gemm_impl
