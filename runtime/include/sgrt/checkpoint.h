// Checkpoints: everything a run needs to continue exactly, in one file,
// DIR/checkpoint.sgck, written atomically (file_io.h) and checksummed:
//   - every persistent tensor but the inputs, by name: parameters (or their
//     low-precision masters), optimizer state with its scales, the train state
//     (step, planned total, non-finite counters), the quantization states with
//     their amax histories;
//   - the run's identity and position (CheckpointMeta): seed, step, planned
//     total, batches per epoch and examples per step. The trainer's shuffle is
//     a pure function of (seed, epoch), so these fix the data loader's
//     position too, on any number of ranks;
//   - the weights file the run started from (sgrt train --init-weights), by
//     absolute path and header identity, so the tools that need that file
//     again (a GGUF's tokenizer and metadata) find it;
//   - the model's identity: names, dtypes and shapes of the saved tensors,
//     and the whole compiled training step (ops, attributes, types, scales,
//     recipe), so a model with another activation, loss or hyperparameter
//     does not take it.
// Format version 5 (magic "SGCKPT05"; versions 4, without the init file, and
// 3, without examples per step either, still load); docs/optimizer.md has the
// layout.
#pragma once
#include <functional>
#include <string>

#include "sgrt/session.h"

namespace sgrt {

constexpr int kCheckpointFormat = 5;

// The tensors a checkpoint holds: every persistent one but inputs and caches.
bool in_checkpoint(const TensorInfo& t);
// The tensors (by id) that load_checkpoint writes into a session of m, or
// fails: Session::init's `supplied` when a checkpoint is loaded next. With
// `trained` (the compilation the checkpoint was saved from, when m is another:
// an inference-only one), a scale state of m's own that trained lacks is not
// among them: the load leaves it at its initial value.
std::vector<bool> checkpoint_tensors(const Model& m);
std::vector<bool> checkpoint_tensors(const Model& m, const Model& trained);
// Identity of a model's persistent state: names, dtypes and shapes.
uint64_t model_identity(const Model& m);
// Identity of its train_step program (0 when it has none): every op, its
// attributes and its operands' dtypes, shapes, roles and scale plans.
uint64_t step_identity(const Model& m);

struct CheckpointMeta {
  int64_t step = 0;               // steps done
  int64_t total_steps = 0;        // the run's planned total (the lr schedule's horizon)
  uint64_t seed = 0;              // initialization and per-epoch shuffling
  int64_t batches_per_epoch = 0;  // data position: epoch step / this, batch step % this
  int64_t examples_per_step = 0;  // ranks x batch x accumulate; 0: not recorded (format 3, the C API)
  std::string init_file;          // absolute path of the --init-weights file; empty: none (or format 3, 4)
  uint64_t init_identity = 0;     // its weights_file_identity (sgrt/gguf_weights.h) when the run started
};

Status save_checkpoint(const Session& s, const std::string& dir, const CheckpointMeta& meta);
// The same, each tensor's bytes from `read` (ZeRO-1: rank 0 saves the moments
// gathered from the ranks that keep them).
using TensorSource = std::function<Status(int tensor, void* dst, size_t bytes)>;
Status save_checkpoint(const Model& m, const TensorSource& read, const std::string& dir, const CheckpointMeta& meta);
// Validates the whole file (checksum, model identity, field ranges, every
// record) before writing any tensor into the session; a ZeRO-1 rank's session
// takes only the moments it keeps. step_id, when not 0, is the training step
// the checkpoint must come from instead of the session's own: the same script
// compiled with the batch the checkpoint was trained with, when the session's
// model has another batch per rank (a resume on another number of ranks,
// docs/distributed.md).
Status load_checkpoint(Session& s, const std::string& dir, CheckpointMeta* meta, uint64_t step_id = 0);
// The checkpoint of `trained` (checked against it, as above) into a session
// of another compilation of the same script that keeps part of its state
// under the same names, dtypes and shapes: an inference-only one (parameters
// and forward quantization state; no gradients or optimizer state), or one
// with another batch, block or KV cache. What the session keeps and the
// checkpoint lacks is an error naming it.
Status load_checkpoint(Session& s, const std::string& dir, const Model& trained, CheckpointMeta* meta);
// The header alone (no session, no tensor read): for a tool that needs the
// run's init file before it builds anything. load_checkpoint still checks the
// whole file.
Status read_checkpoint_meta(const std::string& dir, CheckpointMeta* meta);

// Moves a run between two compilations of one model (a recipe switch:
// sgrt train --final-recipe): every tensor a checkpoint holds is copied by
// name from `from` into `to` (parameters or their masters, optimizer state,
// the train state with its step, running statistics), except the quantization
// states, which belong to a recipe: those of `to` stay as s.init left them, as
// at a run's first step. Every tensor is checked before any is written; one
// that `from` lacks or holds with another dtype or shape is an error naming it.
Status take_run_state(const Session& from, Session& to);

// Step-only forms for tools that need no run position (eval, export, run).
Status save_checkpoint(const Session& s, const std::string& dir, int64_t step);
Status load_checkpoint(Session& s, const std::string& dir, int64_t* step);

}  // namespace sgrt
