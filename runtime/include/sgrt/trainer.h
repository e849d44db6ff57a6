// The training loop: seeded shuffling, batching, train_step, periodic eval,
// JSON-lines log. Library code: progress goes to callbacks, not to stderr.
#pragma once
#include <csignal>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sgrt/communicator.h"
#include "sgrt/data_parallel.h"
#include "sgrt/dataset.h"
#include "sgrt/session.h"

namespace sgrt {

// One quantized tensor's counters over a report window, from its quantize's
// state (sgrt/quant.h). A large flushed share means the scale group spans a
// wider range than the format: its small elements become zero (docs/recipes.md).
struct QuantTensorCounts {
  std::string tensor;     // the quantized tensor (its codes), e.g. "h1.e2m1"
  int64_t elements = 0;   // elements the training steps of the window quantized
  int64_t saturated = 0;  // clamped to the format's max
  int64_t flushed = 0;    // non-zero elements that became zero
  double flushed_share() const { return elements > 0 ? static_cast<double>(flushed) / static_cast<double>(elements) : 0; }
};

// A flushed share above this in one report window is never healthy: more of
// the tensor is erased than kept. Healthy runs stay well below it (the GPT of
// models/ under fp4: weights up to 0.07, GELU outputs up to 0.31), so it warns
// without crying wolf; milder losses show only in the log (docs/recipes.md).
constexpr double kFlushedShareWarning = 0.5;

struct StepReport {
  int64_t step = 0, total = 0, epoch = 0;
  int64_t start_step = 0;  // where this run began (> 0 when resumed)
  int64_t window_first = 0;  // the first step this report's rates and counts cover
  float loss = 0, lr = 0;
  double samples_per_s = 0;
  int64_t overflows = 0, underflows = 0;  // quantized elements saturated / flushed to zero since the last report
  int64_t nonfinite_steps = 0;             // steps so far with NaN/inf gradients (skipped) or loss
  int64_t ranks = 1;                       // data-parallel processes; loss and samples_per_s are over all
  uint64_t comm_bytes = 0;                 // gradient bytes this rank sent in the last step
  double comm_seconds = 0;                 // mean seconds per step rank 0 spent exchanging gradients since the last report
  std::vector<QuantTensorCounts> quant;    // per quantized tensor (its sums are overflows / underflows)
};

struct EvalReport {
  int64_t step = 0, epoch = 0, samples = 0;
  bool validation = false;  // on the held-out part of the training data (TrainOptions::validation)
  float loss = 0;
  std::vector<std::pair<std::string, float>> metrics;
};

struct TrainOptions {
  int64_t steps = 0;       // total steps; 0: the model's steps, else epochs x batches per epoch
  uint64_t seed = 0;
  int64_t log_every = 0;   // 0: the model's log_every
  // JSON lines, locked for the run; empty: no log file. Non-finite numbers
  // are written as null with "nonfinite": true on the line.
  std::string log_path;
  int64_t max_nonfinite_run = 8;  // stop after this many consecutive non-finite steps
  // Held-out evaluation (logged as "eval" events): after every epoch, and
  // every eval_every steps when > 0. On `validation`'s test split when given,
  // else on the data's test split; the final evaluation is on the test split.
  int64_t eval_every = 0;
  const Dataset* validation = nullptr;
  // Checkpoints (sgrt/checkpoint.h): saved to checkpoint_dir every
  // checkpoint_every steps, at stop_after, when stopped by a signal and at
  // the end, but never while the run is in a streak of non-finite steps (the
  // last good one is kept). The folder is locked for the run; a folder that
  // already holds a checkpoint is refused unless resume or overwrite. resume
  // continues the run saved there exactly: its seed and planned total, and
  // the log cut back to the checkpoint's step.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t stop_after = 0;   // > 0: end after this step as if interrupted (no final eval)
  bool resume = false;
  bool overwrite = false;   // start afresh over a checkpoint already in checkpoint_dir
  bool check_seed = false;  // resume: refuse a checkpoint whose seed is not `seed`
  // resume with another batch per rank (another number of ranks, the same
  // examples a step): the step_identity of the model compiled with the
  // checkpoint's batch, which the checkpoint must match (sgrt/checkpoint.h).
  uint64_t resume_step_identity = 0;
  // Files written atomically into checkpoint_dir before its first checkpoint
  // (name, bytes): what a tool needs to use the checkpoint on its own.
  std::vector<std::pair<std::string, std::string>> checkpoint_files;
  // Set asynchronously (a signal handler): finish the step, save, stop.
  const volatile std::sig_atomic_t* stop_signal = nullptr;
  std::string init_weights;  // safetensors file whose tensors replace the initial parameters
  // With init_weights: a LoRA run's adapters (sgrt/peft.h's import_adapters: a
  // PEFT folder, or a safetensors file of every trained parameter from
  // export-weights --trained), written after it. A new run (step 0, fresh
  // optimizer state and schedule) from where another ended. A resumed run
  // takes them from its checkpoint.
  std::string adapter;
  // A recipe switch (sgrt train --final-recipe; NVIDIA's NVFP4 recipe ends in
  // higher precision): with hand_over > 0 the run ends before its last
  // hand_over steps (out->stopped, no final evaluation); a session of the
  // model compiled with the final recipe then trains those with continue_from
  // set to the first session, whose state it takes (take_run_state) with its
  // step, planned total, seed and data order, appending to the same log.
  int64_t hand_over = 0;
  const Session* continue_from = nullptr;
  // Data-parallel ranks (null: this process alone). With N ranks, rank r
  // trains on shard r of each step's examples, the session's model must come
  // from split_train_step, and only rank 0 writes the log and checkpoints and
  // calls on_step and on_eval.
  Communicator* comm = nullptr;
  GradComm grad_comm = GradComm::fp32;
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EvalReport&)> on_eval;
};

struct TrainResult {
  std::vector<std::pair<int64_t, float>> losses;  // (step, loss) at each logged step
  EvalReport final_eval;
  double samples_per_s = 0;
  int64_t start_step = 0;  // > 0 when resumed
  bool stopped = false;    // ended at stop_after or by stop_signal: final_eval was not run
  bool interrupted = false;  // ended by stop_signal
  int64_t end_step = 0;    // the last step done
  uint64_t comm_bytes_per_step = 0;  // gradient bytes this rank sent per step (0 on one rank)
};

// A run whose last step or final evaluation is not finite (NaN, +-inf loss or
// metric) fails with a run-time error after logging it; so does a failed
// write of the log or a checkpoint.
Status train(Session& s, const Dataset& data, const TrainOptions& opts, TrainResult* out);

// Mean loss and metrics over every example of a split (eval program); a last
// partial batch counts exactly (trainer.cpp says how). Loss and metrics must be
// means over the batch's rows, as every built-in loss and metric is.
Status evaluate(Session& s, const Dataset& data, Split split, EvalReport* out);

}  // namespace sgrt
