// The training loop: seeded shuffling, batching, train_step, periodic eval,
// JSON-lines log. Library code: progress goes to callbacks, not to stderr.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sgrt/dataset.h"
#include "sgrt/session.h"

namespace sgrt {

struct StepReport {
  int64_t step = 0, total = 0, epoch = 0;
  float loss = 0, lr = 0;
  double samples_per_s = 0;
  int64_t overflows = 0, underflows = 0;  // quantized elements saturated / flushed to zero since the last report
  int64_t nonfinite_steps = 0;             // steps skipped so far for NaN/inf gradients
};

struct EvalReport {
  int64_t epoch = 0, samples = 0;
  float loss = 0;
  std::vector<std::pair<std::string, float>> metrics;
};

struct TrainOptions {
  int64_t steps = 0;       // total steps; 0: the model's steps, else epochs x batches per epoch
  uint64_t seed = 0;
  int64_t log_every = 0;   // 0: the model's log_every
  std::string log_path;    // JSON lines; empty: no log file
  int64_t max_nonfinite_run = 8;  // stop after this many consecutive non-finite steps
  // Checkpoints (sgrt/checkpoint.h): saved to checkpoint_dir every
  // checkpoint_every steps, at stop_after and at the end. resume continues the
  // run saved there exactly (its seed and planned total; the log is appended).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t stop_after = 0;   // > 0: end after this step as if interrupted (no final eval)
  bool resume = false;
  std::string init_weights;  // safetensors file whose tensors replace the initial parameters
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EvalReport&)> on_eval;
};

struct TrainResult {
  std::vector<std::pair<int64_t, float>> losses;  // (step, loss) at each logged step
  EvalReport final_eval;
  double samples_per_s = 0;
  int64_t start_step = 0;  // > 0 when resumed
  bool stopped = false;    // ended at stop_after: final_eval was not run
};

Status train(Session& s, const Dataset& data, const TrainOptions& opts, TrainResult* out);

// Mean loss and metrics over every example of a split (eval program); a last
// partial batch counts exactly (trainer.cpp says how). Loss and metrics must be
// means over the batch's rows, as every built-in loss and metric is.
Status evaluate(Session& s, const Dataset& data, Split split, EvalReport* out);

}  // namespace sgrt
