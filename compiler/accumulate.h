// Gradient accumulation (sg.train{accumulate = k}, docs/lora.md): one
// optimizer step from the mean gradient of k micro-batches.
#pragma once
#include "autodiff.h"

namespace sgrt::compiler {

// For k > 1: returns grad_step (forward, backward, then each parameter's
// gradient added into a persistent f32 accumulator `P.grad_acc`) and rewrites
// `bw` so that train_step's gradients are (accumulator + own) / k, with the
// accumulators zeroed again before the update. The runtime runs grad_step k - 1
// times, then train_step: the learning-rate schedule and the step count see
// optimizer steps only.
Status accumulate_gradients(Graph& g, const std::vector<Op>& forward, Backward& bw, int64_t k, Program* grad_step);

}  // namespace sgrt::compiler
