// Elementwise ops, their gradients, and fill (kernels/cpu/elementwise.cpp).
// off = {x, z, y}; n elements; f[0] = alpha (scale) or value (fill).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

const float kGeluC = 0.7978845608028654;  // sqrt(2/pi)

float gelu_u(float x) { return kGeluC * (x + 0.044715 * x * x * x); }
// Some drivers compute tanh as a ratio of exponentials that overflows to NaN for
// large |x|; tanh(15) already rounds to 1 in float.
float tanh_(float x) { return tanh(clamp(x, -15.0, 15.0)); }

float apply(float x, float z) {
  switch (OP) {
    case OP_Add: return x + z;
    case OP_Sub: return x - z;
    case OP_Mul: return x * z;
    case OP_Div: return x / z;
    case OP_Neg: return -x;
    case OP_Scale: return x * pc.f[0];
    case OP_Relu: return x > 0.0 ? x : 0.0;
    case OP_Gelu: return 0.5 * x * (1.0 + tanh_(gelu_u(x)));
    case OP_Tanh: return tanh_(x);
    case OP_Sigmoid: return 1.0 / (1.0 + exp(-x));
    case OP_Exp: return exp(x);
    case OP_Log: return log(x);
    case OP_Sqrt: return sqrt(x);
    case OP_Silu: return x / (1.0 + exp(-x));
    case OP_ReluGrad: return x > 0.0 ? z : 0.0;
    case OP_GeluGrad: {
      float t = tanh_(gelu_u(x));
      return z * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * 0.044715 * x * x));
    }
    case OP_TanhGrad: return z * (1.0 - x * x);
    case OP_SigmoidGrad: return z * x * (1.0 - x);
    case OP_SiluGrad: {
      float s = 1.0 / (1.0 + exp(-x));
      return z * s * (1.0 + x * (1.0 - s));
    }
    case OP_Fill: return pc.f[0];
  }
  return 0.0;
}

void main() {
  bool binary = OP == OP_Add || OP == OP_Sub || OP == OP_Mul || OP == OP_Div || OP == OP_ReluGrad ||
                OP == OP_GeluGrad || OP == OP_TanhGrad || OP == OP_SigmoidGrad || OP == OP_SiluGrad;
  FOR_EACH_INDEX(i, pc.n) {
    float x = OP == OP_Fill ? 0.0 : F[pc.off[0] + i];
    float z = binary ? F[pc.off[1] + i] : 0.0;
    F[pc.off[2] + i] = apply(x, z);
  }
}
