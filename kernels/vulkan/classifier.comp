// Softmax cross-entropy (mean over rows), its gradient, and accuracy
// (kernels/cpu/classifier.cpp). logits [N, C] f32, labels [N] i32.
// off = {logits, labels, y, dloss}; p = {N, C, first scratch word}. The loss and
// accuracy run in two dispatches: OP | 1 << 8, one invocation per row, writes
// each row's term to its scratch word (0 for a bad label); then one workgroup
// sums the terms, invocation t rows t, t + 256, ... in order, in a fixed tree
// (deterministic), and clears the words. The gradient runs one invocation per
// row. A label outside [0, C) is reported.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

shared float partial[256];

float fmax_(float a, float b) { return isnan(a) ? b : isnan(b) ? a : max(a, b); }

float row_lse(uint z, uint c) {
  float m = F[z];
  for (uint j = 1u; j < c; ++j) m = fmax_(m, F[z + j]);
  float s = 0.0;
  for (uint j = 0u; j < c; ++j) s += exp(F[z + j] - m);
  return m + log(s);
}

// The label of row r, or -1 (reported) when out of range.
int label(uint r, uint c) {
  int lab = I[pc.off[1] + r];
  if (lab < 0 || uint(lab) >= c) { report_error(); return -1; }
  return lab;
}

const uint kOp = OP & 0xFFu;
const bool kRows = (OP >> 8) == 1u;

// Row r's term of the loss (its cross-entropy) or of accuracy (1 when the
// first index of its maximum is the label); 0 for a bad label.
float row_term(uint r, uint c) {
  uint z = pc.off[0] + r * c;
  int lab = label(r, c);
  if (lab < 0) return 0.0;
  if (kOp == OP_SoftmaxXent) return row_lse(z, c) - F[z + uint(lab)];
  uint best = 0u;
  for (uint j = 1u; j < c; ++j) if (F[z + j] > F[z + best]) best = j;
  return best == uint(lab) ? 1.0 : 0.0;
}

void main() {
  uint n = pc.p[0], c = pc.p[1], words = pc.p[2];
  if (kOp == OP_SoftmaxXentGrad) {
    float g = F[pc.off[3]] / float(n);
    FOR_EACH_INDEX(r, n) {
      uint z = pc.off[0] + r * c, y = pc.off[2] + r * c;
      int lab = label(r, c);
      float lse = row_lse(z, c);
      for (uint j = 0u; j < c; ++j) F[y + j] = g * (exp(F[z + j] - lse) - (int(j) == lab ? 1.0 : 0.0));
    }
    return;
  }
  if (kRows) {
    FOR_EACH_INDEX(r, n) scratch[words + r] = floatBitsToUint(row_term(r, c));
    return;
  }
  uint t = gl_LocalInvocationID.x;
  float acc = 0.0;
  for (uint r = t; r < n; r += 256u) {
    acc += uintBitsToFloat(scratch[words + r]);
    scratch[words + r] = 0u;
  }
  partial[t] = acc;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  if (t == 0u) F[pc.off[2]] = partial[0] / float(n);
}
