// Optimizer ops (kernels/cpu/optimizer.cpp): lr schedule, step counter, and a
// low-precision master's f32 working copy (the updates: update.comp). The train
// state's slots are those of sgrt/quant.h.
// lr_schedule:    off = {train_state, -, lr}; f = {lr, min_lr_ratio}; p = {warmup, schedule}
// step_increment: off = {-, -, train_state}
// dequantize:     off = {q, scales, out}; n; p = {q's dtype, slot}: out = decode(q) / scales[slot]
#version 450
#include "quant.glsl"
layout(local_size_x = 256) in;

const uint kStep = 0u, kTotalSteps = 1u;
const float kPi = 3.14159265358979323846;

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
  // OP_Dequantize
  float scale = F[pc.off[1] + pc.p[1]];
  FOR_EACH_INDEX(i, pc.n) F[pc.off[2] + i] = load_scaled(pc.p[0], pc.off[0], i, scale);
}
