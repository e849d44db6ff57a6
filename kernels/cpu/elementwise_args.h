// The elementwise family's arguments and its entry points per ISA: plain
// pointers, no Status or std::string (see elementwise_kernels.h for why).
#pragma once
#include <cstdint>

#include "sgrt/ops.h"

namespace sgrt::cpu {

// y[i] = op(x[i]) or op(x[i], z[i]) for i < n; alpha is Scale's factor. DgeGrad
// (FP4's gradient estimator): y = x f'(z 2^col_exp[c]) over rows of `cols` (x the
// weight gradient, z the weight, col_exp its per-input-channel scale exponents).
struct ElementwiseArgs {
  OpCode code;
  const float* x;
  const float* z;  // the second operand of two-input ops
  float* y;
  int64_t n;
  float alpha;
  const int32_t* col_exp = nullptr;
  int64_t cols = 0;
};
// false: `code` is not an elementwise op (nothing written).
bool elementwise_avx2(const ElementwiseArgs& a);    // elementwise_avx2.cpp
bool elementwise_avx512(const ElementwiseArgs& a);  // elementwise_avx512.cpp
bool elementwise_run(const ElementwiseArgs& a);     // elementwise.cpp: at the widest ISA this CPU has

}  // namespace sgrt::cpu
