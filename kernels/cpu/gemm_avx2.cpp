// AVX2 + FMA F32 GEMM kernel: 6 x 16 register tile (12 accumulators of 16 ymm).
#include <immintrin.h>

#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

struct F32x8 {
  using Elem = float;
  using reg = __m256;
  static constexpr int KU = 1, W = 8, NV = 2, MR = 6;
  static constexpr int64_t KC = 256, MC = 6 * 16, NC = 3072;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg loadb(const float* p) { return _mm256_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg dot(reg acc, reg a, reg b) { return _mm256_fmadd_ps(a, b, acc); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg set1(float v) { return _mm256_set1_ps(v); }
  static float convert(float v) { return v; }
  // 16 bytes (signed: S) to floats, exactly (GGUF blocks' codes).
  template <bool S>
  static void bytes_to_f32(const uint8_t* p, float* out) {
    for (int h = 0; h < 2; ++h) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h));
      _mm256_storeu_ps(out + 8 * h, _mm256_cvtepi32_ps(S ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b)));
    }
  }
};

}  // namespace

void run_avx2(const Problem& p) { run<F32x8>(p); }

}  // namespace sgrt::cpu::gemm_impl
