// Optimizer ops (kernels/cpu/optimizer.cpp): lr schedule, SGD with momentum,
// AdamW, step counter. The train state's slots are those of sgrt/quant.h; an
// update is skipped when check_finite flagged the step.
// lr_schedule:    off = {train_state, -, lr}; f = {lr, min_lr_ratio}; p = {warmup, schedule}
// step_increment: off = {-, -, train_state}
// sgd_update:     off = {param, grad, momentum, lr, train_state, grad_coef}; n; f = {momentum, weight_decay}
// adamw_update:   off = {param, grad, m, v, lr, train_state}, p[0] = grad_coef; n; f = {beta1, beta2, eps, weight_decay}
// Parameters and state are f32 here (their scales stay untouched); grad_coef
// is check_finite's clipping factor.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

const uint kStep = 0u, kTotalSteps = 1u, kSkipStep = 2u;
const float kPi = 3.14159265358979323846;

// b^t by repeated squaring: exact for t = 1 and a few ulps otherwise, where
// pow()'s exp2(t log2 b) may be off by far more for b near 1.
float powi(float b, uint t) {
  float r = 1.0;
  for (; t != 0u; t >>= 1, b *= b) if ((t & 1u) != 0u) r *= b;
  return r;
}

void main() {
  if (OP == OP_LrSchedule) {
    if (gl_GlobalInvocationID.x != 0u) return;
    int step = I[pc.off[0] + kStep], total = I[pc.off[0] + kTotalSteps];
    int warmup = int(pc.p[0]);
    float lr = pc.f[0];
    if (warmup > 0 && step < warmup) lr = lr * float(step + 1) / float(warmup);
    else if (pc.p[1] != 0u) {
      float span = float(max(1, total - warmup));
      float progress = min(1.0, float(step - warmup) / span);
      lr = lr * (pc.f[1] + (1.0 - pc.f[1]) * 0.5 * (1.0 + cos(kPi * progress)));
    }
    F[pc.off[2]] = lr;
    return;
  }
  if (OP == OP_StepIncrement) {
    if (gl_GlobalInvocationID.x == 0u) I[pc.off[2] + kStep] += 1;
    return;
  }
  uint ts = pc.off[OP == OP_SgdUpdate ? 4 : 5];
  if (I[ts + kSkipStep] != 0) return;
  uint p = pc.off[0], g = pc.off[1];
  float coef = F[OP == OP_SgdUpdate ? pc.off[5] : pc.p[0]];
  if (OP == OP_SgdUpdate) {
    float lr = F[pc.off[3]], mu = pc.f[0], wd = pc.f[1];
    uint mom = pc.off[2];
    FOR_EACH_INDEX(i, pc.n) {
      float gi = F[g + i] * coef + wd * F[p + i];
      F[mom + i] = mu * F[mom + i] + gi;
      F[p + i] -= lr * F[mom + i];
    }
  } else {  // OP_AdamwUpdate, PyTorch's order
    uint m = pc.off[2], v = pc.off[3];
    float lr = F[pc.off[4]];
    uint t = uint(I[ts + kStep]) + 1u;
    float b1 = pc.f[0], b2 = pc.f[1], eps = pc.f[2], wd = pc.f[3];
    float bc1 = 1.0 - powi(b1, t), bc2 = 1.0 - powi(b2, t);
    float step = lr / bc1, bc2_sqrt = sqrt(bc2), decay = 1.0 - lr * wd;
    FOR_EACH_INDEX(i, pc.n) {
      float pi = F[p + i] * decay;
      float gi = F[g + i] * coef;
      float mi = b1 * F[m + i] + (1.0 - b1) * gi;
      float vi = b2 * F[v + i] + (1.0 - b2) * gi * gi;
      F[m + i] = mi;
      F[v + i] = vi;
      F[p + i] = pi - step * mi / (sqrt(vi) / bc2_sqrt + eps);
    }
  }
}
