// clamp_outliers (cpu/fp4_ops.cpp): per row, x clamped to its order statistics
// lo = x_(lo_k) and hi = x_(hi_k) (std::nth_element's picks), and the residual
// x - clamp(x). One workgroup per row: a bitonic sort of the row's keys in
// shared memory (exact selection), so rows hold at most kMaxCols elements.
// off = {x, -, clamped, residual}; p = {rows, cols, sort size (a power of two
// >= cols)}; dim = {lo_k, hi_k}.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

const uint kMaxCols = 4096u;  // 16 KiB: the shared memory every device has
shared uint keys[kMaxCols];

// Keys whose unsigned order is the floats' order (-0 just below +0).
uint key_of(float v) {
  uint u = floatBitsToUint(v);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}
float value_of(uint k) { return uintBitsToFloat((k & 0x80000000u) != 0u ? k & 0x7FFFFFFFu : ~k); }

void main() {
  uint rows = pc.p[0], cols = pc.p[1], size = pc.p[2], t = gl_LocalInvocationID.x;
  for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
    uint x = pc.off[0] + r * cols;
    for (uint i = t; i < size; i += 256u) keys[i] = i < cols ? key_of(F[x + i]) : 0xFFFFFFFFu;
    barrier();
    for (uint k = 2u; k <= size; k <<= 1)
      for (uint j = k >> 1; j > 0u; j >>= 1) {
        for (uint i = t; i < size; i += 256u) {
          uint l = i ^ j;
          if (l < i) continue;
          uint a = keys[i], b = keys[l];
          if ((i & k) == 0u ? a > b : a < b) { keys[i] = b; keys[l] = a; }
        }
        barrier();
      }
    float lo = value_of(keys[pc.dim[0]]), hi = value_of(keys[pc.dim[1]]);
    for (uint i = t; i < cols; i += 256u) {
      float v = F[x + i], c = v < lo ? lo : v;  // std::min(std::max(v, lo), hi)
      c = hi < c ? hi : c;
      F[pc.off[2] + r * cols + i] = c;
      F[pc.off[3] + r * cols + i] = v - c;
    }
    barrier();  // the next row reuses keys
  }
}
