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
};

}  // namespace

void run_avx512_bf16(const Problem& p) { run<BF16x16>(p); }

}  // namespace sgrt::cpu::gemm_impl
