// dequant_matmul: x f32 [..., K] @ dequant(w)^T with w a frozen q8_0 / q4_1
// [N, K] (transpose_w: x [..., N] @ dequant(w), the input gradient). The blocked
// GEMM decodes panels of w while packing them, so the whole f32 weight never
// exists; one row of x (a decode step) takes its matrix-vector path, which
// decodes one row of w at a time.
#include <string>

#include "cpu/gemm.h"
#include "cpu/op_args.h"

namespace sgrt::cpu {

Status k_dequant_matmul(const OpArgs& a) {
  const TensorArg &x = a.in[0], &w = a.in[1];
  const DType wt = w.type->dtype;
  const int64_t wn = w.shape()[0], wk = w.shape()[1];
  const bool t = a.attrs->i("transpose_w");
  const int64_t in = t ? wn : wk, out = t ? wk : wn, m = x.n / in;
  float* y = a.out[0].f();
  GemmOperand ga, gb;
  ga.data = x.data;
  ga.ld = in;
  gb.data = w.data;
  gb.dtype = wt;
  gb.trans = !t;  // op(B) = dequant(w)^T [K, N] is w stored [N, K]; transpose_w: w itself
  gb.ld = wk;
  if (const char* e = gemm(m, out, in, 1.f, ga, gb, 0.f, y, out)) return Status::Runtime(std::string("dequant_matmul: ") + e);
  return Status::Ok();
}

}  // namespace sgrt::cpu
