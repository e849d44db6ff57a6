// The portable GEMM: C[M,N] = op(A) op(B), f32, tiled through shared memory.
// OP bit 0: trans_a, bit 1: trans_b. off = {a, b, c}; p = {M, N, K};
// dim = {lda, ldb} (row lengths of the stored 2-D views). A 64x64 tile of C per
// workgroup, 4x4 per invocation; every C element sums k in order (deterministic).
#version 450
#include "common.glsl"
layout(local_size_x = 16, local_size_y = 16) in;

const uint BM = 64u, BN = 64u, BK = 16u, T = 4u;
const bool TA = (OP & 1u) != 0u;
const bool TB = (OP & 2u) != 0u;

shared float As[BK][BM + 1u];
shared float Bs[BK][BN + 1u];

void main() {
  uint M = pc.p[0], N = pc.p[1], K = pc.p[2], lda = pc.dim[0], ldb = pc.dim[1];
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  float acc[T][T];
  for (uint i = 0u; i < T; ++i) for (uint j = 0u; j < T; ++j) acc[i][j] = 0.0;

  for (uint k0 = 0u; k0 < K; k0 += BK) {
    // Loads walk each operand along its contiguous dimension.
    for (uint e = tid; e < BM * BK; e += 256u) {
      uint m = TA ? e % BM : e / BK, k = TA ? e / BM : e % BK;
      uint gm = row0 + m, gk = k0 + k;
      As[k][m] = gm < M && gk < K ? F[pc.off[0] + (TA ? gk * lda + gm : gm * lda + gk)] : 0.0;
    }
    for (uint e = tid; e < BN * BK; e += 256u) {
      uint n = TB ? e / BK : e % BN, k = TB ? e % BK : e / BN;
      uint gn = col0 + n, gk = k0 + k;
      Bs[k][n] = gn < N && gk < K ? F[pc.off[1] + (TB ? gn * ldb + gk : gk * ldb + gn)] : 0.0;
    }
    barrier();
    for (uint k = 0u; k < BK; ++k) {
      float a[T], b[T];
      for (uint i = 0u; i < T; ++i) a[i] = As[k][ty + 16u * i];
      for (uint j = 0u; j < T; ++j) b[j] = Bs[k][tx + 16u * j];
      for (uint i = 0u; i < T; ++i) for (uint j = 0u; j < T; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint i = 0u; i < T; ++i) {
    uint r = row0 + ty + 16u * i;
    if (r >= M) continue;
    for (uint j = 0u; j < T; ++j) {
      uint c = col0 + tx + 16u * j;
      if (c < N) F[pc.off[2] + r * N + c] = acc[i][j];
    }
  }
}
