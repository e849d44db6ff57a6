#include "sgrt/scale_spec.h"

namespace sgrt {

bool is_k_chunked(QuantGranularity g) {
  return g == QuantGranularity::tile1x128 || g == QuantGranularity::block128x128;
}

bool is_nvfp4(QuantGranularity g) { return g == QuantGranularity::nvfp4 || g == QuantGranularity::nvfp4_16x16; }

bool is_block(QuantGranularity g) { return g == QuantGranularity::mx || is_nvfp4(g) || is_k_chunked(g); }

int64_t block_size(QuantGranularity g) {
  return g == QuantGranularity::mx ? kMxBlock : is_nvfp4(g) ? kNvfp4Block : is_k_chunked(g) ? kFp8Tile : 0;
}

DType block_scale_dtype(QuantGranularity g) {
  return g == QuantGranularity::mx ? DType::e8m0 : is_nvfp4(g) ? DType::e4m3
         : is_k_chunked(g) ? DType::f32 : DType::i32;
}

const char* granularity_name(QuantGranularity g) {
  switch (g) {
    case QuantGranularity::tensor: return "tensor";
    case QuantGranularity::row: return "row";
    case QuantGranularity::column: return "column";
    case QuantGranularity::mx: return "mx";
    case QuantGranularity::nvfp4: return "nvfp4";
    case QuantGranularity::tile1x128: return "tile1x128";
    case QuantGranularity::block128x128: return "block128x128";
    case QuantGranularity::nvfp4_16x16: return "nvfp4_16x16";
  }
  return "?";
}

const char* scale_mode_name(ScaleMode m) {
  switch (m) {
    case ScaleMode::none: return "none";
    case ScaleMode::static_pow2: return "static_pow2";
    case ScaleMode::current_amax: return "current_amax";
    case ScaleMode::delayed_amax: return "delayed_amax";
    case ScaleMode::dynamic_rescale: return "dynamic_rescale";
    case ScaleMode::block: return "block";
  }
  return "?";
}

Status check_quant_spec(const ScaleSpec& s) {
  DType d = s.dtype;
  bool fp8_or_fp4 = d == DType::e4m3 || d == DType::e5m2 || d == DType::e2m1;
  if (!fp8_or_fp4 && d != DType::f16 && d != DType::bf16)
    return Status::Invalid(std::string("quantizes to ") + dtype_name(d) + ", not a low-precision float");
  if (s.mode == ScaleMode::none || s.mode == ScaleMode::dynamic_rescale)
    return Status::Invalid(std::string("scale mode ") + scale_mode_name(s.mode) + " is not a quantize's scale source");
  if ((s.mode == ScaleMode::block) != is_block(s.granularity))
    return Status::Invalid(std::string("scale mode ") + scale_mode_name(s.mode) + " with granularity " +
                           granularity_name(s.granularity) + " (block mode goes with mx, nvfp4, nvfp4_16x16, tile1x128 or block128x128 granularity)");
  if (is_nvfp4(s.granularity) && d != DType::e2m1)
    return Status::Invalid(std::string(granularity_name(s.granularity)) + " granularity needs e2m1, got " + dtype_name(d));
  if ((s.hadamard || s.stochastic) && s.granularity != QuantGranularity::nvfp4)
    return Status::Invalid(std::string(s.hadamard ? "the Hadamard transform" : "stochastic rounding") +
                           " goes with nvfp4 granularity only, got " + granularity_name(s.granularity));
  if (s.granularity == QuantGranularity::mx && !fp8_or_fp4)
    return Status::Invalid(std::string("mx granularity needs e4m3, e5m2 or e2m1, got ") + dtype_name(d));
  if (is_k_chunked(s.granularity) && d != DType::e4m3 && d != DType::e5m2)
    return Status::Invalid(std::string(granularity_name(s.granularity)) + " granularity needs e4m3 or e5m2, got " + dtype_name(d));
  if (s.history < 0 || s.history > (1 << 20)) return Status::Invalid("amax history of " + std::to_string(s.history) + " steps");
  if (s.margin < 0 || s.margin > 64) return Status::Invalid("scale margin " + std::to_string(s.margin));
  return Status::Ok();
}

}  // namespace sgrt
