// dequant_matmul: y[M, P] = x[M, Q] B[Q, P] for a frozen quantized w [N, K]
// (q8_0 / q4_1 blocks): B[q][p] = w[p][q] (x @ w^T, Q = K, P = N) or, with
// transpose_w, w[q][p] (x @ w, Q = N, P = K). Tiles of w are decoded into shared
// memory as they load (never a whole f32 copy of w); a tiled FP32 GEMM (no
// cooperative matrices): a 64x64 tile of y per workgroup, 4x4 per invocation
// (rows ty + 16 i, columns tx + 16 j), 32 reduction indices per step; every y
// element sums q in order (deterministic).
// OP: bit 0 transpose_w, bits 1-2 the block kind (blocks.glsl). off = {x, w, y};
// p = {M, Q, P}; n = bytes per row of w.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "blocks.glsl"
layout(local_size_x = 16, local_size_y = 16) in;

const bool TRANS = (OP & 1u) != 0u;
const uint KIND = (OP >> 1) & 3u;
const uint TM = 64u, TP = 64u, TQ = 32u;

shared float xs[TQ][TM];  // x tile, transposed; with ws 16 KiB, Vulkan's guaranteed minimum
shared float ws[TQ][TP];  // decoded tile of B

void main() {
  uint M = pc.p[0], Q = pc.p[1], P = pc.p[2];
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  uint m0 = gl_WorkGroupID.y * TM, p0 = gl_WorkGroupID.x * TP;
  // The loops over acc unroll (the epilogue's too: no `continue`), so it is
  // values, not an array in function memory (gemm_tiled.glsl).
  float acc[4][4];
  [[unroll]] for (uint i = 0u; i < 4u; ++i) [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
  for (uint q0 = 0u; q0 < Q; q0 += TQ) {
    for (uint e = tid; e < TM * TQ; e += 256u) {
      uint m = e / TQ, q = e % TQ;  // along x's rows
      xs[q][m] = m0 + m < M && q0 + q < Q ? F[pc.off[0] + (m0 + m) * Q + q0 + q] : 0.0;
    }
    for (uint e = tid; e < TP * TQ; e += 256u) {
      // Consecutive invocations walk one row of w along its blocks.
      uint p = TRANS ? e % TP : e / TQ, q = TRANS ? e / TP : e % TQ;
      uint gp = p0 + p, gq = q0 + q;
      float v = 0.0;
      if (gp < P && gq < Q) v = TRANS ? block_value(KIND, pc.off[1], pc.n, gq, gp) : block_value(KIND, pc.off[1], pc.n, gp, gq);
      ws[q][p] = v;
    }
    barrier();
    [[unroll]] for (uint q = 0u; q < TQ; ++q) {
      float a[4], b[4];
      [[unroll]] for (uint i = 0u; i < 4u; ++i) { a[i] = xs[q][ty + 16u * i]; b[i] = ws[q][tx + 16u * i]; }
      [[unroll]] for (uint i = 0u; i < 4u; ++i)
        [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uint m = m0 + ty + 16u * i;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      uint p = p0 + tx + 16u * j;
      if (m < M && p < P) F[pc.off[2] + m * P + p] = acc[i][j];
    }
  }
}
