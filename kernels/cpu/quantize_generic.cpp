// The quantizer's inner loops at portable (SSE2 on x86-64, NEON on AArch64) width: 4 lanes of 32 bits.
#include "cpu/quantize_simd.h"

namespace sgrt::cpu::quant_impl {

const Kernels kGeneric = make_kernels<4>();

}  // namespace sgrt::cpu::quant_impl
