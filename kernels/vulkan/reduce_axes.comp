// reduce_sum / reduce_mean / reduce_max along one axis, and sum_to.
// off = {x, -, y}; n = outputs; p = {kept axes, reduced axes, first scratch word
// of the chunk sums}; f[0] = divisor. Axes 0..p[0]-1 enumerate the outputs,
// axes p[0]..p[0]+p[1]-1 the reduced elements.
// OP >> 8 = 0: one invocation an output adds its terms in the input's order,
// the CPU reference's bit for bit up to the add itself (workgroups of 64: a few
// hundred outputs spread over several compute units). Where the reduced axes
// merge into one (sum_to over leading axes: terms one stride apart) the terms
// load eight at a time before they are added in order, so a sum waits on
// memory once per eight terms. sum_to's column sums (more than kChunk terms a
// stride apart) the lowering splits in two passes, so that thousands of rows
// of a few hundred columns keep a GPU busy: 1 sums each output's chunks of
// kChunk terms (an invocation an output and chunk) into scratch, 2 adds an
// output's chunk sums in chunk order: the CPU's sum_to's order there too
// (sgrt/column_sums.h), bit for bit.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "quant.glsl"
#include "strided.glsl"
layout(local_size_x = 64) in;

const uint kPhase = OP >> 8;
const bool kMax = (OP & 0xFFu) == OP_ReduceMax;
const uint kBatch = 8u;
const uint kChunk = 64u;  // sgrt/column_sums.h

float combine(float acc, float v) { return kMax ? (v > acc ? v : acc) : acc + v; }
float initial() { return kMax ? uintBitsToFloat(0xFF800000u) : 0.0; }

// acc / d rounded as the CPU's division (OpFDiv may be off by an ulp: NVIDIA's
// was on the mean below), quant.glsl's div_rn on the magnitude.
float divided(float acc, float d) {
  if (d == 1.0) return acc;
  return uintBitsToFloat(floatBitsToUint(div_rn(abs(acc), d)) | (floatBitsToUint(acc) & 0x80000000u));
}

// acc combined with terms [first, end) of `base`, `step` words apart, in order.
float fold_terms(float acc, uint base, uint first, uint end, uint step) {
  uint r = first;
  for (; r + kBatch <= end; r += kBatch) {
    float v[kBatch];
    [[unroll]] for (uint u = 0u; u < kBatch; ++u) v[u] = F[base + (r + u) * step];
    [[unroll]] for (uint u = 0u; u < kBatch; ++u) acc = combine(acc, v[u]);
  }
  for (; r < end; ++r) acc = combine(acc, F[base + r * step]);
  return acc;
}

void main() {
  uint kept = pc.p[0], red = pc.p[1];
  uint count = 1u;
  for (uint k = kept; k < kept + red; ++k) count *= pc.dim[k];
  if (kPhase == 1u) {  // output o's chunk ch -> scratch[p[2] + ch * n + o]
    uint chunks = (count + kChunk - 1u) / kChunk;
    FOR_EACH_INDEX(i, pc.n * chunks) {
      uint o = i % pc.n, first = i / pc.n * kChunk;
      float acc = fold_terms(initial(), pc.off[0] + strided_offset(o, 0u, kept), first, min(count, first + kChunk),
                             pc.stride[kept]);
      scratch[pc.p[2] + i] = floatBitsToUint(acc);
    }
    return;
  }
  if (kPhase == 2u) {  // output o: its chunk sums in chunk order
    uint chunks = (count + kChunk - 1u) / kChunk;
    FOR_EACH_INDEX(o, pc.n) {
      float acc = initial();
      for (uint ch = 0u; ch < chunks; ++ch) acc = combine(acc, uintBitsToFloat(scratch[pc.p[2] + ch * pc.n + o]));
      F[pc.off[2] + o] = divided(acc, pc.f[0]);
    }
    return;
  }
  FOR_EACH_INDEX(o, pc.n) {
    uint base = pc.off[0] + strided_offset(o, 0u, kept);
    float acc = initial();
    if (red == 1u) acc = fold_terms(acc, base, 0u, count, pc.stride[kept]);
    else for (uint r = 0u; r < count; ++r) acc = combine(acc, F[base + strided_offset(r, kept, red)]);
    F[pc.off[2] + o] = divided(acc, pc.f[0]);
  }
}
