// Internal: the f32 products with a side of at most kSkinny (gemm_problem.h's
// skinny_fits), which gemm_driver.h's run() hands to skinny<V>(). Included at the
// end of gemm_driver.h: it uses the driver's helpers and, like them, has internal
// linkage in each ISA's file.
//
// None of the three shapes packs the long operand:
// - K <= 16, N >= 128 (LoRA's up-projection (x A^T) B^T, its input gradient d_low A):
//   each row of C is K rows of B scaled by A's K values; B stored [N, K] is
//   transposed once. Each sum is K multiply-adds (V::fma) in order, as the
//   blocked path's (one K block).
// - N <= 16, K >= 128, A's rows contiguous (x A^T, dy B): dot products a row of A at a
//   time in dot16s' order, a one-row product's (gemv); B stored [K, N] is
//   transposed once.
// - A stored [K, M] and B [K, N], M or N <= 16 (the adapters' weight gradients,
//   d_low^T x and dy^T low): the sum over k of the outer products of their k-th
//   rows, the short side broadcast and the long side's columns in vectors.
// An all-zero row of A (the first two) or k row of the short side (the third) is
// skipped: a padding token's. It would add only zeros; the result is the same
// unless the other operand holds an infinity or a NaN (as gemm.cpp's zero rows).
#pragma once
#include "cpu/gemm_driver.h"

namespace sgrt::cpu::gemm_impl {
namespace {

// One lane of V::fma(a, b, c): the columns past the last vectors sum as the
// vectors' lanes do (the portable kernel's a * b + c, fused or not as it is built).
template <class V>
float fma_lane(float a, float b, float c) {
  if constexpr (V::W == 1) return V::fma(a, b, c);
  else return std::fma(a, b, c);
}

// C's rows [i, i + R), columns [j, j + U W): sum over k < K of A[i][k] * B's row k,
// a[r * K + k] being A[i + r][k] (K = 0: an all-zero row's empty sum). R rows
// share each vector of B, as in micro().
template <class V, int R, int U>
void short_k_tile(const Problem& p, int64_t i, const float* a, int64_t K, const float* b, int64_t ldb, int64_t j) {
  constexpr int W = V::W;
  typename V::reg acc[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) acc[r][u] = V::zero();
  for (int64_t k = 0; k < K; ++k) {
    typename V::reg bv[U];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) bv[u] = V::load(b + k * ldb + j + u * W);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const typename V::reg av = V::set1(a[r * K + k]);
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) acc[r][u] = V::fma(av, bv[u], acc[r][u]);
    }
  }
  typename V::reg cs[U];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) cs[u] = V::load(p.cs + j + u * W);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u)
      store_merged<V>(p.C + (i + r) * p.ldc + j + u * W, V::mul(V::mul(acc[r][u], cs[u]), V::set1(p.rs[i + r])),
                      p.beta, p.bias ? p.bias + j + u * W : nullptr);
}

// C's rows [i, i + R) (a, K: their A values, as short_k_tile's), all N columns.
template <class V, int R>
void short_k_rows(const Problem& p, int64_t i, const float* a, int64_t K, const float* b, int64_t ldb) {
  constexpr int U = V::W == 8 ? 2 : 4;  // R x U accumulators (AVX2 has 16 registers)
  const int64_t N = p.N;
  int64_t j = 0;
  for (; j + U * V::W <= N; j += U * V::W) short_k_tile<V, R, U>(p, i, a, K, b, ldb, j);
  for (; j + V::W <= N; j += V::W) short_k_tile<V, R, 1>(p, i, a, K, b, ldb, j);
  for (; j < N; ++j)  // the columns past the last vector, one at a time
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = fma_lane<V>(a[r * K + k], b[k * ldb + j], acc);
      merge_into(p.C[(i + r) * p.ldc + j], (acc * p.cs[j]) * p.rs[i + r], p.beta, p.bias ? p.bias + j : nullptr);
    }
  for (int r = 0; r < R; ++r) activate_run(p.C + (i + r) * p.ldc, N, p.act, (i + r) * p.ldc);
}

