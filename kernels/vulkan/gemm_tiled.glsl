// The portable GEMM: C[M,N] = op(A) op(B) with FP32 accumulation, tiled through
// shared memory; matmul (f32) and qmatmul (codes decoded while the tiles load).
// OP bits 0-1: trans_a, trans_b; 2-4 / 5-7: A's / B's sgrt::DType; 8-10 / 11-13:
// A's / B's scale kind (SK_*; matmul: 0). off = {a, b, c, a_scale, b_scale,
// a_state}; p = {M, N, K}; dim = {lda, ldb, a_scale_ld, b_scale_ld, b_state}
// (lda, ldb: row lengths of the stored 2-D views; scale_ld: block scales per
// row). Scales apply as cpu/gemm.cpp's: inner and block ones multiply the
// decoded codes (exactly), tensor / outer ones and NVFP4's tensor scale make the
// epilogue (acc * cs[j]) * rs[i]. Blockwise FP8 (both operands SK_TILE /
// SK_BLOCK2D: FP32 scales per 128-chunk of K, per outer index or per 128 of
// them) promotes the FP32 sum every 128 elements of K as cpu/gemm_k_chunked.cpp:
// each chunk's sum times (scale_a * scale_b) is added to the result in chunk
// order. The includer defines R (a bare 1 or 2: #if tests it), the vec4 blocks
// per invocation along rows and columns: a 64R x 64R tile of C per workgroup of 16x16 invocations, a 4R x 4R
// block per invocation (vec4 reads of the tiles); gemm_tiled.comp has R = 2,
// gemm_tiled64.comp R = 1 (4x the workgroups, for products too small to fill
// a GPU with 128x128 tiles). Every C element sums k in order whatever the tile
// (deterministic, and the same bits from both).
// The loops over the per-invocation arrays are unrolled ([[unroll]]) so the
// arrays stay in registers: indexed in a loop that is not, a driver may put
// them in memory.
// Split-K (OP bit 14, SPLIT): workgroup z sums k in [z Ks, (z + 1) Ks) (Ks =
// dim[7], a multiple of 128, so blockwise FP8's chunks stay whole) and writes
// the raw sums, no epilogue, to the partial buffer at scratch word dim[5]
// ([dim[6] splits][M][N]); then OP bit 15 (REDUCE), one invocation per C
// element, adds the splits' sums in split order and applies the epilogue.
// Deterministic; the association differs from the unsplit sum's.
// Decode-first (OP bits 16 / 17, DEC_A / DEC_B): the operand's values, decoded
// with their inner or block scales by gemm_decode.comp, are f32 words of the
// scratch buffer from word off[0] / off[1]; the epilogue's scales stay here.
// A fused scale or add (OP bits 19 / 20): gemm_operands.glsl's epilogue().
#ifndef SGRT_GEMM_TILED_GLSL
#define SGRT_GEMM_TILED_GLSL
#extension GL_EXT_control_flow_attributes : require
#include "gemm_operands.glsl"
layout(local_size_x = 16, local_size_y = 16) in;

const uint BM = 64u * R, BN = 64u * R, BK = 16u;
const bool CHUNKED = ASK >= SK_TILE;  // the lowering pairs chunked operands only with each other
const uint CHUNK = 128u;
const bool SPLIT = (OP & (1u << 14)) != 0u;
const bool REDUCE = (OP & (1u << 15)) != 0u;

// op(A)[m][k] at As[k][swz(m / 4, k)][m % 4] (16 KiB with Bs at R = 2). The
// swizzle spreads a column of k over the banks: a load that walks k (A stored
// row-major, B transposed) stored 16 k of one m into one bank, 16-way; now 2-way.
shared vec4 As[BK][BM / 4u];
shared vec4 Bs[BK][BN / 4u];
uint swz(uint q, uint k) { return q ^ (k & 7u); }

// Blockwise FP8: the scale of outer index o in K chunk c.
float chunk_scale(uint sk, uint so, uint sld, uint o, uint c) { return F[so + (sk == SK_BLOCK2D ? o / CHUNK : o) * sld + c]; }

// Blockwise FP8's promotion of block (i, v): the chunk's sum times its scales,
// added to the result, multiplication and addition apart as on the CPU. Written
// out, not in an [[unroll]] loop: glslc's optimizer (SPIRV-Tools before 2025's
// fix of its issue 5902) unrolls a loop keeping NoContraction on the first copy
// only, then folds the other copies' a*b + c into Fma, which NVIDIA fuses (one
// rounding): 64x64 and 128x128 tiles fused different elements.
#define PROMOTE(i, v) { precise vec4 add = acc[i][v] * (sa[i] * sb[v]); sum[i][v] = sum[i][v] + add; acc[i][v] = vec4(0.0); }
#if R == 1
#define PROMOTE_ROW(i) PROMOTE(i, 0)
#else
#define PROMOTE_ROW(i) PROMOTE(i, 0) PROMOTE(i, 1)
#endif

// Split-K's second dispatch: C = (the splits' sums in order) * the epilogue.
void reduce_splits(uint M, uint N) {
  uint splits = pc.dim[6], partial = pc.dim[5];
  for (uint e = gl_WorkGroupID.x * 256u + gl_LocalInvocationIndex; e < M * N; e += gl_NumWorkGroups.x * 256u) {
    uint r = e / N, c = e % N;
    float acc = 0.0;
    for (uint z = 0u; z < splits; ++z) acc += uintBitsToFloat(scratch[partial + z * M * N + e]);
    precise float v = acc * outer(BSK, pc.off[4], pc.dim[4], c) * outer(ASK, pc.off[3], pc.off[5], r);
    F[pc.off[2] + e] = epilogue(v, e);
  }
}

