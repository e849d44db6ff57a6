// The typed scale spec: how one quantized tensor's scale is chosen and where
// it lives. The compiler plans it, the IR stores it (ir/'s scale codec maps it
// to and from sg.fbs's ScaleSpec), the loader decodes it onto each quantize and
// qmatmul op, and every backend's kernels read it. One vocabulary, no attribute
// copy: docs/ir.md.
#pragma once
#include <cstdint>
#include <string>

#include "sgrt/dtype.h"
#include "sgrt/status.h"

namespace sgrt {

// How the scale is chosen (the values of sg.fbs's ScaleMode). x = q * 2^-e for
// power-of-two scales.
enum class ScaleMode : uint8_t {
  none = 0,         // stored as is (f32, i32)
  static_pow2,      // compile-time exponent static_log2
  current_amax,     // this step's amax
  delayed_amax,     // max over an amax history of `history` steps
  dynamic_rescale,  // Scalify's dynamic rescale by rescale_norm
  block,            // block scales stored beside the data (mx, nvfp4)
};

// Which elements share one scale. The 2-D view of x is [rows = numel / last
// dim, cols = last dim]; quant.h's quant_scale_type() gives the scale tensor.
enum class QuantGranularity : uint8_t {
  tensor = 0,  // scale i32[1]: exponent e, x' = q * 2^-e
  row = 1,     // scale i32[rows]
  column = 2,  // scale i32[cols]
  mx = 3,      // scale e8m0[rows, ceil(cols / 32)]: MXFP8 / MXFP4 blocks along a row
  nvfp4 = 4,   // scale e4m3[rows, ceil(cols / 16)], FP32 tensor scale in the state
  // DeepSeek-V3's blockwise FP8: FP32 multipliers amax / 448, and the GEMM adds each
  // 128-element K chunk's FP32 partial product times its two scales (docs/numerics.md).
  tile1x128 = 5,     // scale f32[rows, ceil(cols / 128)]: 128 consecutive elements of a row
  block128x128 = 6,  // scale f32[ceil(rows / 128), ceil(cols / 128)]: 128 x 128 blocks
  // NVFP4 in 16x16 blocks (nvfp4-train's weights): one E4M3 scale per block, its
  // amax mapped to 6, so a matrix and its transpose quantize to the same values.
  nvfp4_16x16 = 7,  // scale e4m3[ceil(rows / 16), ceil(cols / 16)], FP32 tensor scale in the state
};

// The norm of Scalify's dynamic rescale (the values of sg.fbs's RescaleNorm).
enum class RescaleNorm : uint8_t { max = 0, l1, l2 };

constexpr int64_t kMxBlock = 32;     // elements per E8M0 block scale
constexpr int64_t kNvfp4Block = 16;  // elements per E4M3 block scale
constexpr int64_t kFp8Tile = 128;    // tile1x128 / block128x128 edge: also the GEMM's K chunk

struct ScaleSpec {
  ScaleMode mode = ScaleMode::none;
  QuantGranularity granularity = QuantGranularity::tensor;
  DType dtype = DType::f32;  // the quantized tensor's element type
  int32_t static_log2 = 0;   // static_pow2: the exponent; otherwise Scalify's estimate (for `info`)
  int32_t history = 0;       // amax history length: the state is f32[kStateHeader + history]
  int32_t margin = 0;        // exponent headroom below the format's max
  RescaleNorm rescale_norm = RescaleNorm::max;
  bool grad_only = false;    // dynamic_rescale: on the gradient only
  // nvfp4 (1x16) only, nvfp4-train: a random Hadamard transform of each row's
  // 16-blocks before quantizing (formats/hadamard.h), and stochastic rounding of
  // the E2M1 codes (the random words keyed by state_tensor and the encode count).
  bool hadamard = false;
  bool stochastic = false;
  int state_tensor = -1;     // the tensor holding the runtime scale
  std::string rule;          // the planner rule that produced it (for `sgrt info`)
};

bool is_block(QuantGranularity g);             // mx, nvfp4, nvfp4_16x16, tile1x128, block128x128
bool is_nvfp4(QuantGranularity g);             // nvfp4, nvfp4_16x16: E4M3 block scales, FP32 tensor scale
// tile1x128 / block128x128: FP32 scales, K-chunked accumulation in the GEMM.
bool is_k_chunked(QuantGranularity g);
int64_t block_size(QuantGranularity g);        // 32, 16, 128, or 0 when not a block granularity
DType block_scale_dtype(QuantGranularity g);   // e8m0 (mx), e4m3 (nvfp4), f32 (tiles), i32 otherwise
const char* granularity_name(QuantGranularity g);
const char* scale_mode_name(ScaleMode m);

// What a quantize may produce: a low-precision dtype, a scale source, block
// mode exactly on block granularities, nvfp4 only on e2m1, mx only on 8-bit
// floats and e2m1, tile1x128 / block128x128 only on 8-bit floats, the Hadamard
// transform and stochastic rounding only on nvfp4. The message says what is wrong; callers name the tensor.
Status check_quant_spec(const ScaleSpec& s);

}  // namespace sgrt
