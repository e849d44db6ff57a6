// dge_grad (cpu/fp4_ops.cpp): dW[o, i] * f'(W[o, i] * 2^e[i]), the FP4 weight
// quantized per input channel. off = {dW, W, out, e}; n elements; p[0] = in (columns).
#version 450
#include "quant.glsl"
layout(local_size_x = 256) in;

void main() {
  FOR_EACH_INDEX(i, pc.n)
    F[pc.off[2] + i] = F[pc.off[0] + i] * dge_derivative(mul_pow2(F[pc.off[1] + i], I[pc.off[3] + i % pc.p[0]]));
}