template <class V>
void short_k(const Problem& p) {
  constexpr int R = 4;
  const int64_t N = p.N, K = p.K;
  const float* b = static_cast<const float*>(p.b.data);
  int64_t ldb = p.b.s_k;  // B's row k: N values at b + k * ldb
  if (p.b.s_outer != 1) {
    float* t = static_cast<float*>(thread_scratch(1, sizeof(float) * K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) t[k * N + j] = b[j * p.b.s_outer + k * p.b.s_k];
    b = t, ldb = N;
  }
  const float* a = static_cast<const float*>(p.a.data);
  // Tasks of R rows; A's all-zero rows are left out of the tiles and get the empty sum.
  parallel_for(cdiv(p.M, R), std::max<int64_t>(1, 8192 / (N * K)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float rows[R * kSkinny];  // the kept rows' A values, K apart
      int64_t at[R], n = 0;
      for (int64_t i = t * R; i < std::min(p.M, (t + 1) * R); ++i) {
        bool zero = true;
        for (int64_t k = 0; k < K; ++k) zero &= (rows[n * K + k] = a[i * p.a.s_outer + k * p.a.s_k]) == 0.0f;
        if (zero) short_k_rows<V, 1>(p, i, rows + n * K, 0, b, ldb);
        else at[n++] = i;
      }
      if (n == R) short_k_rows<V, R>(p, at[0], rows, K, b, ldb);  // no row zero
      else
        for (int64_t r = 0; r < n; ++r) short_k_rows<V, 1>(p, at[r], rows + r * K, K, b, ldb);
    }
  });
}

template <class V>
void few_columns(const Problem& p) {
  const int64_t N = p.N, K = p.K;
  const float* b = static_cast<const float*>(p.b.data);
  const float* col[kSkinny];  // B's column j: K contiguous values
  if (p.b.s_k == 1) {
    for (int64_t j = 0; j < N; ++j) col[j] = b + j * p.b.s_outer;
  } else {
    float* t = static_cast<float*>(thread_scratch(1, sizeof(float) * N * K));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) t[j * K + k] = b[j * p.b.s_outer + k * p.b.s_k];
    for (int64_t j = 0; j < N; ++j) col[j] = t + j * K;
  }
  const float* a = static_cast<const float*>(p.a.data);
  // I rows x J columns of sums at once (I J 16 / W vectors of them).
  constexpr int T = V::W == 16 ? 4 : V::W >= 4 ? 2 : 1, I = T, J = T;
  parallel_for(cdiv(p.M, I), std::max<int64_t>(1, 8192 / (N * K)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t * I, i1 = std::min(p.M, i0 + I);
      const float* x[I];  // the rows not all zero (a zero row's sums are +0)
      int64_t at[I], n = 0;
      float dot[I][kSkinny] = {};
      for (int64_t i = i0; i < i1; ++i) {
        const float* row = a + i * p.a.s_outer;
        if (!std::all_of(row, row + K, [](float v) { return v == 0.0f; })) x[n] = row, at[n++] = i - i0;
      }
      float out[I * J];
      for (int64_t j = 0; j < N;) {
        const int64_t w = j + J <= N ? J : 1;
        if (n == I && w == J) {
          dot16s<V, I, J>(x, col + j, K, out);
        } else {
          for (int64_t r = 0; r < n; ++r)
            if (w == J) dot16s<V, 1, J>(x + r, col + j, K, out + r * J);
            else dot16s<V>(x + r, col + j, K, out + r * J);
        }
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < w; ++c) dot[at[r]][j + c] = out[r * J + c];
        j += w;
      }
      for (int64_t i = i0; i < i1; ++i) {
        float* c = p.C + i * p.ldc;
        for (int64_t j = 0; j < N; ++j)
          merge_into(c[j], (dot[i - i0][j] * p.cs[j]) * p.rs[i], p.beta, p.bias ? p.bias + j : nullptr);
        activate_run(c, N, p.act, i * p.ldc);
      }
    }
  });
}

// The k_major() product: the short side's ns values of the t-th k with any
// non-zero (`kept` of them, k = ks[t]) at short_rows + t * kSkinny, zero past ns;
// the long side's row k at long_rows + k * ld_long. short_a: C[s][l] (M is the
// short side), else C[l][s].
struct KMajor {
  const Problem* p;
  bool short_a;
  int64_t ns, nl, kept;
  const float* short_rows;
  const int64_t* ks;
  const float* long_rows;
  int64_t ld_long;
};

