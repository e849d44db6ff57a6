// Conventions of the low-precision ops, shared by the compiler, the runtime's
// shape rules and every backend's kernels.
#pragma once
#include <cstdint>

#include "sgrt/scale_spec.h"
#include "sgrt/shape.h"

namespace sgrt {

// train_state i32[kTrainStateLen]: what the optimizer ops read and write.
enum TrainStateSlot : int { kStep = 0, kTotalSteps, kSkipStep, kNonfiniteRun, kNonfiniteTotal, kTrainStateLen };

// An optimizer update's scale tensor f32[kOptScaleLen], one per parameter: the
// power-of-two multipliers of its low-precision state and gradient (stored
// q = x * s, so x = q / s; 1 for f32). The update writes the state's scales for
// the next step from the amax of the values it just computed; quantize_grad
// writes the gradient's from its current amax, with the gradient's L2 norm for
// clipping (docs/optimizer.md).
enum OptScaleSlot : int { kOptScaleM = 0, kOptScaleV, kOptScaleW, kOptScaleG, kOptGradNorm, kOptScaleLen };

// The state tensor f32[kStateHeader + history]: counters are cumulative and only
// training programs (update = 1) change them; NVFP4's tensor scale is the one of the
// codes last written, stored by every program.
enum QuantStateSlot : int {
  kStateSaturated = 0,    // elements clamped to the format's max
  kStateKept = 1,         // scale groups whose amax was 0/inf/NaN (previous scale kept)
  kStateHistoryPos = 2,   // delayed scaling: next slot of the amax history
  kStateTensorScale = 3,  // NVFP4's second-level FP32 scale (0 at start: none yet)
  kStateUnderflow = 4,    // non-zero elements that became zero
  kStateHeader = 5,
};

// Shape and dtype of quantize's scale output for x of shape `x`.
TensorType quant_scale_type(QuantGranularity g, const Shape& x);

}  // namespace sgrt
