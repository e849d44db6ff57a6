// NEON (Advanced SIMD, baseline on AArch64) F32 GEMM kernel: 6 x 12 register tile,
// 18 accumulators of the 32 q registers, 3 for B and 6 for A values (GCC uses them
// as fmla by-element operands). An 8 x 12 tile spills accumulators to the stack.
// Each lane accumulates its K products in order with fused multiply-adds, like the
// portable kernel (compiled with contraction on AArch64), over the same KC blocks:
// the two agree to the bit up to the merge into C (tests/test_gemm.cpp says where).
#include <arm_neon.h>

#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

struct F32x4 {
  using Elem = float;
  using reg = float32x4_t;
  static constexpr int KU = 1, W = 4, NV = 3, MR = 6;
  static constexpr int64_t KC = 256, MC = 6 * 16, NC = 3072;
  static reg zero() { return vdupq_n_f32(0.0f); }
  static reg loadb(const float* p) { return vld1q_f32(p); }
  static reg bcast(const float* p) { return vld1q_dup_f32(p); }
  static reg dot(reg acc, reg a, reg b) { return vfmaq_f32(acc, a, b); }
  static reg load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, reg v) { vst1q_f32(p, v); }
  static reg mul(reg a, reg b) { return vmulq_f32(a, b); }
  static reg fma(reg a, reg b, reg c) { return vfmaq_f32(c, a, b); }
  static reg set1(float v) { return vdupq_n_f32(v); }
  static float convert(float v) { return v; }
  // 16 bytes (signed: S) to floats, exactly (GGUF blocks' codes).
  template <bool S>
  static void bytes_to_f32(const uint8_t* p, float* out) {
    const uint8x16_t b = vld1q_u8(p);
    for (int h = 0; h < 2; ++h) {
      const uint8x8_t half = h ? vget_high_u8(b) : vget_low_u8(b);
      const int16x8_t w = S ? vmovl_s8(vreinterpret_s8_u8(half)) : vreinterpretq_s16_u16(vmovl_u8(half));
      vst1q_f32(out + 8 * h, vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))));
      vst1q_f32(out + 8 * h + 4, vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))));
    }
  }
};

}  // namespace

void run_neon(const Problem& p) { run<F32x4>(p); }

}  // namespace sgrt::cpu::gemm_impl