// C's elements of the long side's [l0, l0 + P W): S >= ns short-side lanes.
template <class V, int S, int P>
void k_major_columns(const KMajor& m, int64_t l0) {
  constexpr int W = V::W, L = P * W;
  typename V::reg acc[S][P];
#pragma GCC unroll 16
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 2
    for (int u = 0; u < P; ++u) acc[s][u] = V::zero();
  for (int64_t t = 0; t < m.kept; ++t) {
    const float* l = m.long_rows + m.ks[t] * m.ld_long + l0;
    const float* sv = m.short_rows + t * kSkinny;
    typename V::reg lv[P];
#pragma GCC unroll 2
    for (int u = 0; u < P; ++u) lv[u] = V::load(l + u * W);
#pragma GCC unroll 16
    for (int s = 0; s < S; ++s) {
      const typename V::reg b = V::set1(sv[s]);
#pragma GCC unroll 2
      for (int u = 0; u < P; ++u) acc[s][u] = V::fma(b, lv[u], acc[s][u]);
    }
  }
  const Problem& p = *m.p;
  if (m.short_a) {
    for (int s = 0; s < m.ns; ++s) {
      float* c = p.C + s * p.ldc + l0;
#pragma GCC unroll 2
      for (int u = 0; u < P; ++u)
        store_merged<V>(c + u * W, V::mul(V::mul(acc[s][u], V::load(p.cs + l0 + u * W)), V::set1(p.rs[s])),
                        p.beta, p.bias ? p.bias + l0 + u * W : nullptr);
      activate_run(c, L, p.act, s * p.ldc + l0);
    }
    return;
  }
  alignas(64) float v[S][L];  // C[l0 + l][s] before the merge
  for (int s = 0; s < m.ns; ++s)
#pragma GCC unroll 2
    for (int u = 0; u < P; ++u)
      V::store(v[s] + u * W, V::mul(V::mul(acc[s][u], V::set1(p.cs[s])), V::load(p.rs + l0 + u * W)));
  for (int64_t l = 0; l < L; ++l) {
    float* c = p.C + (l0 + l) * p.ldc;
    for (int s = 0; s < m.ns; ++s) merge_into(c[s], v[s][l], p.beta, p.bias ? p.bias + s : nullptr);
    activate_run(c, m.ns, p.act, (l0 + l) * p.ldc);
  }
}

// The long side's column l alone (past the last vector).
template <class V>
void k_major_column(const KMajor& m, int64_t l) {
  const Problem& p = *m.p;
  for (int s = 0; s < m.ns; ++s) {
    float acc = 0.0f;
    for (int64_t t = 0; t < m.kept; ++t)
      acc = fma_lane<V>(m.short_rows[t * kSkinny + s], m.long_rows[m.ks[t] * m.ld_long + l], acc);
    const int64_t i = m.short_a ? s : l, j = m.short_a ? l : s;
    merge_into(p.C[i * p.ldc + j], (acc * p.cs[j]) * p.rs[i], p.beta, p.bias ? p.bias + j : nullptr);
  }
  if (!m.short_a) activate_run(p.C + l * p.ldc, m.ns, p.act, l * p.ldc);
  else
    for (int s = 0; s < m.ns; ++s) activate_run(p.C + s * p.ldc + l, 1, p.act, s * p.ldc + l);
}

template <class V, int S, int P>
void k_major_run(const KMajor& m) {
  constexpr int L = P * V::W;
  const int64_t groups = cdiv(m.nl, L);
  parallel_for(groups, std::max<int64_t>(1, (int64_t{1} << 17) / (std::max<int64_t>(m.kept, 1) * S * L)),
               [&](int64_t g0, int64_t g1) {
                 for (int64_t g = g0; g < g1; ++g) {
                   int64_t l = g * L;
                   if (l + L <= m.nl) {
                     k_major_columns<V, S, P>(m, l);
                     continue;
                   }
                   for (; l + V::W <= m.nl; l += V::W) k_major_columns<V, kSkinny, 1>(m, l);
                   for (; l < m.nl; ++l) k_major_column<V>(m, l);
                 }
               });
}

template <class V>
void k_major(const Problem& p) {
  KMajor m{&p, p.M <= kSkinny, 0, 0, 0, nullptr, nullptr, nullptr, 0};
  const Source& ss = m.short_a ? p.a : p.b;
  const Source& ls = m.short_a ? p.b : p.a;
  m.ns = m.short_a ? p.M : p.N, m.nl = m.short_a ? p.N : p.M;
  auto* rows = static_cast<float*>(thread_scratch(1, sizeof(float) * p.K * kSkinny));
  auto* ks = static_cast<int64_t*>(thread_scratch(2, sizeof(int64_t) * p.K));
  for (int64_t k = 0; k < p.K; ++k) {
    const float* r = static_cast<const float*>(ss.data) + k * ss.s_k;
    if (std::all_of(r, r + m.ns, [](float v) { return v == 0.0f; })) continue;
    float* d = rows + m.kept * kSkinny;
    for (int64_t s = 0; s < kSkinny; ++s) d[s] = s < m.ns ? r[s] : 0.0f;
    ks[m.kept++] = k;
  }
  m.short_rows = rows, m.ks = ks;
  m.long_rows = static_cast<const float*>(ls.data), m.ld_long = ls.s_k;
  if (m.ns <= 8) k_major_run<V, 8, 2>(m);
  else k_major_run<V, 16, 1>(m);
}

template <class V>
void skinny(const Problem& p) {
  if (p.K <= kSkinny) return short_k<V>(p);
  if (p.N <= kSkinny && p.a.s_k == 1) return few_columns<V>(p);
  k_major<V>(p);
}

}  // namespace
}  // namespace sgrt::cpu::gemm_impl
