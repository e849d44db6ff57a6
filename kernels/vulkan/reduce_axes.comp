// reduce_sum / reduce_mean / reduce_max along one axis and sum_to: each output is
// reduced by one invocation, in the input's row-major order, so the result is
// the CPU reference's bit for bit up to the add itself.
// off = {x, -, y}; n = outputs; p = {kept axes, reduced axes}; f[0] = divisor.
// Axes 0..p[0]-1 enumerate outputs, axes p[0]..p[0]+p[1]-1 the reduced elements.
// Workgroups of 64: a bias gradient's few hundred outputs spread over several
// compute units. Where the reduced axes merge into one (sum_to over leading
// axes: terms one stride apart), the terms load eight at a time before they
// are added in order, so a long sum waits on memory once per eight terms.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "quant.glsl"
#include "strided.glsl"
layout(local_size_x = 64) in;

const bool kMax = OP == OP_ReduceMax;
const uint kBatch = 8u;

float combine(float acc, float v) { return kMax ? (v > acc ? v : acc) : acc + v; }

// acc / d rounded as the CPU's division (OpFDiv may be off by an ulp: NVIDIA's
// was on the mean below), quant.glsl's div_rn on the magnitude.
float divided(float acc, float d) {
  if (d == 1.0) return acc;
  return uintBitsToFloat(floatBitsToUint(div_rn(abs(acc), d)) | (floatBitsToUint(acc) & 0x80000000u));
}

void main() {
  uint kept = pc.p[0], red = pc.p[1];
  uint count = 1u;
  for (uint k = kept; k < kept + red; ++k) count *= pc.dim[k];
  FOR_EACH_INDEX(o, pc.n) {
    uint base = pc.off[0] + strided_offset(o, 0u, kept);
    float acc = kMax ? uintBitsToFloat(0xFF800000u) : 0.0;
    uint r = 0u;
    if (red == 1u) {
      uint step = pc.stride[kept];
      for (; r + kBatch <= count; r += kBatch) {
        float v[kBatch];
        [[unroll]] for (uint u = 0u; u < kBatch; ++u) v[u] = F[base + (r + u) * step];
        [[unroll]] for (uint u = 0u; u < kBatch; ++u) acc = combine(acc, v[u]);
      }
    }
    for (; r < count; ++r) acc = combine(acc, F[base + strided_offset(r, kept, red)]);
    F[pc.off[2] + o] = divided(acc, pc.f[0]);
  }
}
