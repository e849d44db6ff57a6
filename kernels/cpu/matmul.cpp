// MatMul in FP32 on the 2-D views of its operands ([leading dims product, last]).
// One row of A (a decode step's x @ W^T) goes to a matrix-vector product that
// streams B once: the blocked GEMM would first pack all of B, which for one
// row costs more than the product itself.
#include "cpu/gemm.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {

float dot_f32(const float* x, const float* y, int64_t k) {
  float acc[8] = {};  // eight partial sums (in a fixed order) so the loop vectorizes
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * y[i + j];
  for (; i < k; ++i) acc[i % 8] += x[i] * y[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

namespace {

// y [n] = x [k] @ op(B): B [n, k] when trans_b (a dot product per output), else
// [k, n] (rows of B scaled and summed, each thread over its own columns).
void gemv(bool trans_b, int64_t n, int64_t k, const float* x, const float* b, float* y) {
  if (trans_b) {
    parallel_for(n, 16, [&](int64_t n0, int64_t n1) {
      for (int64_t j = n0; j < n1; ++j) y[j] = dot_f32(x, b + j * k, k);
    });
    return;
  }
  parallel_for(n, 256, [&](int64_t n0, int64_t n1) {
    for (int64_t j = n0; j < n1; ++j) y[j] = 0.f;
    for (int64_t i = 0; i < k; ++i) {
      const float xi = x[i], *row = b + i * n;
      for (int64_t j = n0; j < n1; ++j) y[j] += xi * row[j];
    }
  });
}

}  // namespace

Status k_matmul_f32(const OpArgs& a) {
  const Shape& as = a.in[0].shape();
  const Shape& bs = a.in[1].shape();
  int64_t ar = a.in[0].n / as.back(), ac = as.back();
  int64_t br = a.in[1].n / bs.back(), bc = bs.back();
  bool ta = a.attrs->i("trans_a"), tb = a.attrs->i("trans_b");
  int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  if (m == 1 && !ta) gemv(tb, n, k, a.in[0].f(), a.in[1].f(), a.out[0].f());
  else gemm_f32(ta, tb, m, n, k, 1.f, a.in[0].f(), ac, a.in[1].f(), bc, 0.f, a.out[0].f(), n);
  return Status::Ok();
}

}  // namespace sgrt::cpu
