#include "sgrt/quant.h"

namespace sgrt {

TensorType quant_scale_type(QuantGranularity g, const Shape& x) {
  int64_t cols = x.empty() ? 1 : x.back(), rows = numel(x) / cols;
  switch (g) {
    case QuantGranularity::tensor: return {{1}, DType::i32};
    case QuantGranularity::row: return {{rows}, DType::i32};
    case QuantGranularity::column: return {{cols}, DType::i32};
    case QuantGranularity::mx: return {{rows, (cols + kMxBlock - 1) / kMxBlock}, DType::e8m0};
    case QuantGranularity::nvfp4: return {{rows, (cols + kNvfp4Block - 1) / kNvfp4Block}, DType::e4m3};
    case QuantGranularity::tile1x128: return {{rows, (cols + kFp8Tile - 1) / kFp8Tile}, DType::f32};
    case QuantGranularity::nvfp4_16x16:
      return {{(rows + kNvfp4Block - 1) / kNvfp4Block, (cols + kNvfp4Block - 1) / kNvfp4Block}, DType::e4m3};
    case QuantGranularity::block128x128:
      return {{(rows + kFp8Tile - 1) / kFp8Tile, (cols + kFp8Tile - 1) / kFp8Tile}, DType::f32};
  }
  return {{1}, DType::i32};
}

}  // namespace sgrt
