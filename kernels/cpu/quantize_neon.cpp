// The quantizer's inner loops on NEON: quantize_simd.h's 4 lanes of 32 bits (which
// gcc already maps onto q registers for the portable path) with its SGRT_QUANT_NEON
// parts: fcvtn/fcvtl for f16 encode (nearest) and decode, and xtn/uxtl for the
// 8- and 16-bit code stores and loads, which gcc does not pick for the vector
// extensions' conversions. AArch64 only; cpu_features picks it as Isa::neon (the
// baseline), SGRT_ISA=generic the portable copy.
#define SGRT_QUANT_NEON 1
#include "cpu/quantize_simd.h"

namespace sgrt::cpu::quant_impl {

const Kernels kNeon = make_kernels<4>();

}  // namespace sgrt::cpu::quant_impl
