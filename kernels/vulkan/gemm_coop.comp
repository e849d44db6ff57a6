// GEMM on cooperative matrices (tensor cores): the tiled GEMM's contract (OP
// bits, push constants; gemm_operands.glsl), with A and B tiles rounded to FP16
// in shared memory and FP32 accumulation, 16x16x16 per subgroup, four subgroups
// per 32x32 tile of C. f32 operands round (matmul under SGRT_VULKAN_COOP=1);
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

const uint BM = 32u, BN = 32u, BK = 16u;

shared float16_t As[BM * BK];  // row-major [BM][BK]
shared float16_t Bs[BK * BN];  // row-major [BK][BN]
shared float Cs[BM * BN];

void main() {
  uint M = pc.p[0], N = pc.p[1], K = pc.p[2], lda = pc.dim[0], ldb = pc.dim[1];
  uint tid = gl_LocalInvocationID.x, threads = gl_WorkGroupSize.x;
  uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  uint sr = gl_SubgroupID / 2u, sc = gl_SubgroupID % 2u;
  MAT_C acc = MAT_C(0.0);
  for (uint k0 = 0u; k0 < K; k0 += BK) {
    for (uint e = tid; e < BM * BK; e += threads) {
      uint m = e / BK, k = e % BK, gm = row0 + m, gk = k0 + k;
      As[e] = float16_t(gm < M && gk < K ? load(ADT, ASK, pc.off[0], TA ? gk * lda + gm : gm * lda + gk, pc.off[3], pc.dim[2], gm, gk) : 0.0);
    }
    for (uint e = tid; e < BK * BN; e += threads) {
      uint k = e / BN, n = e % BN, gn = col0 + n, gk = k0 + k;
      Bs[e] = float16_t(gn < N && gk < K ? load(BDT, BSK, pc.off[1], TB ? gn * ldb + gk : gk * ldb + gn, pc.off[4], pc.dim[3], gn, gk) : 0.0);
    }
    barrier();
    MAT_A a;
    MAT_B b;
    MAT_LOAD(a, As, sr * 16u * BK, BK);
    MAT_LOAD(b, Bs, sc * 16u, BN);
    acc = MAT_MULADD(a, b, acc);
    barrier();
  }
  MAT_STORE(acc, Cs, sr * 16u * BN + sc * 16u, BN);
  barrier();
  for (uint e = tid; e < BM * BN; e += threads) {
    uint r = row0 + e / BN, c = col0 + e % BN;
    if (r < M && c < N) F[pc.off[2] + r * N + c] = Cs[e] * outer(BSK, pc.off[4], pc.dim[4], c) * outer(ASK, pc.off[3], pc.off[5], r);
  }
}
