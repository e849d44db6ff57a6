// GEMM on cooperative matrices (tensor cores): the tiled GEMM's contract (OP
// bits, push constants; gemm_operands.glsl), with A and B tiles rounded to FP16
// in shared memory and FP32 accumulation, 16x16x16 products, four subgroups per
// 64x64 tile of C. f32 operands round (matmul under SGRT_VULKAN_COOP=1);
// qmatmul's FP8/FP4 codes, times an NVFP4 block scale if any, are FP16 values
// already, so their products are exact and only the summation order differs
// from the tiled shader's (the lowering sends no other codes here); tensor and
// outer scales make the same epilogue (acc * cs[j]) * rs[i].
// Spec constant 1 = workgroup size = 4 * subgroup size. Written against
// GL_KHR_cooperative_matrix, or GL_NV_cooperative_matrix where glslc predates it.
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#if SGRT_COOP_KHR
#extension GL_KHR_cooperative_matrix : require
#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MAT_LOAD(m, arr, off, ld) coopMatLoad(m, arr, off, ld, gl_CooperativeMatrixLayoutRowMajor)
#define MAT_STORE(m, arr, off, ld) coopMatStore(m, arr, off, ld, gl_CooperativeMatrixLayoutRowMajor)
#define MAT_MULADD coopMatMulAdd
#else
#extension GL_NV_cooperative_matrix : require
#define MAT_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MAT_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MAT_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define MAT_LOAD(m, arr, off, ld) coopMatLoadNV(m, arr, off, ld, false)
#define MAT_STORE(m, arr, off, ld) coopMatStoreNV(m, arr, off, ld, false)
#define MAT_MULADD coopMatMulAddNV
#endif
#include "gemm_operands.glsl"
layout(local_size_x_id = 1) in;

// A 64x64 tile of C per workgroup of four subgroups, each a 32x32 quarter as
// 2x2 accumulators; K in steps of 32 (two 16-deep products per barrier pair).
const uint BM = 64u, BN = 64u, BK = 32u;

shared float16_t As[BM * BK];  // row-major [BM][BK]
shared float16_t Bs[BK * BN];  // row-major [BK][BN]
shared float Cs[BM * BN];

void main() {
  uint M = pc.p[0], N = pc.p[1], K = pc.p[2], lda = pc.dim[0], ldb = pc.dim[1];
  uint tid = gl_LocalInvocationID.x, threads = gl_WorkGroupSize.x;
  uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  uint r0 = (gl_SubgroupID / 2u) * 32u, c0 = (gl_SubgroupID % 2u) * 32u;  // this subgroup's quarter
  MAT_C acc00 = MAT_C(0.0), acc01 = MAT_C(0.0), acc10 = MAT_C(0.0), acc11 = MAT_C(0.0);
  for (uint k0 = 0u; k0 < K; k0 += BK) {
    // Loads walk each operand along its contiguous dimension.
    for (uint e = tid; e < BM * BK; e += threads) {
      uint m = TA ? e % BM : e / BK, k = TA ? e / BM : e % BK, gm = row0 + m, gk = k0 + k;
      As[m * BK + k] = float16_t(gm < M && gk < K ? load(ADT, ASK, pc.off[0], TA ? gk * lda + gm : gm * lda + gk, pc.off[3], pc.dim[2], gm, gk) : 0.0);
    }
    for (uint e = tid; e < BK * BN; e += threads) {
      uint n = TB ? e / BK : e % BN, k = TB ? e % BK : e / BN, gn = col0 + n, gk = k0 + k;
      Bs[k * BN + n] = float16_t(gn < N && gk < K ? load(BDT, BSK, pc.off[1], TB ? gn * ldb + gk : gk * ldb + gn, pc.off[4], pc.dim[3], gn, gk) : 0.0);
    }
    barrier();
    for (uint kk = 0u; kk < BK; kk += 16u) {
      MAT_A a0, a1;
      MAT_B b0, b1;
      MAT_LOAD(a0, As, r0 * BK + kk, BK);
      MAT_LOAD(a1, As, (r0 + 16u) * BK + kk, BK);
      MAT_LOAD(b0, Bs, kk * BN + c0, BN);
      MAT_LOAD(b1, Bs, kk * BN + c0 + 16u, BN);
      acc00 = MAT_MULADD(a0, b0, acc00);
      acc01 = MAT_MULADD(a0, b1, acc01);
      acc10 = MAT_MULADD(a1, b0, acc10);
      acc11 = MAT_MULADD(a1, b1, acc11);
    }
    barrier();
  }
  MAT_STORE(acc00, Cs, r0 * BN + c0, BN);
  MAT_STORE(acc01, Cs, r0 * BN + c0 + 16u, BN);
  MAT_STORE(acc10, Cs, (r0 + 16u) * BN + c0, BN);
  MAT_STORE(acc11, Cs, (r0 + 16u) * BN + c0 + 16u, BN);
  barrier();
  for (uint e = tid; e < BM * BN; e += threads) {
    uint r = row0 + e / BN, c = col0 + e % BN;
    if (r < M && c < N) F[pc.off[2] + r * N + c] = Cs[e] * outer(BSK, pc.off[4], pc.dim[4], c) * outer(ASK, pc.off[3], pc.off[5], r);
  }
}
