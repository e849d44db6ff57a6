// C[M,N] = op(A) op(B) where one side of C, T = min(M, N), is at most 16:
// LoRA's rank-r products (x A^T [tokens, r], dy^T low [out, r], dlow^T x
// [r, in]), which a 64x64 tile of gemm_tiled.glsl fills to r / 64 and walks K
// in one workgroup per tile with two barriers every 16 of K. Here each
// workgroup takes LONG indices of the long side; its 256 invocations are LONG
// x LANES, and lane j of long index l sums op's k = j, j + LANES, ... for all T
// thin indices (no barrier in the loop), then one invocation per output adds
// the LANES sums in lane order and applies the epilogue. Deterministic; the
// association differs from gemm_tiled's. Operands decode as gemm_tiled's
// (gemm_operands.glsl: matmul, qmatmul with tensor, outer, inner, MX and NVFP4
// scales, decode-first); blockwise FP8 stays tiled.
// OP as gemm_tiled.glsl's (a fused scale or add: gemm_operands.glsl), plus
// bit 18 (THIN_N): N is the thin side, else M.
// off = {a, b, c, a_scale, b_scale, a_state}; p = {M, N, K};
// dim = {lda, ldb, a_scale_ld, b_scale_ld, b_state}.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "gemm_operands.glsl"
layout(local_size_x = 256) in;

const uint TMAX = 16u, LONG = 8u, LANES = 32u;  // LONG x LANES = the workgroup
const bool THIN_N = (OP & (1u << 18)) != 0u;

// part[lane][(long index * TMAX + thin index) ^ lane]: 16 KiB, Vulkan's floor.
// The XOR spreads a store of one sum by the 32 lanes over 32 banks (a row is
// 128 words: unswizzled, every lane's word would sit in one bank) and keeps the
// final sums' reads, one row at a time, on consecutive words.
shared float part[LANES][LONG * TMAX];

// op(A)[m][k] and op(B)[k][n] by their indices.
float a_at(uint m, uint k) { return load_a(TA ? k * pc.dim[0] + m : m * pc.dim[0] + k, m, k); }
float b_at(uint k, uint n) { return load_b(TB ? n * pc.dim[1] + k : k * pc.dim[1] + n, n, k); }

void main() {
  uint M = pc.p[0], N = pc.p[1], K = pc.p[2];
  uint T = THIN_N ? N : M, L = THIN_N ? M : N;
  uint tid = gl_LocalInvocationIndex;
  // Neighbouring invocations walk the long operand's contiguous axis: k where
  // it is stored along K (A untransposed, B transposed), else the long index.
  bool along_k = THIN_N ? !TA : TB;
  uint lane = along_k ? tid % LANES : tid / LONG, li = along_k ? tid / LANES : tid % LONG;
  uint l = gl_WorkGroupID.x * LONG + li;
  // precise with fma: one rounding per product-add on every device.
  precise float acc[TMAX];
  [[unroll]] for (uint t = 0u; t < TMAX; ++t) acc[t] = 0.0;
  if (l < L)
    for (uint k = lane; k < K; k += LANES) {
      float x = THIN_N ? a_at(l, k) : b_at(k, l);
      [[unroll]] for (uint t = 0u; t < TMAX; ++t)
        if (t < T) acc[t] = fma(x, THIN_N ? b_at(k, t) : a_at(t, k), acc[t]);
    }
  [[unroll]] for (uint t = 0u; t < TMAX; ++t) part[lane][(li * TMAX + t) ^ lane] = acc[t];
  barrier();
  uint o = tid % TMAX, lo = gl_WorkGroupID.x * LONG + tid / TMAX;  // this invocation's output, if any
  if (tid < LONG * TMAX && o < T && lo < L) {
    float sum = 0.0;
    for (uint j = 0u; j < LANES; ++j) sum += part[j][tid ^ j];
    uint m = THIN_N ? lo : o, n = THIN_N ? o : lo;
    precise float v = sum * outer(BSK, pc.off[4], pc.dim[4], n) * outer(ASK, pc.off[3], pc.off[5], m);
    F[pc.off[2] + m * N + n] = epilogue(v, m * N + n);
  }
}
