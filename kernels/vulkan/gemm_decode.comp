// qmatmul's decode-first path (lower_lowp.cpp): one operand's codes decoded,
// times their inner or block scales, into f32 words of the scratch region,
// which gemm_tiled.glsl then reads in place of the codes. The values are the
// ones its loads would decode (the same function), so the products keep their
// bits; each code is decoded once instead of once per workgroup that loads it.
// OP as gemm_operands.glsl's for A: bit 0 set where the stored rows run along
// K, bits 2-4 the dtype, 8-10 the scale kind. off = {codes, -, -, scales};
// n = elements; p[0] = the first scratch word; dim = {row length, -, scales per row}.
#version 450
#include "gemm_operands.glsl"
layout(local_size_x = 256) in;

void main() {
  uint ld = pc.dim[0];
  FOR_EACH_INDEX(i, pc.n) {
    uint r = i / ld, c = i % ld;  // stored row and column: (k, outer index) where TA, else (outer, k)
    scratch[pc.p[0] + i] = floatBitsToUint(load(ADT, ASK, pc.off[0], i, pc.off[3], pc.dim[2], TA ? c : r, TA ? r : c));
  }
}
