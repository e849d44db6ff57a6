// reduce_sum / reduce_mean / reduce_max along one axis and sum_to: each output is
// reduced by one invocation, in the input's row-major order, so the result is
// the CPU reference's bit for bit up to the add itself.
// off = {x, -, y}; n = outputs; p = {kept axes, reduced axes}; f[0] = divisor.
// Axes 0..p[0]-1 enumerate outputs, axes p[0]..p[0]+p[1]-1 the reduced elements.
#version 450
#include "common.glsl"
#include "strided.glsl"
layout(local_size_x = 256) in;

void main() {
  uint kept = pc.p[0], red = pc.p[1];
  uint count = 1u;
  for (uint k = kept; k < kept + red; ++k) count *= pc.dim[k];
  bool is_max = OP == OP_ReduceMax;
  FOR_EACH_INDEX(o, pc.n) {
    uint base = pc.off[0] + strided_offset(o, 0u, kept);
    float acc = is_max ? uintBitsToFloat(0xFF800000u) : 0.0;
    for (uint r = 0u; r < count; ++r) {
      float v = F[base + strided_offset(r, kept, red)];
      acc = is_max ? (v > acc ? v : acc) : acc + v;
    }
    F[pc.off[2] + o] = acc / pc.f[0];
  }
}
