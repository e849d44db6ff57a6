// NVFP4's two scale levels (docs/numerics.md §2, block scaling): an FP32 tensor scale and,
// per block of 16 elements, an E4M3 block scale chosen "four over six". One
// definition for the CPU (cpu/quantize.cpp) and CUDA (cuda/quantize.cu); Vulkan's
// quantize.comp mirrors it. scripts/quant_reference.py is the independent reference.
//
// The block choice compares two sums of squares, so every backend must round them
// alike: on the device the _rn intrinsics never fuse into FMAs; on the host
// cpu/quantize.cpp, the one file that includes this header, is built with
// -ffp-contract=off (kernels/CMakeLists.txt).
#pragma once
#include <stdint.h>

#include "formats/formats.h"

namespace sgrt::fmt {

#if defined(__CUDA_ARCH__)
SGRT_HD inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
SGRT_HD inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
#else
inline float mul_rn(float a, float b) { return a * b; }
inline float add_rn(float a, float b) { return a + b; }
#endif

// The smallest tensor scale: 2^-118 keeps every multiplier 1 / (s * ts) finite
// (s >= 2^-9, the least E4M3 scale that is not zero).
constexpr float kNvfp4MinTensorScale = 3.00926553e-36f;  // 2^-118

// The block scale the tensor's amax gets under "six": 256, not E4M3's 448, so that
// "four"'s 1.5x larger scale (384) stays representable for every block, the one
// holding the amax included (Cook et al.'s implementation does the same; at 448
// blocks above 2/3 of the amax lost the choice, their "four" clamped to 448).
constexpr float kNvfp4SixScaleMax = 256.0f;

// amax / (6 * 256), at least kNvfp4MinTensorScale. When amax is 0, inf or NaN the
// previous scale is kept (*kept = true), and 1 when there is none (a state that
// starts at 0): an all-zero tensor must not divide by a zero scale.
SGRT_HD inline float nvfp4_tensor_scale(float amax, float prev, bool* kept) {
  auto usable = [](float v) { return v > 0 && float_bits(v) < 0x7F800000u; };  // finite, > 0
  *kept = !usable(amax);
  if (*kept) return usable(prev) ? prev : 1.0f;
  const float ts = amax / (kE2M1Max * kNvfp4SixScaleMax);
  return ts > kNvfp4MinTensorScale ? ts : kNvfp4MinTensorScale;
}

// An element's multiplier under E4M3 block-scale code c: 1 / (decode(c) * ts), 0
// for a zero scale.
SGRT_HD inline float nvfp4_mult(uint32_t c, float ts) {
  const float d = mul_rn(e4m3_decode(c), ts);
  return d > 0 ? 1.0f / d : 0.0f;
}

// Sum of ((x - x') * 2^k)^2 over a block x[0, n) encoded with block-scale code c,
// where 2^k puts the block's amax in [1, 2): an exact scaling that keeps the squares
// away from the subnormal range, which some GPUs flush.
SGRT_HD inline float nvfp4_block_sse(const float* x, int64_t n, float amax, uint32_t c, float ts) {
  const int k = 127 - static_cast<int>((float_bits(amax) >> 23) & 0xFFu);
  const float p = exp2i(k < -126 ? -126 : k > 127 ? 127 : k);
  const float m = nvfp4_mult(c, ts), unit = mul_rn(mul_rn(e4m3_decode(c), ts), p);
  float sse = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float back = mul_rn(e2m1_decode(e2m1_encode(mul_rn(x[i], m))), unit);
    const float d = add_rn(mul_rn(x[i], p), -back);
    sse = add_rn(sse, mul_rn(d, d));
  }
  return sse;
}

// The block scale from the amax alone, mapped to E2M1's 6 (amax / (6 ts), to
// nearest E4M3): NVIDIA's rule, and nvfp4_16x16's, where it makes a block's scale
// independent of the order its elements are read in (a matrix and its transpose).
SGRT_HD inline uint32_t nvfp4_block_scale_six(float amax, float ts) { return e4m3_encode(amax / mul_rn(kE2M1Max, ts)); }

// The block scale "four over six" (Cook et al., 2025): the block's amax mapped to
// E2M1's 6 (amax / (6 ts), to nearest E4M3) or to 4 (amax / (4 ts)), whichever
// encodes the block with the smaller squared error; 6 on a tie. Elements
// saturate at ±6. (scripts/nvfp4_block_rules.py: lower error on every tensor
// measured than 6 alone or than raising the scale until nothing saturates.)
SGRT_HD inline uint32_t nvfp4_block_scale(const float* x, int64_t n, float amax, float ts) {
  const uint32_t six = nvfp4_block_scale_six(amax, ts), four = e4m3_encode(amax / mul_rn(4.0f, ts));
  if (four == six) return six;
  return nvfp4_block_sse(x, n, amax, four, ts) < nvfp4_block_sse(x, n, amax, six, ts) ? four : six;
}

}  // namespace sgrt::fmt
