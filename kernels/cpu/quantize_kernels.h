// Internal: the vectorized inner loops of cpu/quantize.cpp, one copy per ISA
// (quantize_generic.cpp, quantize_avx2.cpp, quantize_avx512.cpp, quantize_neon.cpp),
// picked by cpu_features' active_isa(); the optimizer updates use them too. Each is
// bit-identical to formats/formats.h's scalar encode and decode
// (tests/test_quantize_simd.cpp sweeps every path against them).
#pragma once
#include <cstdint>

#include "cpu/cpu_features.h"
#include "sgrt/dtype.h"

namespace sgrt::cpu::quant_impl {

// Encode x[0, n) (tensor elements i0 .. i0 + n) as x[j] * mult[j / mult_block]
// (mult_block 0: mult[0] for all; 1: one per element; else a power of two, one
// per block of that many elements from x[0]: MX and NVFP4 blocks) into q, the
// whole tensor's codes (E2M1: two per byte, low nibble first; bytes shared with
// elements outside the span are kept).
struct EncodeArgs {
  const float* x;
  int64_t i0, n;
  const float* mult;
  int64_t mult_block;
  DType fmt;  // e4m3, e5m2, e2m1, f16 or bf16
  bool stochastic;
  uint32_t seed;
  void* q;
};

struct EncodeCounts {
  int64_t saturated = 0;  // |x * mult| > the format's max (inf included, NaN not)
  int64_t underflow = 0;  // x != 0 whose code is a signed zero
};

// out[j] = decode(code of element i0 + j) * mult for j in [0, n).
struct DecodeArgs {
  const void* q;
  DType fmt;  // e4m3, e5m2 or f16
  int64_t i0, n;
  float mult;
  float* out;
};

struct Kernels {
  // max |x[i]| over [0, n); NaN when any element is NaN (0 when n == 0).
  float (*amax)(const float* x, int64_t n);
  // acc[c] = max(acc[c], |x[r, c]|) over rows of a row-major [rows, cols], as
  // |x|'s bit patterns (so a NaN wins).
  void (*amax_cols)(const float* x, int64_t rows, int64_t cols, uint32_t* acc);
  EncodeCounts (*encode)(const EncodeArgs& a);
  void (*decode)(const DecodeArgs& a);
  // formats/nvfp4.h's nvfp4_block_scale (four over six, tensor scale ts) for nb whole
  // blocks of 16 at x into scales[b], to the bit. With q (the codes of x[0, 16 nb),
  // two a byte), also the blocks' E2M1 codes at nearest, encode's for
  // x[16 b + i] * nvfp4_mult(scales[b], ts), their counts added to *c.
  void (*nvfp4_blocks)(const float* x, int64_t nb, float ts, uint8_t* scales, uint8_t* q, EncodeCounts* c);
  // formats/hadamard.h's hadamard16 on nb contiguous blocks of 16 at x into out, to the bit.
  void (*hadamard16_blocks)(const float* x, float* out, int64_t nb);
  // out[b] = amax(x + b * block, block) for nb consecutive blocks (block a multiple of 16).
  void (*block_amax)(const float* x, int64_t nb, int64_t block, float* out);
  // quantize_mx's scales from nb block amaxes (>= 0): cpu::scale_exponent(amax[b],
  // fmt_max, margin, prev 0) as e, scales[b] the E8M0 code of 2^-e (0xFF for a NaN
  // or infinite amax), mult[b] = 2^e; returns how many kept the unit scale.
  int64_t (*mx_scales)(const float* amax, int64_t nb, float fmt_max, int margin, uint8_t* scales, float* mult);
};

extern const Kernels kGeneric;
#if defined(__x86_64__) || defined(__i386__)
extern const Kernels kAvx2, kAvx512;
#elif defined(__aarch64__)
extern const Kernels kNeon;
#endif

inline const Kernels& kernels_for(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa >= Isa::avx512) return kAvx512;
  if (isa >= Isa::avx2) return kAvx2;
#elif defined(__aarch64__)
  if (isa >= Isa::neon) return kNeon;
#endif
  (void)isa;
  return kGeneric;
}

}  // namespace sgrt::cpu::quant_impl
