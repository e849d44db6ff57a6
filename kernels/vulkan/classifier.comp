// Softmax cross-entropy (mean over rows), its gradient, and accuracy; the
// masked loss and its gradient (kernels/cpu/classifier.cpp). logits [N, C]
// f32, labels [N] i32, mask [N] f32. off = {logits, labels, y, dloss, mask};
// p = {N, C, first scratch word}. A row of mask 0 is never read (nor its
// label); its gradient row is 0. The masked loss divides by the mask's sum,
// which each workgroup takes in a fixed tree (N words: a batch's rows).
// Rows: ROW_THREADS invocations per row (constant_id 1: 1, 32 or 256 as C
// grows; 256 / ROW_THREADS rows a workgroup), each taking columns lane,
// lane + ROW_THREADS, ... in order; the row's maximum, exp sum or first argmax
// then comes from a fixed tree over its lanes (the same bits every run). A
// language model's head (C = 49152) thus spreads each row over a workgroup
// instead of one invocation walking it.
// The loss and accuracy run in two dispatches: OP | 1 << 8 writes each row's
// term to its scratch word (0 for a bad label); then one workgroup sums the
// terms, invocation t rows t, t + 256, ... in order, in a fixed tree, and
// clears the words. The gradient is one dispatch over the rows. A label
// outside [0, C) is reported.
#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint ROW_THREADS = 256u;
const uint ROWS = 256u / ROW_THREADS;  // rows a workgroup works on at once

const uint kOp = OP & 0xFFu;
const bool kRows = (OP >> 8) == 1u;
const bool kMasked = kOp == OP_MaskedXent || kOp == OP_MaskedXentGrad;
const bool kGrad = kOp == OP_SoftmaxXentGrad || kOp == OP_MaskedXentGrad;

shared float red[256];
shared uint red_index[256];
uint lane = gl_LocalInvocationID.x % ROW_THREADS;
uint first = gl_LocalInvocationID.x - lane;  // the row's lane 0

float fmax_(float a, float b) { return isnan(a) ? b : isnan(b) ? a : max(a, b); }

// The tree over the row's lanes: red[first] ends with the combined value (and
// red_index[first] with its column, for the argmax). Every invocation of the
// workgroup calls it (barriers); the caller reads red[first] before the next.
void row_tree(uint kind) {  // 0: sum, 1: max, 2: first argmax
  [[unroll]] for (uint s = ROW_THREADS / 2u; s > 0u; s >>= 1) {
    barrier();
    uint i = gl_LocalInvocationID.x;
    if (lane < s) {
      float a = red[i], b = red[i + s];
      if (kind == 0u) red[i] = a + b;
      else if (kind == 1u) red[i] = fmax_(a, b);
      else if (b > a || (b == a && red_index[i + s] < red_index[i])) {  // an empty lane holds -inf, index ~0u
        red[i] = b;
        red_index[i] = red_index[i + s];
      }
    }
  }
  barrier();
}

float row_max(uint z, uint c, bool live) {
  float m = -1.0 / 0.0;
  if (live) for (uint j = lane; j < c; j += ROW_THREADS) m = fmax_(m, F[z + j]);
  red[gl_LocalInvocationID.x] = m;
  row_tree(1u);
  float r = red[first];
  barrier();  // red is reused by the next tree
  return r;
}

// log(sum exp(z - max)) + max: the max ignores NaN, as before; a NaN still
// reaches the sum.
float row_lse(uint z, uint c, bool live) {
  float m = row_max(z, c, live);
  float s = 0.0;
  if (live) for (uint j = lane; j < c; j += ROW_THREADS) s += exp(F[z + j] - m);
  red[gl_LocalInvocationID.x] = s;
  row_tree(0u);
  float r = m + log(red[first]);
  barrier();
  return r;
}

// The first column of the row's maximum, as the CPU's scan `z[j] > z[best]`
// from best = 0: NaNs never win, except a NaN in column 0 (nothing beats it).
uint row_argmax(uint z, uint c, bool live) {
  float bv = -1.0 / 0.0;
  uint bi = ~0u;
  if (live)
    for (uint j = lane; j < c; j += ROW_THREADS)
      if (!isnan(F[z + j]) && (bi == ~0u || F[z + j] > bv)) { bv = F[z + j]; bi = j; }
  red[gl_LocalInvocationID.x] = bv;
  red_index[gl_LocalInvocationID.x] = bi;
  row_tree(2u);
  uint r = red_index[first];
  barrier();
  return live && (isnan(F[z]) || r == ~0u) ? 0u : r;
}

// The workgroup's sum of acc (every invocation's), in a fixed tree; every
// invocation gets it.
float workgroup_sum(float acc) {
  uint t = gl_LocalInvocationID.x;
  barrier();  // red may still be read
  red[t] = acc;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    barrier();
  }
  float r = red[0];
  barrier();
  return r;
}

// The sum of the mask's N weights: invocation t rows t, t + 256, ... in order.
float mask_sum(uint n) {
  float acc = 0.0;
  for (uint r = gl_LocalInvocationID.x; r < n; r += 256u) acc += F[pc.off[4] + r];
  return workgroup_sum(acc);
}

// The label of row r, or -1 (reported) when out of range; lane 0 reports.
int label(uint r, uint c) {
  int lab = I[pc.off[1] + r];
  if (lab < 0 || uint(lab) >= c) {
    if (lane == 0u) report_error();
    return -1;
  }
  return lab;
}

void main() {
  uint n = pc.p[0], c = pc.p[1], words = pc.p[2];
  if (kGrad || kRows) {
    float g = 0.0;
    if (kGrad) g = F[pc.off[3]] / (kMasked ? mask_sum(n) : float(n));
    // Blocks of ROWS rows, grid-stride; r0 is the same in the whole workgroup,
    // so every invocation meets every barrier.
    for (uint r0 = gl_WorkGroupID.x * ROWS; r0 < n; r0 += gl_NumWorkGroups.x * ROWS) {
      uint r = r0 + gl_LocalInvocationID.x / ROW_THREADS;
      bool row = r < n;
      float w = kMasked && row ? F[pc.off[4] + r] : 1.0;
      bool live = row && w != 0.0;  // a masked-out row is not read
      uint z = pc.off[0] + (live ? r : 0u) * c;
      int lab = live ? label(r, c) : -1;
      if (kOp == OP_Accuracy) {
        uint best = row_argmax(z, c, live);
        if (live && lane == 0u) scratch[words + r] = floatBitsToUint(lab >= 0 && best == uint(lab) ? 1.0 : 0.0);
        continue;
      }
      float lse = row_lse(z, c, live);
      if (!row) continue;
      if (!kGrad) {
        if (lane == 0u) scratch[words + r] = floatBitsToUint(live && lab >= 0 ? w * (lse - F[z + uint(lab)]) : 0.0);
        continue;
      }
      uint y = pc.off[2] + r * c;
      for (uint j = lane; j < c; j += ROW_THREADS)
        F[y + j] = live ? g * w * (exp(F[z + j] - lse) - (int(j) == lab ? 1.0 : 0.0)) : 0.0;
    }
    return;
  }
  float acc = 0.0;
  for (uint r = gl_LocalInvocationID.x; r < n; r += 256u) {
    acc += uintBitsToFloat(scratch[words + r]);
    scratch[words + r] = 0u;
  }
  float total = workgroup_sum(acc);
  float denominator = kMasked ? mask_sum(n) : float(n);
  if (gl_LocalInvocationID.x == 0u) F[pc.off[2]] = total / denominator;
}
