// FP4 (E2M1) differentiable gradient estimator (Wang et al. 2025, NUMERICS.md §4).
// Inside a grid interval of width d (0.5 below 2, 1 in [2, 4], 2 in [4, 6]) with
// u = 2 * offset / d - 1 in [-1, 1], the forward surrogate is
//   f = d * (1 + sign(u) |u|^(1/k)) / 2    and its derivative    f' = |u|^(1/k - 1) / k,
// clamped at 3 (the derivative is infinite at the interval's midpoint); k = 5.
// Values past the grid (|x| > 6, saturated) take the edge's derivative, 1/k.
#pragma once
#include <cmath>

#include "formats/formats.h"

namespace sgrt::fmt {

constexpr float kDgeK = 5.0f;
constexpr float kDgeClamp = 3.0f;

SGRT_HD inline float dge_derivative(float x) {
  float ax = fabsf(x);
  if (ax >= 6.0f) return 1.0f / kDgeK;
  float lo, d;
  if (ax < 2.0f) { d = 0.5f; lo = floorf(ax / d) * d; }
  else if (ax < 4.0f) { d = 1.0f; lo = floorf(ax); }
  else { d = 2.0f; lo = 4.0f; }
  float u = fabsf(2.0f * (ax - lo) / d - 1.0f);
  if (u == 0.0f) return kDgeClamp;
  float g = powf(u, 1.0f / kDgeK - 1.0f) / kDgeK;
  return g < kDgeClamp ? g : kDgeClamp;
}

}  // namespace sgrt::fmt
