// check_finite (kernels/cpu/optimizer.cpp): flags the step when any gradient
// holds a NaN or inf, in three phases, one dispatch each (OP is the phase):
//   0: clear the flag; 1: scan one gradient (off = {grad, -, -, -, ts}, n);
//   2: update the run and total counters from the flag. off[4] = train_state.
// Finiteness is tested on the bits, so no float mode can hide a NaN.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

const uint kSkipStep = 2u, kNonfiniteRun = 3u, kNonfiniteTotal = 4u;

void main() {
  uint ts = pc.off[4];
  if (OP == 1u) {
    FOR_EACH_INDEX(i, pc.n)
      if ((U[pc.off[0] + i] & 0x7F800000u) == 0x7F800000u) I[ts + kSkipStep] = 1;
    return;
  }
  if (gl_GlobalInvocationID.x != 0u) return;
  if (OP == 0u) {
    I[ts + kSkipStep] = 0;
  } else {
    int skip = I[ts + kSkipStep];
    I[ts + kNonfiniteRun] = skip != 0 ? I[ts + kNonfiniteRun] + 1 : 0;
    I[ts + kNonfiniteTotal] += skip;
  }
}
