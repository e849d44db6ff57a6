// CPU GEMMs with FP32 accumulation, row-major storage.
//
//   C[M,N] = alpha * op(A) @ op(B) + beta * C        (C is f32; beta == 0: C not read)
//
// op(A) is [M,K] (A stored [K,M] when trans), op(B) is [K,N] (B stored [N,K] when
// trans). Inputs may be f32, bf16, e4m3, e5m2 or e2m1 (two codes per byte, low
// nibble first, element i of the stored matrix at index row * ld + col), any mix,
// or GGUF's q8_0 / q4_1 blocks (a frozen quantized base: element i in block i / 32,
// so ld must be a multiple of 32; their scales are inside the blocks).
//
// How it runs: operands are decoded while being packed into cache-sized panels, so
// FP8/FP4 cost no extra pass. When neither operand is f32 and the CPU has
// AVX512_BF16 (AArch64: FEAT_BF16, bfdot), panels hold BF16 (E4M3/E5M2/E2M1 and their products with E8M0 or
// E4M3 scales are exact in BF16) and the inner loop is vdpbf16ps; otherwise panels
// hold f32 and the inner loop is FMA (AVX-512, AVX2 or portable by CPUID; NEON on AArch64; see
// cpu_features.h). Both cores are used; each C element's K-reduction stays on one
// thread in a fixed order, so results do not depend on the thread count.
// vdpbf16ps treats BF16 subnormals (|v| < 2^-126) as zero: keep scaled inputs normal.
// An A of f32, bf16 or FP8 codes (stored [M, K], no K or block scales; beta == 0)
// with at least 1/8 of its rows all zero is multiplied over its other rows only
// (zero_rows.h): the same bits, except that a NaN or infinity in B then reaches
// only the rows that multiply it. f32 products with a side of at most 16 (a LoRA
// adapter's rank, a classifier's classes) skip the packing where that is faster
// (gemm_problem.h's skinny_fits, gemm_skinny.h) and skip A's all-zero rows, or
// the zero k of a short side stored [K, *], alike; each row of one with at most
// 16 columns over K >= 128 is summed as that row alone would be.
#pragma once
#include <cstdint>

#include "sgrt/dtype.h"
#include "sgrt/scale_spec.h"  // kFp8Tile

namespace sgrt::cpu {

// A triangle the caller knows of (causal attention's [T, T] tiles), which the
// product may skip a micro-tile at a time. The terms skipped are exact zeros at
// the start or end of each sum, so the result is the full product's.
enum class Triangle : uint8_t {
  none,
  a_lower,  // op(A)[m, k] == 0 for k > m: row m's sum may stop after k = m
  a_upper,  // op(A)[m, k] == 0 for k < m: row m's sum may start at k = m
  c_lower,  // only C[m, n] with n <= m is wanted: C above the diagonal may be left as it was
};

// A ReLU the store applies after the product and its bias (the CPU backend's
// fusion of relu and relu_grad into the product before them,
// runtime/src/product_fusion.h), with those ops' arithmetic:
//  - relu: v > 0 ? v : 0;
//  - mask: relu_grad by a ReLU's output laid out as C, mask[i * ldc + j] > 0 ? v : 0
//    (a ReLU's output is positive exactly where its input is).
struct Activation {
  bool relu = false;
  const float* mask = nullptr;
  bool any() const { return relu || mask; }
};

// The run c[0, n) of C after `act`, in place; `at`: c[0]'s index in C (the
// mask's too). A loop per kind, so each vectorizes. Internal linkage: the
// per-ISA GEMM drivers inline their own copies (as gemm_driver.h's functions).
namespace {
inline void activate_run(float* c, int64_t n, const Activation& act, int64_t at) {
  if (act.relu)
    for (int64_t i = 0; i < n; ++i) c[i] = c[i] > 0.f ? c[i] : 0.f;
  if (act.mask)
    for (int64_t i = 0; i < n; ++i) c[i] = act.mask[at + i] > 0.f ? c[i] : 0.f;
}
}  // namespace

// C [m, n] (row stride ldc) after `act`, in place: for a product whose path
// cannot apply it in the store.
void activate_rows(float* C, int64_t m, int64_t n, int64_t ldc, const Activation& act);

// Plain f32 GEMM (the CPU backend's matmul). bias [N], when given, is added to
// every row of C after the product, rounded as a separate add would round it
// (the portable kernel, compiled to contract, may fuse it into the product's last
// multiply); then `act`.
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc, const float* bias = nullptr, Triangle tri = Triangle::none, Activation act = {});

// C [m, n] (row stride n) += bias [n] on every row: a product's bias where the
// GEMM could not take it (matrix-vector and sparse products, blockwise FP8).
void add_bias_rows(float* C, int64_t m, int64_t n, const float* bias);

// Where an operand's dequantization scales apply. "outer" is the M index for A and
// the N index for B; "inner" is K. real value = decode(code) * scale.
enum class OperandScale : uint8_t {
  none,    // scale unused
  tensor,  // scale[0] for the whole operand                      (epilogue)
  outer,   // scale[i], one per row of op(A) / column of op(B)    (epilogue)
  inner,   // scale[k], one per K index (e.g. FP4 weights per input channel; packing)
  block,   // scale[i * scale_ld + k / block]: `block` consecutive K elements of one
           // outer index share a scale (MXFP8/MXFP4: 32 + E8M0; NVFP4: 16 + E4M3)
};

struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::f32;
  bool trans = false;
  int64_t ld = 0;  // leading dimension of the stored matrix, in elements

  OperandScale scale_mode = OperandScale::none;
  const void* scale = nullptr;
  // f32: multipliers; i32: exponents e meaning 2^-e (the quantizer's `exp`, see
  // quantize.h); e8m0 / e4m3: encoded multipliers (block scales).
  DType scale_dtype = DType::f32;
  int64_t block = 0;     // block mode: K elements per scale
  int64_t scale_ld = 0;  // block mode: scales per outer index; 0 = ceil(K / block)
  float tensor_scale = 1.0f;  // extra multiplier, epilogue (NVFP4's FP32 second level)
};

// Returns nullptr on success, otherwise why the arguments were rejected (C untouched).
// inner / block scales multiply codes while packing; on the BF16 path the products
// must be exact in BF16 (powers of two, E8M0, or E4M3 scales on 4-bit data).
// bias, tri, act: as gemm_f32's.
const char* gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& a,
                 const GemmOperand& b, float beta, float* C, int64_t ldc, const float* bias = nullptr,
                 Triangle tri = Triangle::none, Activation act = {});

// Blockwise FP8 (DeepSeek-V3; gemm_k_chunked.cpp): FP32 accumulation promoted
// every kFp8Tile (128) elements of K,
//   C[m, n] = sum over chunks c of ((sum_{k in c} a[m, k] b[k, n]) * sb(n, c)) * sa(m, c),
// each chunk's sum in FP32 by gemm() above, added to C in chunk order. A is
// stored [M, K] and B [N, K] (K contiguous in both), e4m3 / e5m2 codes with no
// scale of their own; an operand's chunk scale is
//   scale[(outer / outer_per_scale) * ld + c]
// (1x128 tiles: outer_per_scale 1; 128x128 blocks: 128).
struct ChunkScales {
  const float* scale = nullptr;
  int64_t ld = 0;               // scales per outer group: ceil(K / kFp8Tile)
  int64_t outer_per_scale = 1;  // consecutive outer indices sharing a scale row
};
const char* gemm_k_chunked(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const ChunkScales& sa,
                           const GemmOperand& b, const ChunkScales& sb, float* C, int64_t ldc);

}  // namespace sgrt::cpu
