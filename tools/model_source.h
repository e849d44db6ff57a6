// Loads a model for a command: a .sg file as is, a .lua script compiled in
// memory (with --recipe and --set applied), or the model.sg a checkpoint
// folder carries. infer_only: a script compiles to its eval and infer programs
// alone (frozen weights: no gradients, no optimizer state in the arena).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "sgrt/model.h"

namespace sgrt::tool {

bool is_script(const std::string& path);
Status compile_script(const Args& args, const std::string& path, std::vector<uint8_t>* bytes, bool infer_only = false);
Status load_model(const Args& args, const std::string& path, std::shared_ptr<const Model>* out, bool infer_only = false);

// What `sgrt train --checkpoint DIR` saves next to its checkpoint so that the
// folder is enough on its own: model.sg (the compiled model) and model.flags
// (the compile flags given: --recipe, --opt-level, --no-plan, --set).
std::vector<std::pair<std::string, std::string>> checkpoint_model_files(const Args& a, const Model& m);

// The model of a command that takes [MODEL] with --checkpoint DIR: without
// MODEL, DIR/model.sg; with a script, the flags DIR/model.flags records are
// applied unless given. A flag that differs from the recorded one is an
// error naming both values. `what` names the command's operand in errors.
// saved_step: a script may give each key of free_keys (--set) a value other
// than the checkpoint's when the weights fit either way: sgrt train --resume
// another batch (each rank's, for another number of ranks); sgrt export a
// model for generation (batch 1, another block, a KV cache). *saved_step then
// gets the step_identity of the script compiled with the checkpoint's values
// of those keys, which the checkpoint must match, else 0.
Status load_checkpoint_model(Args* a, const std::string& what, std::shared_ptr<const Model>* out,
                             uint64_t* saved_step = nullptr, const std::vector<std::string>& free_keys = {"batch"});

// The same for a command that runs no training step from the checkpoint
// (run, export --infer-only or --merge), free_keys free: *out is the script
// compiled inference-only (no gradients, no optimizer state in its arena) and
// *trained the script as the checkpoint was trained, which it is loaded
// through (load_checkpoint(s, dir, *trained, ...), sgrt/checkpoint.h). A
// compiled model, or no checkpoint flags: both are the model as given.
Status load_inference_model(Args* a, const std::string& what, const std::vector<std::string>& free_keys,
                            std::shared_ptr<const Model>* out, std::shared_ptr<const Model>* trained);

// Session::init's `supplied` for a command that loads --checkpoint DIR next:
// every tensor the checkpoint restores (none without the flag); `trained`: the
// compilation it was saved from, when m is another (load_inference_model's).
std::vector<bool> checkpoint_supplied(const Args& a, const Model& m, const Model* trained = nullptr);

}  // namespace sgrt::tool
