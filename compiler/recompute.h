// Activation recomputation (sg.checkpoint, docs/lora.md): a checkpointed
// segment of the forward graph keeps only its inputs and outputs for the
// backward pass; the activations inside it are recomputed from them just
// before the segment's backward ops read them.
#pragma once
#include "graph.h"

namespace sgrt::compiler {

// Rewrites `train` (train_step or grad_step; its first `forward_ops` ops are the forward pass) for every
// range of g.checkpoints: clones the segment's ops that produce what backward
// reads (outputs renamed NAME.recomputed, Op::recomputes set) in front of the
// first backward op that reads one, and points backward at the clones.
Status recompute_checkpoints(Graph& g, size_t forward_ops, Program* train);

}  // namespace sgrt::compiler
