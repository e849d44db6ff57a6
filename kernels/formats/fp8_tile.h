// DeepSeek-V3's blockwise FP8 scale (docs/numerics.md, blockwise FP8): one FP32
// scale per 1x128 tile or 128x128 block, amax / fmt_max, not a power of two, so
// the tile's largest element lands on the format's max. One definition for the
// CPU (cpu/quantize.cpp) and CUDA (cuda/quantize.cu); Vulkan's quantize.comp
// mirrors it.
#pragma once
#include <stdint.h>

#include "formats/formats.h"

namespace sgrt::fmt {

constexpr uint32_t kF32InfBits = 0x7F800000u, kF32MinNormalBits = 0x00800000u;

// The dequantization multiplier stored beside the codes (x' = code * scale):
// amax / fmt_max, rounded once. A tile holding a NaN or an infinity gets a NaN
// scale (its products are NaN, and the non-finite step logic sees them); a tile
// whose scale would not be a normal float (all zero, or amax < fmt_max * 2^-126)
// gets scale 1, so its codes are zero or flushed (counted as underflow). Both
// set *kept.
SGRT_HD inline float fp8_tile_scale(float amax, float fmt_max, bool* kept) {
  *kept = true;
  if ((float_bits(amax) & 0x7FFFFFFFu) >= kF32InfBits) return bits_float(0x7FC00000u);
  const float s = amax / fmt_max;
  if (float_bits(s) < kF32MinNormalBits) return 1.0f;
  *kept = false;
  return s;
}

// The encoding multiplier, from the stored scale alone (so every backend's encode
// pass needs nothing else): code = encode(x * (1 / scale)), rounded once; 1 under
// a NaN scale. 1 / scale may put the tile's amax an ulp or two above fmt_max: it
// still encodes to fmt_max, and no element can saturate otherwise.
SGRT_HD inline float fp8_tile_mult(float scale) {
  return (float_bits(scale) & 0x7FFFFFFFu) > kF32InfBits ? 1.0f : 1.0f / scale;
}

}  // namespace sgrt::fmt
