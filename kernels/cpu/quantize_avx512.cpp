// The quantizer's inner loops at AVX-512 width: 16 lanes of 32 bits.
#include "cpu/quantize_simd.h"

namespace sgrt::cpu::quant_impl {

const Kernels kAvx512 = make_kernels<16>();

}  // namespace sgrt::cpu::quant_impl
