// Optimizer state and gradients in f32, f16, e4m3 or e5m2 behind a power-of-two
// scale (quant.h's OptScaleSlot): stored code = encode(x * s), value =
// decode(code) / s. A master's f32 working copy (dequantize) and a gradient's
// low-precision copy (quantize_grad) go through load_span / store_span; the
// updates decode and encode in registers (optimizer_step.h).
#pragma once
#include <algorithm>
#include <cmath>

#include "cpu/op_args.h"
#include "cpu/quantize.h"
#include "cpu/quantize_kernels.h"
#include "formats/formats.h"

namespace sgrt::cpu {

// The scale that puts `amax` just under the format's largest value (NUMERICS
// §2 with margin 0); an amax of 0, inf or NaN keeps `scale`. f32 stays at 1.
inline float next_scale(DType d, float scale, float amax) {
  if (d == DType::f32) return 1.f;
  bool kept;
  return fmt::exp2i(scale_exponent(amax, format_max(d), 0, std::ilogb(scale), &kept));
}

// Vectorized (cpu/quantize_kernels.h, bit-identical to formats.h element by element):
// x[0, n) = the values of elements [i0, i0 + n) of a d tensor at p, under inverse scale inv.
inline void load_span(DType d, const void* p, int64_t i0, int64_t n, float inv, float* x) {
  if (d == DType::f32) std::copy_n(static_cast<const float*>(p) + i0, n, x);
  else quant_impl::kernels_for(active_isa()).decode({p, d, i0, n, inv, x});
}
// Elements [i0, i0 + n) of a d tensor at p = the codes of x[0, n) under scale.
inline void store_span(DType d, void* p, int64_t i0, int64_t n, const float* x, float scale) {
  if (d == DType::f32) std::copy_n(x, n, static_cast<float*>(p) + i0);
  else quant_impl::kernels_for(active_isa()).encode({x, i0, n, &scale, 0, d, false, 0, p});
}

// SGD with momentum and AdamW (optimizer_update.cpp).
Status sgd_update(const OpArgs& a);
Status adamw_update(const OpArgs& a);
// A gradient to its low-precision copy under its current amax, and its norm.
Status quantize_grad(const OpArgs& a);

}  // namespace sgrt::cpu
