// Layer norm and RMS norm over the last axis, and their gradients
// (kernels/cpu/norm.cpp): x is [rows, d]. Rows: ROW_THREADS invocations per row
// (32, or 128 past d = 1024; 128 / ROW_THREADS rows a workgroup), each summing
// columns lane, lane + ROW_THREADS, ... in order; then every invocation of the
// row adds the row's partials in lane order: one barrier a sum, the same bits
// every run. Columns (the gradients' dgain, dbias) in two passes, so that a few
// hundred columns over thousands of rows keep a GPU busy: each column's rows in
// chunks of kChunk, in order (an invocation a column and chunk), into scratch;
// then each column's chunk sums in chunk order (the CPU's order too:
// sgrt/column_sums.h).
// Specialization: OP | phase << 8 (0: rows, 1: column chunks, 2: columns);
// constant_id 1 = ROW_THREADS.
// forward:  off = {x, gain, bias, y, mean, rstd}
// backward: off = {x, gain, mean, rstd, dy, dx}, p[0] = dgain, p[1] = dbias,
// dim[0] = the chunk sums' first scratch word (dgain's plane, then dbias's)
// n = rows, p[2] = d, f[0] = eps.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 128) in;
layout(constant_id = 1) const uint ROW_THREADS = 128u;
const uint ROWS = 128u / ROW_THREADS;  // rows a workgroup works on at once

const uint kOp = OP & 0xFFu;
const uint kPhase = OP >> 8;
const bool kLayer = kOp == OP_LayerNorm || kOp == OP_LayerNormGrad;
const bool kForward = kOp == OP_LayerNorm || kOp == OP_RmsNorm;

shared vec2 red[128];
uint lane = gl_LocalInvocationID.x % ROW_THREADS;

// The sums of a and b over the invocations of this row (each one's partials),
// in lane order, in every invocation of the row.
vec2 row_sum(float a, float b) {
  uint first = gl_LocalInvocationID.x - lane;
  red[gl_LocalInvocationID.x] = vec2(a, b);
  barrier();
  vec2 s = vec2(0.0);
  for (uint t = 0u; t < ROW_THREADS; ++t) s += red[first + t];
  barrier();  // red is reused by the next call
  return s;
}

// Row r (r >= rows: an invocation that only takes part in the barriers).
void forward_row(uint r, uint d) {
  bool live = r < pc.n;
  uint x = pc.off[0] + r * d, y = pc.off[3] + r * d;
  float m = 0.0;
  if (kLayer) {
    float s = 0.0;
    if (live) for (uint c = lane; c < d; c += ROW_THREADS) s += F[x + c];
    m = row_sum(s, 0.0).x / float(d);
  }
  float v = 0.0;
  if (live) for (uint c = lane; c < d; c += ROW_THREADS) v += (F[x + c] - m) * (F[x + c] - m);
  float rs = 1.0 / sqrt(row_sum(v, 0.0).x / float(d) + pc.f[0]);
  if (!live) return;
  for (uint c = lane; c < d; c += ROW_THREADS)
    F[y + c] = (F[x + c] - m) * rs * F[pc.off[1] + c] + (kLayer ? F[pc.off[2] + c] : 0.0);
  if (lane == 0u) {
    if (kLayer) F[pc.off[4] + r] = m;
    F[pc.off[5] + r] = rs;
  }
}

float xhat(uint r, uint c, uint d) {
  return (F[pc.off[0] + r * d + c] - (kLayer ? F[pc.off[2] + r] : 0.0)) * F[pc.off[3] + r];
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy * gain
// (RMS norm drops the mean(dxhat) term).
void backward_row(uint r, uint d) {
  bool live = r < pc.n;
  uint dy = pc.off[4] + r * d, dx = pc.off[5] + r * d;
  float sum = 0.0, dot = 0.0;
  if (live) {
    for (uint c = lane; c < d; c += ROW_THREADS) {
      float dh = F[dy + c] * F[pc.off[1] + c];
      sum += dh;
      dot += dh * xhat(r, c, d);
    }
  }
  vec2 s = row_sum(sum, dot);
  if (!live) return;
  float inv_d = 1.0 / float(d);
  float mean_dh = kLayer ? s.x * inv_d : 0.0, mean_dot = s.y * inv_d;
  float rs = F[pc.off[3] + r];
  for (uint c = lane; c < d; c += ROW_THREADS)
    F[dx + c] = rs * (F[dy + c] * F[pc.off[1] + c] - mean_dh - xhat(r, c, d) * mean_dot);
}

// Column c's chunk ch: dgain's and dbias's terms dy * xhat and dy over its
// rows, eight rows' loads before they are added, in row order: a column waits
// on memory once per eight rows, not once per row.
const uint kBatch = 8u;
const uint kChunk = 64u;  // sgrt/column_sums.h
void column_chunk(uint c, uint ch, uint chunks, uint d) {
  float g = 0.0, b = 0.0;
  uint r = ch * kChunk, end = min(pc.n, r + kChunk);
  for (; r + kBatch <= end; r += kBatch) {
    float dy[kBatch], h[kBatch];
    [[unroll]] for (uint u = 0u; u < kBatch; ++u) {
      dy[u] = F[pc.off[4] + (r + u) * d + c];
      h[u] = xhat(r + u, c, d);
    }
    [[unroll]] for (uint u = 0u; u < kBatch; ++u) {
      g += dy[u] * h[u];
      b += dy[u];
    }
  }
  for (; r < end; ++r) {
    float dy = F[pc.off[4] + r * d + c];
    g += dy * xhat(r, c, d);
    b += dy;
  }
  scratch[pc.dim[0] + ch * d + c] = floatBitsToUint(g);
  scratch[pc.dim[0] + (chunks + ch) * d + c] = floatBitsToUint(b);
}

// dgain[c], dbias[c]: column c's chunk sums in chunk order.
void column(uint c, uint chunks, uint d) {
  float g = 0.0, b = 0.0;
  for (uint ch = 0u; ch < chunks; ++ch) {
    g += uintBitsToFloat(scratch[pc.dim[0] + ch * d + c]);
    b += uintBitsToFloat(scratch[pc.dim[0] + (chunks + ch) * d + c]);
  }
  F[pc.p[0] + c] = g;
  if (kLayer) F[pc.p[1] + c] = b;
}

void main() {
  uint d = pc.p[2];
  uint chunks = (pc.n + kChunk - 1u) / kChunk;
  if (kPhase == 1u) {
    FOR_EACH_INDEX(i, d * chunks) column_chunk(i % d, i / d, chunks, d);
    return;
  }
  if (kPhase == 2u) {
    FOR_EACH_INDEX(c, d) column(c, chunks, d);
    return;
  }
  // Every invocation runs the same passes (the barriers), live row or not.
  for (uint r0 = gl_WorkGroupID.x * ROWS; r0 < pc.n; r0 += gl_NumWorkGroups.x * ROWS) {
    uint r = r0 + gl_LocalInvocationID.x / ROW_THREADS;
    if (kForward) forward_row(r, d);
    else backward_row(r, d);
  }
}
