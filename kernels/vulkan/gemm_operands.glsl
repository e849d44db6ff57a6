// What the GEMM shaders (gemm_tiled.glsl, gemm_coop.comp) share: the
// specialization's operand layout and formats, each operand element decoded
// with its inner or block scale, and the epilogue's outer scales.
// OP bits 0-1: trans_a, trans_b; 2-4 / 5-7: A's / B's sgrt::DType; 8-10 / 11-13:
// A's / B's scale kind (SK_*; matmul: 0). off = {a, b, c, a_scale, b_scale,
// a_state}; dim = {lda, ldb, a_scale_ld, b_scale_ld, b_state}.
#ifndef SGRT_GEMM_OPERANDS_GLSL
#define SGRT_GEMM_OPERANDS_GLSL
#include "quant.glsl"

const bool TA = (OP & 1u) != 0u;
const bool TB = (OP & 2u) != 0u;
const uint ADT = (OP >> 2) & 7u, BDT = (OP >> 5) & 7u, ASK = (OP >> 8) & 7u, BSK = (OP >> 11) & 7u;
const uint SK_TENSOR = 1u, SK_OUTER = 2u, SK_INNER = 3u, SK_MX = 4u, SK_NVFP4 = 5u, SK_TILE = 6u, SK_BLOCK2D = 7u;
const uint kStateTensorScale = 3u;

// op(X)[o][k], stored at element idx of the tensor at word `off`, decoded and
// times its inner or block scale (scale tensor at word `so`, `sld` per row).
float load(uint dt, uint sk, uint off, uint idx, uint so, uint sld, uint o, uint k) {
  float v = decode(dt, load_code(off, idx, dt_bits(dt)));
  if (sk == SK_INNER) v *= pow2(-I[so + k]);
  else if (sk == SK_MX) v *= fmt_e8m0_decode(load_code(so, o * sld + k / 32u, 8u));
  else if (sk == SK_NVFP4) v *= fmt_decode(FMT_E4M3, load_code(so, o * sld + k / 16u, 8u));
  return v;
}

// Decode-first (OP bits 16 / 17, DEC_A / DEC_B; gemm_tiled.glsl, gemm_thin.comp):
// the operand's values, decoded with their inner or block scales by
// gemm_decode.comp, are f32 words of the scratch buffer from word off[0] / off[1].
const bool DEC_A = (OP & (1u << 16)) != 0u, DEC_B = (OP & (1u << 17)) != 0u;

// op(A)[m][k] and op(B)[k][n], stored at element idx.
float load_a(uint idx, uint m, uint k) {
  return DEC_A ? uintBitsToFloat(scratch[pc.off[0] + idx]) : load(ADT, ASK, pc.off[0], idx, pc.off[3], pc.dim[2], m, k);
}
float load_b(uint idx, uint n, uint k) {
  return DEC_B ? uintBitsToFloat(scratch[pc.off[1] + idx]) : load(BDT, BSK, pc.off[1], idx, pc.off[4], pc.dim[3], n, k);
}

// A scale or an add folded into the product (OP bits 19 / 20, EPI_SCALE /
// EPI_ADD; runtime/src/product_fusion.h): C's element e, v, times f[0], or
// plus the addend's element e (from word stride[0]), as elementwise.comp's
// scale and add round them. Callers compute v `precise`, so its last multiply
// is not fused with the add.
const bool EPI_SCALE = (OP & (1u << 19)) != 0u, EPI_ADD = (OP & (1u << 20)) != 0u;
float epilogue(float v, uint e) {
  precise float y = v;
  if (EPI_SCALE) y = y * pc.f[0];
  if (EPI_ADD) y = F[pc.stride[0] + e] + y;
  return y;
}

// The epilogue multiplier of outer index o (cpu/gemm.cpp's outer_scales, alpha 1).
float outer(uint sk, uint so, uint state, uint o) {
  float m = sk == SK_NVFP4 ? F[state + kStateTensorScale] : 1.0;
  if (sk == SK_TENSOR) m *= pow2(-I[so]);
  return sk == SK_OUTER ? m * pow2(-I[so + o]) : m;
}

#endif
