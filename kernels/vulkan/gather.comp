// reshape, transpose, broadcast_to, slice: y[i] = x[offset of i], copying 32-bit
// words (so f32 and i32 alike). off = {x, -, y}; n = numel(y); p[0] = number of axes.
// pad (OP_Pad): the scatter y[offset of i] = x[i] over x's axes with y's strides,
// n = numel(x), after a dispatch that zeroed y; off[2] is y's window.
#version 450
#include "common.glsl"
#include "strided.glsl"
layout(local_size_x = 256) in;

void main() {
  if (OP == OP_Pad) {
    FOR_EACH_INDEX(i, pc.n) U[pc.off[2] + strided_offset(i, 0u, pc.p[0])] = U[pc.off[0] + i];
  } else {
    FOR_EACH_INDEX(i, pc.n) U[pc.off[2] + i] = U[pc.off[0] + strided_offset(i, 0u, pc.p[0])];
  }
}