void main() {
  uint M = pc.p[0], N = pc.p[1], K = pc.p[2], lda = pc.dim[0], ldb = pc.dim[1];
  if (REDUCE) {
    reduce_splits(M, N);
    return;
  }
  uint k_begin = SPLIT ? gl_WorkGroupID.z * pc.dim[7] : 0u, k_end = SPLIT ? min(K, k_begin + pc.dim[7]) : K;
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  // acc[4 u + i][v]: row 4 (ty + 16 u) + i, columns 4 (tx + 16 v) .. + 3.
  // precise with fma: one rounding per product-add on every device (a driver may
  // otherwise fuse a*b + c in one tile shape and not another: different bits).
  precise vec4 acc[4u * R][R];
  [[unroll]] for (uint i = 0u; i < 4u * R; ++i) [[unroll]] for (uint v = 0u; v < R; ++v) acc[i][v] = vec4(0.0);
  vec4 sum[4u * R][R];  // blockwise FP8: the promoted result; acc holds the chunk's sum
  [[unroll]] for (uint i = 0u; i < 4u * R; ++i) [[unroll]] for (uint v = 0u; v < R; ++v) sum[i][v] = vec4(0.0);

  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    // Loads walk each operand along its contiguous dimension.
    for (uint e = tid; e < BM * BK; e += 256u) {
      uint m = TA ? e % BM : e / BK, k = TA ? e / BM : e % BK;
      uint gm = row0 + m, gk = k0 + k;
      As[k][swz(m / 4u, k)][m % 4u] = gm < M && gk < k_end ? load_a(TA ? gk * lda + gm : gm * lda + gk, gm, gk) : 0.0;
    }
    for (uint e = tid; e < BN * BK; e += 256u) {
      uint n = TB ? e / BK : e % BN, k = TB ? e % BK : e / BN;
      uint gn = col0 + n, gk = k0 + k;
      Bs[k][swz(n / 4u, k)][n % 4u] = gn < N && gk < k_end ? load_b(TB ? gn * ldb + gk : gk * ldb + gn, gn, gk) : 0.0;
    }
    barrier();
    [[unroll]] for (uint k = 0u; k < BK; ++k) {
      vec4 a[R], b[R];
      [[unroll]] for (uint u = 0u; u < R; ++u) { a[u] = As[k][swz(ty + 16u * u, k)]; b[u] = Bs[k][swz(tx + 16u * u, k)]; }
      [[unroll]] for (uint u = 0u; u < R; ++u)
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
          [[unroll]] for (uint v = 0u; v < R; ++v) acc[4u * u + i][v] = fma(vec4(a[u][i]), b[v], acc[4u * u + i][v]);
    }
    barrier();
    if (CHUNKED && ((k0 + BK) % CHUNK == 0u || k0 + BK >= k_end)) {
      uint c = k0 / CHUNK;
      float sa[4 * R];
      vec4 sb[R];
      [[unroll]] for (uint i = 0u; i < 4u * R; ++i)
        sa[i] = chunk_scale(ASK, pc.off[3], pc.dim[2], min(row0 + 4u * (ty + 16u * (i / 4u)) + i % 4u, M - 1u), c);
      [[unroll]] for (uint v = 0u; v < R; ++v)
        [[unroll]] for (uint j = 0u; j < 4u; ++j)
          sb[v][j] = chunk_scale(BSK, pc.off[4], pc.dim[3], min(col0 + 4u * (tx + 16u * v) + j, N - 1u), c);
      PROMOTE_ROW(0) PROMOTE_ROW(1) PROMOTE_ROW(2) PROMOTE_ROW(3)
#if R == 2
      PROMOTE_ROW(4) PROMOTE_ROW(5) PROMOTE_ROW(6) PROMOTE_ROW(7)
#endif
    }
  }
  if (CHUNKED)
    [[unroll]] for (uint i = 0u; i < 4u * R; ++i) [[unroll]] for (uint v = 0u; v < R; ++v) acc[i][v] = sum[i][v];
  // No `continue` in these loops: glslc's optimizer does not unroll a loop that
  // has one, and acc indexed by a loop counter stays an array in memory (local
  // memory on a GPU, for the whole k loop).
  float cs[4 * R];  // the columns' epilogue multipliers
  [[unroll]] for (uint j = 0u; j < 4u * R; ++j) {
    uint c = col0 + 4u * (tx + 16u * (j / 4u)) + j % 4u;
    cs[j] = SPLIT || c >= N ? 1.0 : outer(BSK, pc.off[4], pc.dim[4], c);
  }
  [[unroll]] for (uint i = 0u; i < 4u * R; ++i) {
    uint r = row0 + 4u * (ty + 16u * (i / 4u)) + i % 4u;
    float rs = SPLIT || r >= M ? 1.0 : outer(ASK, pc.off[3], pc.off[5], r);
    [[unroll]] for (uint j = 0u; j < 4u * R; ++j) {
      uint c = col0 + 4u * (tx + 16u * (j / 4u)) + j % 4u;
      if (r < M && c < N) {
        if (SPLIT) scratch[pc.dim[5] + (gl_WorkGroupID.z * M + r) * N + c] = floatBitsToUint(acc[i][j / 4u][j % 4u]);
        else {
          precise float v = acc[i][j / 4u][j % 4u] * cs[j] * rs;
          F[pc.off[2] + r * N + c] = epilogue(v, r * N + c);
        }
      }
    }
  }
}

#endif
