// Optimizer state and gradients in f32, f16, e4m3 or e5m2 behind a power-of-two
// scale (quant.h's OptScaleSlot): stored code = encode(x * s), value =
// decode(code) / s. The updates read and write parameters, moments, momentum
// and gradients through this view.
#pragma once
#include <cmath>

#include "cpu/op_args.h"
#include "cpu/quantize.h"
#include "formats/formats.h"

namespace sgrt::cpu {

class ScaledState {
 public:
  ScaledState(const TensorArg& t, float scale) : data_(t.data), dtype_(t.type->dtype), scale_(scale), inv_(1.f / scale) {}

  bool is_f32() const { return dtype_ == DType::f32; }
  float get(int64_t i) const {
    switch (dtype_) {
      case DType::f16: return fmt::f16_decode(static_cast<const uint16_t*>(data_)[i]) * inv_;
      case DType::e4m3: return fmt::e4m3_decode(static_cast<const uint8_t*>(data_)[i]) * inv_;
      case DType::e5m2: return fmt::e5m2_decode(static_cast<const uint8_t*>(data_)[i]) * inv_;
      default: return static_cast<const float*>(data_)[i];
    }
  }
  void set(int64_t i, float x) const {
    switch (dtype_) {
      case DType::f16: static_cast<uint16_t*>(data_)[i] = fmt::f16_encode(x * scale_); break;
      case DType::e4m3: static_cast<uint8_t*>(data_)[i] = fmt::e4m3_encode(x * scale_); break;
      case DType::e5m2: static_cast<uint8_t*>(data_)[i] = fmt::e5m2_encode(x * scale_); break;
      default: static_cast<float*>(data_)[i] = x;
    }
  }
  // The scale that puts `amax` just under the format's largest value (NUMERICS
  // §2 with margin 0); an amax of 0, inf or NaN keeps the current scale.
  float next_scale(float amax) const {
    if (is_f32()) return 1.f;
    bool kept;
    int e = scale_exponent(amax, format_max(dtype_), 0, std::ilogb(scale_), &kept);
    return fmt::exp2i(e);
  }

 private:
  void* data_;
  DType dtype_;
  float scale_, inv_;
};

// SGD with momentum and AdamW (optimizer_update.cpp).
Status sgd_update(const OpArgs& a);
Status adamw_update(const OpArgs& a);
// A gradient to its low-precision copy under its current amax, and its norm.
Status quantize_grad(const OpArgs& a);

}  // namespace sgrt::cpu
