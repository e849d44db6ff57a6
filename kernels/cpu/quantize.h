// Scaled quantization of f32 tensors to FP8 / FP4 / FP16 / BF16 (NUMERICS.md §2, §4).
//
// Convention: with scale exponent e, the stored code is q = cast(x * 2^e) and the
// real value is x' = q * 2^-e. A power-of-two scale is exact and cheap; it comes from
//   e = floor(log2(fmt_max / amax)) - margin        (computed exactly, clamped to [-126, 127])
// and when amax is 0, inf or NaN the previous exponent is kept (and counted).
// The cast is round-to-nearest-even with saturation (formats/formats.h), or
// stochastic with noise fmt::sr_random(seed, element index): reproducible on any
// thread count. Inputs are row-major [rows, cols], contiguous; E2M1 outputs pack two
// codes per byte, low nibble first, element i = r * cols + c.
//
// The scales these functions produce plug into the GEMM (cpu/gemm.h) unchanged:
//   quantize: exps as GemmOperand{scale_dtype = i32} (tensor: OperandScale::tensor; rows
//             of A / columns of B: outer; columns of a weight used as op(B)^T: inner)
//   quantize_mx: scales as OperandScale::block, block 32, scale_dtype e8m0
//   quantize_nvfp4: OperandScale::block, block 16, scale_dtype e4m3, tensor_scale
//   quantize_nvfp4_16x16: as quantize_nvfp4 once each block row's scales are
//             repeated for its 16 rows (cpu/quant_ops.cpp)
//   quantize_fp8_tiles: gemm_k_chunked's operand scales (cpu/gemm.h)
#pragma once
#include <cstdint>

#include "sgrt/dtype.h"
#include "sgrt/scale_spec.h"  // kMxBlock, kNvfp4Block

namespace sgrt::cpu {

struct QuantParams {
  DType fmt = DType::e4m3;  // e4m3, e5m2, e2m1, f16 or bf16
  int margin = 0;
  bool stochastic = false;  // stochastic rounding instead of nearest-even
  uint32_t seed = 0;
  // Given exponents (update_scale = false): also measure stats.amax, which only a
  // delayed-scaling history reads; static scales skip it.
  bool measure_amax = true;
};

struct QuantStats {
  float amax = 0;           // max |x| over the whole input (NaN if any NaN)
  int64_t saturated = 0;    // elements with |x * scale| > fmt_max (clamped to ±max)
  int64_t underflow = 0;    // non-zero elements whose code is a signed zero
  int64_t kept_scales = 0;  // scale groups whose amax was 0/inf/NaN (previous scale kept)
  const char* error = nullptr;  // set when the arguments were rejected (nothing written)
};


// e = floor(log2(fmt_max / amax)) - margin, clamped to [-126, 127]; returns `prev`
// and sets *kept = true when amax is 0, inf or NaN.
int32_t scale_exponent(float amax, float fmt_max, int margin, int32_t prev, bool* kept);

enum class QuantAxis : uint8_t { tensor, row, col };  // one exponent per tensor / row / column

// exps has 1, rows or cols entries: in, the previous exponents; out, the ones used.
// update_scale = true: current scaling (this tensor's amax sets the exponents);
// false: the given exponents are used (static or delayed scaling; stats.amax, measured
// when p.measure_amax, feeds the delayed history).
QuantStats quantize(const float* x, int64_t rows, int64_t cols, QuantAxis axis,
                    const QuantParams& p, bool update_scale, void* q, int32_t* exps);

// MXFP8 / MXFP4: blocks of 32 consecutive elements of a row share an E8M0 scale,
// the dequantization multiplier 2^-e with e from the block's amax (above; an
// all-zero block uses e = 0 and counts as kept; a block holding a NaN or an
// infinity gets OCP's NaN scale 0xFF, so its products are NaN, and counts as kept).
// scales: [rows][ceil(cols / 32)]. Unlike OCP's floor(log2(amax)) - emax rule,
// this one never saturates.
QuantStats quantize_mx(const float* x, int64_t rows, int64_t cols, const QuantParams& p,
                       void* q, uint8_t* scales);

// NVFP4: E2M1 codes, blocks of 16 along a row with an E4M3 block scale, times an FP32
// tensor scale: x' = q * e4m3(block_scale) * tensor_scale. Both scales are
// formats/nvfp4.h's: tensor_scale = amax / (6 * 256) (in: the previous one, kept when
// amax is 0/inf/NaN, 1 if that is not positive); each block's scale maps its amax to
// 6 or to 4, whichever errs less; elements saturate at ±6. p.fmt is ignored.
// block_scales: [rows][ceil(cols / 16)].
QuantStats quantize_nvfp4(const float* x, int64_t rows, int64_t cols, const QuantParams& p,
                          void* q, uint8_t* block_scales, float* tensor_scale);

// NVFP4 in 16x16 blocks (nvfp4-train's weights): as quantize_nvfp4, but 16 rows x
// 16 columns share an E4M3 scale, the block amax mapped to 6 (formats/nvfp4.h), so
// x and x^T quantize to the same values. block_scales: [ceil(rows / 16)][ceil(cols / 16)].
QuantStats quantize_nvfp4_16x16(const float* x, int64_t rows, int64_t cols, const QuantParams& p,
                                void* q, uint8_t* block_scales, float* tensor_scale);

// out = x with every full 16-element block of each row multiplied by
// formats/hadamard.h's M (a trailing partial block copied as is, which keeps a
// GEMM's product unchanged when both operands go through this along K).
void hadamard_rows(const float* x, int64_t rows, int64_t cols, float* out);

// Blockwise FP8 (DeepSeek-V3): tiles of tile_rows x 128 (tile_rows 1: 1x128 tiles
// along a row; 128: 128x128 blocks; partial tiles at the edges) share an FP32
// scale amax / fmt_max, codes encode(x * (1 / scale)) (formats/fp8_tile.h: NaN
// for a tile holding a NaN or an infinity, 1 for an all-zero one; both counted as
// kept). scales:
// [ceil(rows / tile_rows)][ceil(cols / 128)], the dequantization multipliers.
// p.fmt is e4m3 or e5m2. Nothing saturates by construction: saturated is 0.
QuantStats quantize_fp8_tiles(const float* x, int64_t rows, int64_t cols, int64_t tile_rows,
                              const QuantParams& p, void* q, float* scales);

}  // namespace sgrt::cpu
