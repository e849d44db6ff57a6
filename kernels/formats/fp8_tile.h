// DeepSeek-V3's blockwise FP8 scale (docs/numerics.md, blockwise FP8): one FP32
// scale per 1x128 tile or 128x128 block, amax / fmt_max, not a power of two, so
// the tile's largest element lands on the format's max. One definition for the
// CPU (cpu/quantize.cpp) and CUDA (cuda/quantize.cu); Vulkan's quantize.comp
// mirrors it.
#pragma once
#include <stdint.h>

#include "formats/formats.h"

namespace sgrt::fmt {

struct Fp8TileScale {
  float scale;  // dequantization multiplier stored beside the codes: x' = code * scale
  float mult;   // encoding multiplier: code = encode(x * mult)
  bool kept;    // amax was 0, too small for a finite mult, inf or NaN
};

// scale = amax / fmt_max and mult = fmt_max / amax, each rounded once. Both round,
// so amax * mult may exceed fmt_max by an ulp: it still encodes to fmt_max, and no
// element of the tile can saturate otherwise. A tile holding a NaN or an infinity
// gets a NaN scale (its products are NaN, and the non-finite step logic sees
// them); an all-zero tile, or one whose amax is so small (< fmt_max / FLT_MAX)
// that mult overflows, gets scale 1 (its codes are zero or flushed, counted as
// underflow).
SGRT_HD inline Fp8TileScale fp8_tile_scale(float amax, float fmt_max) {
  constexpr uint32_t kInfBits = 0x7F800000u;
  if ((float_bits(amax) & 0x7FFFFFFFu) >= kInfBits) return {bits_float(0x7FC00000u), 1.0f, true};
  const float mult = fmt_max / amax;
  if ((float_bits(mult) & 0x7FFFFFFFu) >= kInfBits) return {1.0f, 1.0f, true};
  return {amax / fmt_max, mult, false};
}

}  // namespace sgrt::fmt
