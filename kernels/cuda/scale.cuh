// Device twins of cpu/quantize.h's scale rules (NUMERICS.md §2), operation for
// operation so both backends pick the same exponents.
#pragma once
#include <cuda_runtime.h>

#include "formats/formats.h"
#include "sgrt/dtype.h"

namespace sgrt::cuda {

// e = floor(log2(fmt_max / amax)) - margin, exactly (frexp mantissas), clamped to
// [-126, 127]; `prev` and *kept = true when amax is 0, inf or NaN.
__device__ inline int32_t scale_exponent(float amax, float fmt_max, int margin, int32_t prev, bool* kept) {
  *kept = !(amax > 0) || isinf(amax);
  if (*kept) return prev;
  int ea, ef;
  const float ma = frexpf(amax, &ea), mf = frexpf(fmt_max, &ef);
  const int e = ef - ea - (mf < ma ? 1 : 0) - margin;
  return e < -126 ? -126 : e > 127 ? 127 : e;
}

// Encodes x (already multiplied by its scale) into format t's code.
__device__ inline uint32_t encode_as(DType t, float v) {
  switch (t) {
    case DType::e4m3: return fmt::encode(fmt::spec_e4m3(), v);
    case DType::e5m2: return fmt::encode(fmt::spec_e5m2(), v);
    case DType::e2m1: return fmt::encode(fmt::spec_e2m1(), v);
    case DType::f16: return fmt::encode(fmt::spec_f16(), v);
    default: return fmt::encode(fmt::spec_bf16(), v);
  }
}

// Element i of a stored low-precision or f32 tensor, as a float (E2M1: two per byte,
// low nibble first).
__device__ inline float load_as_float(const void* p, DType t, int64_t i) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return fmt::f16_decode(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return fmt::bf16_decode(static_cast<const uint16_t*>(p)[i]);
    case DType::e4m3: return fmt::e4m3_decode(b[i]);
    case DType::e5m2: return fmt::e5m2_decode(b[i]);
    case DType::e2m1: return fmt::e2m1_decode(b[i >> 1] >> (4 * (i & 1)));
    case DType::e8m0: return fmt::e8m0_decode(b[i]);
    default: return 0.0f;
  }
}

}  // namespace sgrt::cuda
