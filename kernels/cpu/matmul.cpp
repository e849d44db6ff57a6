// MatMul in FP32 on the 2-D views of its operands ([leading dims product, last]).
// One row of A goes to a matrix-vector product that streams B once (x @ W^T:
// the GEMM's own; x @ W: here): the blocked GEMM would first pack all of B,
// which for one row costs more than the product itself. An A that is almost all zeros (FP4's
// outlier residual, ~2% non-zero) goes to a sparse product, which adds an addend
// (OpArgs::addend: the compensation's sum with the FP4 product) as it stores.
#include <algorithm>

#include "cpu/gemm.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/quad.h"

namespace sgrt::cpu {

namespace {

// y [n] = x [k] @ B [k, n]: rows of B scaled and summed, each thread over its own
// columns (a B stored [n, k] is the GEMM's matrix-vector case).
void gemv(int64_t n, int64_t k, const float* x, const float* b, float* y) {
  parallel_for(n, 256, [&](int64_t n0, int64_t n1) {
    for (int64_t j = n0; j < n1; ++j) y[j] = 0.f;
    for (int64_t i = 0; i < k; ++i) {
      const float xi = x[i], *row = b + i * n;
      for (int64_t j = n0; j < n1; ++j) y[j] += xi * row[j];
    }
  });
}

// Whether at most 1/kSparseShare of a[0..count) is non-zero. A dense operand is
// told apart within its first 1/kSparseShare, in vectorizable chunks.
constexpr int64_t kSparseShare = 16;
bool mostly_zero(const float* a, int64_t count) {
  constexpr int64_t kChunk = 1024;
  int64_t budget = count / kSparseShare;
  for (int64_t i = 0; i < count; i += kChunk) {
    const int64_t end = std::min(count, i + kChunk);
    int64_t nonzero = 0;
    for (int64_t j = i; j < end; ++j) nonzero += a[j] != 0.f;
    if ((budget -= nonzero) < 0) return false;
  }
  return true;
}

// C [m, n] = A [m, k] @ op(B) for a mostly-zero A: row r is the sum, from 0,
// of A[r, c] * op(B)[c, :] over its non-zeros in increasing c (a fixed order
// whatever the threads; its own rounding, not the blocked GEMM's), kColumns of
// it at a time in registers. A zero skips its row of B,
// so a NaN there reaches only the rows that multiply it. A transposed B [n, k] is
// copied to [k, w] panels of w columns first, so those rows are contiguous; a
// panel holds at most kPanelFloats (a large B is not copied whole).
constexpr int64_t kPanelFloats = 1 << 21;  // 8 MiB of scratch
constexpr int64_t kColumns = 32;           // a row of C is summed this many columns at a time, in registers

// The non-zeros of a[0, k) (a NaN is one) into at (their indices, increasing)
// and value; returns how many. A vector at a time: ~2% of a residual is non-zero.
int64_t row_nonzeros(const float* a, int64_t k, int64_t* at, float* value) {
  int64_t count = 0;
  auto take = [&](int64_t i) {  // branch-free append
    at[count] = i;
    value[count] = a[i];
    count += a[i] != 0.f;
  };
  int64_t i = 0;
  for (; i + 4 <= k; i += 4)
    if (any_lane(load_quad(a + i) != Quad{}))
      for (int64_t l = 0; l < 4; ++l) take(i + l);
  for (; i < k; ++i) take(i);
  return count;
}

// addend, when given: C = addend + the product, element by element (addend may be
// C); then bias [n], when given, added to every row (each a separate add's rounding).
void sparse_a_gemm(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, const float* b, const float* addend,
                   const float* bias, float* c) {
  const int64_t width = trans_b ? std::min(n, std::max<int64_t>(16, kPanelFloats / k)) : n;
  for (int64_t j0 = 0; j0 < n; j0 += width) {
    const int64_t w = std::min(width, n - j0);
    const float* panel = b + j0;  // row i of op(B)'s columns [j0, j0 + w) at panel + i * ld
    int64_t ld = n;
    if (trans_b) {
      float* bt = static_cast<float*>(thread_scratch(0, sizeof(float) * k * w));
      transpose_last_two(b + j0 * k, bt, Shape{k, w}, {1, k});
      panel = bt, ld = w;
    }
    parallel_for(m, 8, [&](int64_t r0, int64_t r1) {
      auto* at = static_cast<int64_t*>(thread_scratch(1, sizeof(int64_t) * k));
      auto* value = static_cast<float*>(thread_scratch(2, sizeof(float) * k));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t nnz = row_nonzeros(a + r * k, k, at, value);
        float* cr = c + r * n + j0;
        const float* yr = addend ? addend + r * n + j0 : nullptr;
        int64_t j = 0;
        for (; j + kColumns <= w; j += kColumns) {
          Quad acc[kColumns / 4] = {};
          for (int64_t t = 0; t < nnz; ++t) {
            const float* bi = panel + at[t] * ld + j;
            for (int64_t q = 0; q < kColumns / 4; ++q) acc[q] += value[t] * load_quad(bi + 4 * q);
          }
          if (yr)
            for (int64_t q = 0; q < kColumns / 4; ++q) acc[q] = load_quad(yr + j + 4 * q) + acc[q];
          if (bias)
            for (int64_t q = 0; q < kColumns / 4; ++q) acc[q] += load_quad(bias + j0 + j + 4 * q);
          for (int64_t q = 0; q < kColumns / 4; ++q) store_quad(cr + j + 4 * q, acc[q]);
        }
        for (; j < w; ++j) {
          float acc = 0.f;
          for (int64_t t = 0; t < nnz; ++t) acc += value[t] * panel[at[t] * ld + j];
          if (yr) acc = yr[j] + acc;
          cr[j] = bias ? acc + bias[j0 + j] : acc;
        }
      }
    });
  }
}

}  // namespace

Status k_matmul_f32(const OpArgs& a) {
  const Shape& as = a.in[0].shape();
  const Shape& bs = a.in[1].shape();
  int64_t ar = a.in[0].n / as.back(), ac = as.back();
  int64_t br = a.in[1].n / bs.back(), bc = bs.back();
  bool ta = a.attrs->i("trans_a"), tb = a.attrs->i("trans_b");
  int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  float* c = a.out[0].f();
  const bool vector = !ta && !tb && m == 1, sparse = !ta && m > 1 && mostly_zero(a.in[0].f(), m * k);
  if (sparse) {
    sparse_a_gemm(tb, m, n, k, a.in[0].f(), a.in[1].f(), a.addend, a.bias, c);
    activate_rows(c, m, n, n, a.act);
    return Status::Ok();
  }
  // An addend that is the output's own bytes: the product goes aside first.
  float* prod = a.addend == c ? static_cast<float*>(thread_scratch(3, sizeof(float) * m * n)) : c;
  // The bias and the activation in the GEMM's epilogue, unless an addend comes first.
  const bool epilogue = !a.addend && !vector;
  if (vector) gemv(n, k, a.in[0].f(), a.in[1].f(), prod);
  else gemm_f32(ta, tb, m, n, k, 1.f, a.in[0].f(), ac, a.in[1].f(), bc, 0.f, prod, n, epilogue ? a.bias : nullptr,
                Triangle::none, epilogue ? a.act : Activation{});
  if (a.addend)
    parallel_for(m * n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) c[i] = a.addend[i] + prod[i];
    });
  if (epilogue) return Status::Ok();
  if (a.bias) add_bias_rows(c, m, n, a.bias);
  activate_rows(c, m, n, n, a.act);
  return Status::Ok();
}

}  // namespace sgrt::cpu
