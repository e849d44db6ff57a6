// The elementwise ops at AVX2 (8 lanes) width.
#include "cpu/elementwise_kernels.h"

namespace sgrt::cpu {

bool elementwise_avx2(const ElementwiseArgs& a) { return elementwise_impl::run(a); }

}  // namespace sgrt::cpu
