// The elementwise ops at AVX-512 (16 lanes) width.
#include "cpu/elementwise_kernels.h"

namespace sgrt::cpu {

bool elementwise_avx512(const ElementwiseArgs& a) { return elementwise_impl::run(a); }

}  // namespace sgrt::cpu
