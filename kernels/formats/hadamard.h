// nvfp4-train's random Hadamard transform (docs/numerics.md, NVFP4 training): each
// 16-element block v of a row becomes v M with M = diag(s) H16 / 4, H16 the 16x16
// Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i & j)) and s one fixed
// random sign vector. M M^T = I, so when both operands of a GEMM are transformed
// along K with the same M their product is unchanged in exact arithmetic, while
// each block's outliers are spread over its 16 elements before E2M1 sees them.
// One definition for every backend that runs the recipe.
#pragma once
#include <stdint.h>

#include "formats/formats.h"

namespace sgrt::fmt {

constexpr int kHadamardBlock = 16;
// s_i = -1 where bit i is set: drawn once (sr_random(2025, 0) & 0xFFFF) and fixed,
// the same for every tensor, run and step, as both operands must share it.
constexpr uint32_t kHadamardSigns = 0x7D5Du;

// v <- v diag(s) H16 / 4, in place: a fast Walsh-Hadamard transform (the sums in
// butterfly order) and an exact scaling by 1/4.
SGRT_HD inline void hadamard16(float* v) {
  for (int i = 0; i < kHadamardBlock; ++i)
    if ((kHadamardSigns >> i) & 1u) v[i] = -v[i];
  for (int h = 1; h < kHadamardBlock; h *= 2)
    for (int i = 0; i < kHadamardBlock; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  for (int i = 0; i < kHadamardBlock; ++i) v[i] *= 0.25f;
}

}  // namespace sgrt::fmt
