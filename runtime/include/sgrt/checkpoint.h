// Checkpoints: every persistent tensor but the inputs (parameters, optimizer
// state, train state), by name, with the model's identity and the step.
// One file, DIR/checkpoint.sgck, written atomically, checksummed.
#pragma once
#include <string>

#include "sgrt/session.h"

namespace sgrt {

// Identity of a model's persistent state: names, dtypes and shapes.
uint64_t model_identity(const Model& m);

Status save_checkpoint(const Session& s, const std::string& dir, int64_t step);
// Validates the whole file before writing any tensor into the session.
Status load_checkpoint(Session& s, const std::string& dir, int64_t* step);

}  // namespace sgrt
