// AArch64 BF16 kernel for FP8/FP4/BF16 inputs on CPUs with FEAT_BF16 (HWCAP2_BF16):
// panels hold BF16 pairs along K and the inner loop is BFDOT (two products per lane,
// FP32 accumulation), on a 6 x 12 tile as in gemm_neon.cpp. BFDOT adds each lane's
// pair of exact products in one step (Arm: round to odd, BF16/FP32 subnormals as
// zero unless FPCR.EBF), so it is not bit-equal to the FMA kernels; test_gemm
// bounds it against FP64 like the x86 BF16 path.
#include <arm_neon.h>

#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

struct BF16x4 {
  using Elem = uint16_t;
  using reg = float32x4_t;
  static constexpr int KU = 2, W = 4, NV = 3, MR = 6;
  static constexpr int64_t KC = 512, MC = 6 * 16, NC = 3072;
  static reg zero() { return vdupq_n_f32(0.0f); }
  static bfloat16x8_t loadb(const uint16_t* p) { return vreinterpretq_bf16_u16(vld1q_u16(p)); }
  static bfloat16x8_t bcast(const uint16_t* p) {
    uint32_t pair;
    std::memcpy(&pair, p, 4);
    return vreinterpretq_bf16_u32(vdupq_n_u32(pair));
  }
  static reg dot(reg acc, bfloat16x8_t a, bfloat16x8_t b) { return vbfdotq_f32(acc, a, b); }
  static reg load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, reg v) { vst1q_f32(p, v); }
  static reg mul(reg a, reg b) { return vmulq_f32(a, b); }
  static reg fma(reg a, reg b, reg c) { return vfmaq_f32(c, a, b); }
  static reg set1(float v) { return vdupq_n_f32(v); }
  // Inputs here are exact in BF16 (see gemm.h), so truncation is exact.
  static uint16_t convert(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>(u >> 16);
  }
};

}  // namespace

void run_neon_bf16(const Problem& p) { run<BF16x4>(p); }

}  // namespace sgrt::cpu::gemm_impl
