// Internal: a GEMM after argument checking, as handed to the per-ISA drivers
// (gemm_<isa>.cpp). Plain data so every ISA translation unit can share it.
#pragma once
#include <cstdint>

#include "cpu/gemm.h"
#include "sgrt/dtype.h"

namespace sgrt::cpu::gemm_impl {

// op(X)[o][k] lives at data[o * s_outer + k * s_k] (element units; E2M1 nibbles).
struct Source {
  const void* data;
  DType dtype;
  int64_t s_outer, s_k;
  const float* lut;     // e4m3 / e5m2: 256 entries; e2m1: 16; else null
  const uint16_t* lut_bf16;  // the same table as BF16 bits (values are exact in BF16)
  const float* kscale;  // multiplier kscale[o * kscale_ld + k / kblock], or null
  int64_t kscale_ld, kblock;
};

struct Problem {
  int64_t M, N, K;
  Source a, b;        // a: outer = M; b: outer = N
  const float* rs;    // [M] row multipliers (alpha and A's tensor/outer scales)
  const float* cs;    // [N] column multipliers (B's outer scales)
  float beta;
  float* C;
  int64_t ldc;
  // C holds this product transposed: element (i, j) at C[j * ldc + i], merged as
  // (acc * rs[i]) * cs[j], the untransposed product's rounding (gemm.cpp's narrow case).
  bool c_trans = false;
  // Added to C's stored columns (c_trans: to its rows, the product's columns)
  // after the whole product, rounded as a separate add; null: none.
  const float* bias = nullptr;
  Triangle tri = Triangle::none;  // never with c_trans
  Activation act{};               // after the bias, on the last K block's store
};

// One row of A against a B stored [N, K] (a decode step's x @ W^T): the f32
// drivers run it as matrix-vector products (gemm_driver.h's gemv), as the blocked
// path would pack all of B for it and fill MR - 1 rows of every micro-tile with zeros.
inline bool is_gemv(const Problem& p) {
  return p.M == 1 && !p.c_trans && p.tri == Triangle::none && p.a.s_k == 1 && p.b.s_k == 1;
}

// A product with a side of at most kSkinny (a LoRA adapter's rank, a classifier's
// classes) between plain f32 operands: the f32 drivers run it without packing
// (gemm_skinny.h), as the blocked path would fill most of every micro-tile with
// zeros and copy the long operand for a few multiply-adds an element. Each
// element's sum is taken whole by one thread in an order fixed by the shape; a
// product of at most 16 columns sums each row as a one-row product does, so its
// columns may round otherwise than the same columns of a wider product.
// Where the blocked path is as fast (bench_gemm --shapes on AVX-512: rows of
// fewer than 128 columns, dot products over K < 128), it keeps the product.
inline constexpr int64_t kSkinny = 16, kSkinnyLong = 128;
inline bool skinny_fits(const Problem& p) {
  const auto plain = [](const Source& s) { return s.dtype == DType::f32 && !s.kscale; };
  if (!plain(p.a) || !plain(p.b) || p.c_trans || p.tri != Triangle::none) return false;
  if (p.K <= kSkinny) return p.N >= kSkinnyLong;  // rows of K outer products
  if (p.N <= kSkinny && p.a.s_k == 1) return p.K >= kSkinnyLong;  // dot products of A's rows
  // A stored [K, M] and B [K, N] (a weight gradient): outer products of their rows.
  return p.a.s_outer == 1 && p.b.s_outer == 1 && (p.M <= kSkinny || p.N <= kSkinny);
}

// One driver per kernel; each is compiled with its own ISA flags.
void run_generic(const Problem& p);
void run_avx2(const Problem& p);
void run_avx512(const Problem& p);
void run_avx512_bf16(const Problem& p);
void run_neon(const Problem& p);       // AArch64 only
void run_neon_bf16(const Problem& p);  // AArch64 only

}  // namespace sgrt::cpu::gemm_impl
