// Batch normalization's running statistics (kernels/cpu/running_stat.cpp):
// off = {stat, running (read and written in place), used}; n channels;
// p[0] = 0: evaluation (used = running), 1: training, 2: training with the
// update running = (1 - f[0]) running + f[0] (f[1] stat).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
  FOR_EACH_INDEX(c, pc.n) {
    float s = F[pc.off[0] + c], r = F[pc.off[1] + c];
    F[pc.off[2] + c] = pc.p[0] == 0u ? r : s;
    if (pc.p[0] == 2u) F[pc.off[1] + c] = (1.0 - pc.f[0]) * r + pc.f[0] * (pc.f[1] * s);
  }
}
