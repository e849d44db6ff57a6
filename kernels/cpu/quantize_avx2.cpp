// The quantizer's inner loops at AVX2 width: 8 lanes of 32 bits.
#include "cpu/quantize_simd.h"

namespace sgrt::cpu::quant_impl {

const Kernels kAvx2 = make_kernels<8>();

}  // namespace sgrt::cpu::quant_impl
