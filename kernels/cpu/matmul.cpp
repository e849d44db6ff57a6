// MatMul in FP32 on the 2-D views of its operands ([leading dims product, last]).
#include "cpu/gemm.h"
#include "cpu/op_args.h"

namespace sgrt::cpu {

Status k_matmul_f32(const OpArgs& a) {
  const Shape& as = a.in[0].shape();
  const Shape& bs = a.in[1].shape();
  int64_t ar = a.in[0].n / as.back(), ac = as.back();
  int64_t br = a.in[1].n / bs.back(), bc = bs.back();
  bool ta = a.attrs->i("trans_a"), tb = a.attrs->i("trans_b");
  int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  gemm_f32(ta, tb, m, n, k, 1.f, a.in[0].f(), ac, a.in[1].f(), bc, 0.f, a.out[0].f(), n);
  return Status::Ok();
}

}  // namespace sgrt::cpu
