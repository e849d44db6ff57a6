// AVX-512 F32 GEMM kernel: 14 x 32 register tile (28 accumulators).
#include <immintrin.h>

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
};

}  // namespace

void run_avx512(const Problem& p) { run<F32x16>(p); }

}  // namespace sgrt::cpu::gemm_impl
