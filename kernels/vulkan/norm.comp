// Layer norm and RMS norm over the last axis, and their gradients
// (kernels/cpu/norm.cpp): x is [rows, d]. Rows: one workgroup per row, each
// invocation summing columns lid, lid + 128, ... in order, then a fixed tree over
// shared memory, so every run adds in the same order. Columns (the gradients'
// dgain, dbias): one invocation per column walking the rows in order, as the CPU.
// Specialization: OP | phase << 8 (phase 0: rows, 1: columns).
// forward:  off = {x, gain, bias, y, mean, rstd}
// backward: off = {x, gain, mean, rstd, dy, dx}, p[0] = dgain, p[1] = dbias
// n = rows, p[2] = d, f[0] = eps.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 128) in;

const uint kOp = OP & 0xFFu;
const bool kColumns = (OP >> 8) == 1u;
const bool kLayer = kOp == OP_LayerNorm || kOp == OP_LayerNormGrad;
const bool kForward = kOp == OP_LayerNorm || kOp == OP_RmsNorm;

shared float red[2][128];

// The workgroup's sums of a and b (each invocation's partials), by a fixed tree.
vec2 workgroup_sum(float a, float b) {
  uint l = gl_LocalInvocationID.x;
  red[0][l] = a;
  red[1][l] = b;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (l < s) {
      red[0][l] += red[0][l + s];
      red[1][l] += red[1][l + s];
    }
    barrier();
  }
  vec2 r = vec2(red[0][0], red[1][0]);
  barrier();  // red is reused by the next call
  return r;
}

void forward_row(uint r, uint d) {
  uint x = pc.off[0] + r * d, y = pc.off[3] + r * d;
  float m = 0.0;
  if (kLayer) {
    float s = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < d; c += 128u) s += F[x + c];
    m = workgroup_sum(s, 0.0).x / float(d);
  }
  float v = 0.0;
  for (uint c = gl_LocalInvocationID.x; c < d; c += 128u) v += (F[x + c] - m) * (F[x + c] - m);
  float rs = 1.0 / sqrt(workgroup_sum(v, 0.0).x / float(d) + pc.f[0]);
  for (uint c = gl_LocalInvocationID.x; c < d; c += 128u)
    F[y + c] = (F[x + c] - m) * rs * F[pc.off[1] + c] + (kLayer ? F[pc.off[2] + c] : 0.0);
  if (gl_LocalInvocationID.x == 0u) {
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
  uint dy = pc.off[4] + r * d, dx = pc.off[5] + r * d;
  float sum = 0.0, dot = 0.0;
  for (uint c = gl_LocalInvocationID.x; c < d; c += 128u) {
    float dh = F[dy + c] * F[pc.off[1] + c];
    sum += dh;
    dot += dh * xhat(r, c, d);
  }
  vec2 s = workgroup_sum(sum, dot);
  float inv_d = 1.0 / float(d);
  float mean_dh = kLayer ? s.x * inv_d : 0.0, mean_dot = s.y * inv_d;
  float rs = F[pc.off[3] + r];
  for (uint c = gl_LocalInvocationID.x; c < d; c += 128u)
    F[dx + c] = rs * (F[dy + c] * F[pc.off[1] + c] - mean_dh - xhat(r, c, d) * mean_dot);
}

// dgain[c] = sum_rows dy * xhat, dbias[c] = sum_rows dy. Eight rows' terms
// load before they are added, in row order: a column waits on memory once per
// eight rows, not once per row.
const uint kBatch = 8u;
void backward_column(uint c, uint d) {
  float g = 0.0, b = 0.0;
  uint r = 0u;
  for (; r + kBatch <= pc.n; r += kBatch) {
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
  for (; r < pc.n; ++r) {
    float dy = F[pc.off[4] + r * d + c];
    g += dy * xhat(r, c, d);
    b += dy;
  }
  F[pc.p[0] + c] = g;
  if (kLayer) F[pc.p[1] + c] = b;
}

void main() {
  uint d = pc.p[2];
  if (kColumns) {
    FOR_EACH_INDEX(c, d) backward_column(c, d);
    return;
  }
  for (uint r = gl_WorkGroupID.x; r < pc.n; r += gl_NumWorkGroups.x) {
    if (kForward) forward_row(r, d);
    else backward_row(r, d);
  }
}
