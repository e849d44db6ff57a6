// reshape, transpose, broadcast_to: y[i] = x[offset of i], copying 32-bit words
// (so f32 and i32 alike). off = {x, -, y}; n = numel(y); p[0] = number of axes.
#version 450
#include "common.glsl"
#include "strided.glsl"
layout(local_size_x = 256) in;

void main() {
  FOR_EACH_INDEX(i, pc.n) U[pc.off[2] + i] = U[pc.off[0] + strided_offset(i, 0u, pc.p[0])];
}
