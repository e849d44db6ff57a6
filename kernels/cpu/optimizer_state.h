// Optimizer state and gradients in f32, f16, e4m3 or e5m2 behind a power-of-two
// scale (quant.h's OptScaleSlot): stored code = encode(x * s), value =
// decode(code) / s. The updates read and write parameters, moments, momentum
// and gradients through these views: Codec<D> where the dtype is fixed at
// compile time (the update loops), ScaledState where it is not.
#pragma once
#include <cmath>
#include <type_traits>

#include "cpu/op_args.h"
#include "cpu/quantize.h"
#include "formats/formats.h"

namespace sgrt::cpu {

template <DType D>
struct Codec {
  static float get(const void* p, int64_t i, float inv) {
    if constexpr (D == DType::f16) return fmt::f16_decode(static_cast<const uint16_t*>(p)[i]) * inv;
    else if constexpr (D == DType::e4m3) return fmt::e4m3_decode(static_cast<const uint8_t*>(p)[i]) * inv;
    else if constexpr (D == DType::e5m2) return fmt::e5m2_decode(static_cast<const uint8_t*>(p)[i]) * inv;
    else return static_cast<const float*>(p)[i];
  }
  static void set(void* p, int64_t i, float x, float scale) {
    if constexpr (D == DType::f16) static_cast<uint16_t*>(p)[i] = fmt::f16_encode(x * scale);
    else if constexpr (D == DType::e4m3) static_cast<uint8_t*>(p)[i] = fmt::e4m3_encode(x * scale);
    else if constexpr (D == DType::e5m2) static_cast<uint8_t*>(p)[i] = fmt::e5m2_encode(x * scale);
    else static_cast<float*>(p)[i] = x;
  }
};

// f(std::integral_constant<DType, d>) for d among Ds; false when d is not.
template <DType... Ds, class F>
bool with_dtype(DType d, F&& f) {
  return ((d == Ds && (f(std::integral_constant<DType, Ds>{}), true)) || ...);
}

// The scale that puts `amax` just under the format's largest value (NUMERICS
// §2 with margin 0); an amax of 0, inf or NaN keeps `scale`. f32 stays at 1.
inline float next_scale(DType d, float scale, float amax) {
  if (d == DType::f32) return 1.f;
  bool kept;
  return fmt::exp2i(scale_exponent(amax, format_max(d), 0, std::ilogb(scale), &kept));
}

class ScaledState {
 public:
  ScaledState(const TensorArg& t, float scale) : data_(t.data), dtype_(t.type->dtype), scale_(scale), inv_(1.f / scale) {}
  float get(int64_t i) const {
    float v = 0;
    with_dtype<DType::f16, DType::e4m3, DType::e5m2, DType::f32>(dtype_, [&](auto d) { v = Codec<d()>::get(data_, i, inv_); });
    return v;
  }
  void set(int64_t i, float x) const {
    with_dtype<DType::f16, DType::e4m3, DType::e5m2, DType::f32>(dtype_, [&](auto d) { Codec<d()>::set(data_, i, x, scale_); });
  }
  float next_scale(float amax) const { return cpu::next_scale(dtype_, scale_, amax); }

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
