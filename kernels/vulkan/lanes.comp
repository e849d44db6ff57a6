// Softmax, log-softmax, their gradients and reduce_max's gradient. x is seen as
// [outer, len, inner] around the axis; one invocation walks one (outer, inner)
// lane in order, as kernels/cpu/reduce.cpp does.
// off = {x, in1, y, in2}; n = lanes; p = {len, inner}.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

float fmax_(float a, float b) { return isnan(a) ? b : isnan(b) ? a : max(a, b); }

void main() {
  uint len = pc.p[0], inner = pc.p[1];
  FOR_EACH_INDEX(l, pc.n) {
    uint base = (l / inner) * len * inner + l % inner;
    uint x = pc.off[0] + base, a = pc.off[1] + base, y = pc.off[2] + base;
    if (OP == OP_Softmax || OP == OP_LogSoftmax) {
      float m = uintBitsToFloat(0xFF800000u);
      for (uint k = 0u; k < len; ++k) m = fmax_(m, F[x + k * inner]);
      float sum = 0.0;
      for (uint k = 0u; k < len; ++k) sum += exp(F[x + k * inner] - m);
      float lse = m + log(sum);
      for (uint k = 0u; k < len; ++k) {
        float v = F[x + k * inner] - lse;
        F[y + k * inner] = OP == OP_LogSoftmax ? v : exp(v);
      }
    } else if (OP == OP_SoftmaxGrad || OP == OP_LogSoftmaxGrad) {
      // softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). x = y, a = dy.
      bool lg = OP == OP_LogSoftmaxGrad;
      float dot = 0.0;
      for (uint k = 0u; k < len; ++k) dot += lg ? F[a + k * inner] : F[a + k * inner] * F[x + k * inner];
      for (uint k = 0u; k < len; ++k) {
        float yk = F[x + k * inner], dyk = F[a + k * inner];
        F[y + k * inner] = lg ? dyk - exp(yk) * dot : yk * (dyk - dot);
      }
    } else {  // OP_ReduceMaxGrad: (x, max, dy), per lane
      float mx = F[pc.off[1] + l], dy = F[pc.off[3] + l];
      for (uint k = 0u; k < len; ++k) F[y + k * inner] = F[x + k * inner] == mx ? dy : 0.0;
    }
  }
}
