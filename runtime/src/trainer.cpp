#include "sgrt/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "sg_generated.h"
#include "sgrt/checkpoint.h"
#include "sgrt/file_io.h"
#include "sgrt/quant.h"
#include "sgrt/rng.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/peft.h"
#include "sgrt/run_files.h"
#include "sgrt/safetensors.h"
#include "quant_monitor.h"
#include "rank_step.h"

namespace sgrt {
namespace {

struct Binding {
  std::string field;
  int tensor;
  std::vector<uint8_t> staging;
};

class Batcher {
 public:
  Status init(const Session& s) {
    const sg::DataBinding* d = s.model().root().data();
    if (!d || !d->fields() || d->fields()->size() == 0) return Status::Invalid(s.model().label() + ": binds no data to its inputs");
    batch_ = d->batch();
    for (const sg::DataField* f : *d->fields()) {
      const TensorInfo& t = s.model().tensors()[f->tensor()];
      if (t.type.shape.empty() || t.type.shape[0] != batch_) return Status::Invalid(t.name + ": first dimension is not the batch");
      bindings_.push_back(Binding{f->field()->str(), f->tensor(), std::vector<uint8_t>(t.bytes)});
    }
    return Status::Ok();
  }
  int64_t batch() const { return batch_; }

  // Gathers examples idx[0..batch) into every bound input.
  Status load(Session& s, const Dataset& data, Split split, const int64_t* idx) {
    for (Binding& b : bindings_) {
      const TensorInfo& t = s.model().tensors()[b.tensor];
      SG_TRY(data.gather(split, idx, batch_, b.field, t, b.staging.data()));
      SG_TRY(s.write(b.tensor, b.staging.data(), b.staging.size()));
    }
    return Status::Ok();
  }

 private:
  int64_t batch_ = 0;
  std::vector<Binding> bindings_;
};

// One epoch's order of 0..n-1: a seeded permutation (Fisher-Yates), or the
// data set's own order when the model says sg.data{shuffle = false}.
void epoch_order(std::vector<int64_t>* order, bool shuffle, uint64_t seed, int64_t epoch) {
  std::iota(order->begin(), order->end(), 0);
  if (!shuffle) return;
  for (int64_t i = static_cast<int64_t>(order->size()) - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng_u64(seed, 0x5EED0000ull + epoch, i) % static_cast<uint64_t>(i + 1));
    std::swap((*order)[i], (*order)[j]);
  }
}

// One JSON object; a non-finite number becomes null and marks the line
// "nonfinite": true, so the log stays JSON when a run diverges.
class JsonLine {
 public:
  JsonLine& str(const char* key, const std::string& v) { return raw(key, "\"" + v + "\""); }
  JsonLine& integer(const char* key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonLine& num(const std::string& key, double v) {
    if (!std::isfinite(v)) {
      nonfinite_ = true;
      return raw(key, "null");
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return raw(key, buf);
  }
  JsonLine& object(const char* key, const JsonLine& inner) { return raw(key, inner.done()); }
  std::string done() const { return "{" + body_ + (nonfinite_ ? ",\"nonfinite\":true" : "") + "}"; }

 private:
  JsonLine& raw(const std::string& key, const std::string& v) {
    body_ += (body_.empty() ? "\"" : ",\"") + key + "\":" + v;
    return *this;
  }
  std::string body_;
  bool nonfinite_ = false;
};

// Per quantized tensor, the share of its elements flushed to zero in the window.
JsonLine flushed_shares(const std::vector<QuantTensorCounts>& quant) {
  JsonLine j;
  for (const QuantTensorCounts& c : quant) j.num(c.tensor, c.flushed_share());
  return j;
}

std::string eval_json(const char* event, const EvalReport& e) {
  JsonLine j;
  j.str("event", event).integer("step", e.step).integer("epoch", e.epoch);
  if (e.validation) j.str("split", "validation");
  j.integer("eval_samples", e.samples).num("loss", e.loss);
  for (auto& [n, v] : e.metrics) j.num(n, v);
  return j.done();
}

bool all_finite(const EvalReport& e) {
  if (!std::isfinite(e.loss)) return false;
  for (auto& [n, v] : e.metrics)
    if (!std::isfinite(v)) return false;
  return true;
}

std::string checkpoint_path(const std::string& dir) { return dir + "/checkpoint.sgck"; }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Locks the checkpoint folder for the run, clears what killed writers left,
// and refuses to start afresh over a checkpoint unless told to.
Status claim_checkpoint_dir(const TrainOptions& opts, RunLock* lock) {
  if (opts.checkpoint_dir.empty()) return Status::Ok();
  SG_TRY(lock->lock_folder(opts.checkpoint_dir, "the checkpoint folder"));
  remove_stale_temporaries(opts.checkpoint_dir, "checkpoint.sgck");
  for (auto& [name, bytes] : opts.checkpoint_files) remove_stale_temporaries(opts.checkpoint_dir, name);
  if (!opts.resume && !opts.overwrite && exists(checkpoint_path(opts.checkpoint_dir)))
    return Status::Invalid(opts.checkpoint_dir + ": holds a checkpoint of an earlier run; continue it with --resume or "
                           "start afresh over it with --overwrite");
  return Status::Ok();
}

// The second part of a recipe switch: the first part's state and step.
Status continue_run(Session& s, const TrainOptions& opts, CheckpointMeta* run) {
  if (opts.resume) return Status::Invalid("a run continues from a checkpoint or from another session, not both");
  SG_TRY(take_run_state(*opts.continue_from, s));
  if (s.model().train_state() < 0)
    return Status::Invalid(s.model().label() + ": has no train state (step counter) to continue a run from");
  int32_t ts[kTrainStateLen] = {};
  SG_TRY(s.read(s.model().train_state(), ts, sizeof ts));
  if (ts[kTotalSteps] != run->total_steps || ts[kStep] < 0 || ts[kStep] >= run->total_steps)
    return Status::Invalid(opts.continue_from->model().label() + ": its run is at step " + std::to_string(ts[kStep]) +
                           " of " + std::to_string(ts[kTotalSteps]) + ", not within this run's " +
                           std::to_string(run->total_steps) + " steps");
  run->step = ts[kStep];
  return Status::Ok();
}

// A fresh run's parameters from --init-weights, the file recorded for the
// tools that need it again (export's tokenizer, a GGUF export's base).
Status start_from_file(Session& s, const std::string& path, CheckpointMeta* run) {
  SG_TRY(import_weights(s, path));
  SG_TRY(weights_file_identity(path, &run->init_identity));
  std::error_code ec;
  run->init_file = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) return Status::Io(path + ": cannot make its path absolute: " + ec.message());
  return Status::Ok();
}

// Initial state of a run: fresh (parameters from their initializers or from
// safetensors) or resumed from the checkpoint, whose seed and planned total win.
// A checkpoint resumes on any number of ranks whose step reads as many
// examples (`step` says how this run's does) as the run that saved it.
Status start_run(Session& s, const TrainOptions& opts, const std::string& step, CheckpointMeta* run) {
  std::vector<bool> supplied;  // what the checkpoint or the weights file writes next (adapters are small: drawn, then written)
  if (!opts.continue_from && opts.resume) supplied = checkpoint_tensors(s.model());
  else if (!opts.continue_from && !opts.init_weights.empty())
    SG_TRY(weights_file_tensors(s.model(), opts.init_weights, &supplied));
  SG_TRY(s.init(run->seed, run->total_steps, supplied));
  if (opts.continue_from) return continue_run(s, opts, run);
  if (!opts.resume) {
    if (opts.init_weights.empty()) return Status::Ok();
    SG_TRY(start_from_file(s, opts.init_weights, run));
    return opts.adapter.empty() ? Status::Ok() : import_adapters(s, opts.adapter);
  }
  if (opts.checkpoint_dir.empty()) return Status::Invalid("resuming needs a checkpoint folder");
  CheckpointMeta saved;
  SG_TRY(load_checkpoint(s, opts.checkpoint_dir, &saved, opts.resume_step_identity));
  if (saved.total_steps <= 0 || saved.batches_per_epoch <= 0)
    return Status::Invalid(checkpoint_path(opts.checkpoint_dir) + ": holds no run position (step " + std::to_string(saved.step) +
                           " of " + std::to_string(saved.total_steps) + ", " + std::to_string(saved.batches_per_epoch) +
                           " batches per epoch): it was not written by sgrt train");
  if (opts.check_seed && opts.seed != saved.seed)
    return Status::Invalid(opts.checkpoint_dir + ": the run was started with --seed " + std::to_string(saved.seed) +
                           ", not " + std::to_string(opts.seed));
  if (opts.steps > 0 && opts.steps != saved.total_steps)
    return Status::Invalid(opts.checkpoint_dir + ": the run was planned for " + std::to_string(saved.total_steps) +
                           " steps (--steps is the run's total), not " + std::to_string(opts.steps));
  if (saved.examples_per_step > 0 && saved.examples_per_step != run->examples_per_step)
    return Status::Invalid(checkpoint_path(opts.checkpoint_dir) + ": saved by steps of " + std::to_string(saved.examples_per_step) +
                           " examples, this run's are " + step + ": give each rank the batch that makes " +
                           std::to_string(saved.examples_per_step));
  if (saved.batches_per_epoch != run->batches_per_epoch)
    return Status::Invalid(opts.checkpoint_dir + ": saved with " + std::to_string(saved.batches_per_epoch) +
                           " steps per epoch, this run's (" + step + " examples a step) gives " +
                           std::to_string(run->batches_per_epoch));
  if (s.model().train_state() >= 0) {  // the optimizer's own step counter must agree with the run's
    int32_t ts[kTrainStateLen] = {};
    SG_TRY(s.read(s.model().train_state(), ts, sizeof ts));
    if (ts[kStep] != saved.step || ts[kTotalSteps] != saved.total_steps)
      return Status::Invalid(checkpoint_path(opts.checkpoint_dir) + ": its train state is at step " + std::to_string(ts[kStep]) +
                             " of " + std::to_string(ts[kTotalSteps]) + ", its header at step " + std::to_string(saved.step) +
                             " of " + std::to_string(saved.total_steps));
  }
  saved.examples_per_step = run->examples_per_step;  // recorded from now on, if a format 3 file lacked it
  *run = saved;
  return Status::Ok();
}

// Saves the run's checkpoint, preceded once by the files that go with it.
// `elsewhere`: ZeRO-1's moments that other ranks keep (gather_moments).
Status save_run(const Session& s, const TrainOptions& opts, const CheckpointMeta& run,
                const std::vector<std::vector<uint8_t>>& elsewhere, bool* files_written) {
  if (!*files_written)
    for (auto& [name, bytes] : opts.checkpoint_files)
      SG_TRY(write_file_atomic(opts.checkpoint_dir + "/" + name, bytes.data(), bytes.size()));
  *files_written = true;
  auto read = [&](int t, void* dst, size_t bytes) {
    if (elsewhere[static_cast<size_t>(t)].empty()) return s.read(t, dst, bytes);
    std::memcpy(dst, elsewhere[static_cast<size_t>(t)].data(), bytes);
    return Status::Ok();
  };
  return save_checkpoint(s.model(), read, opts.checkpoint_dir, run);
}

bool holds_shards(const Model& m) {
  return std::any_of(m.tensors().begin(), m.tensors().end(), [](const TensorInfo& t) { return t.sharded; });
}

// A failed write during a run is a run-time failure (exit 1), not bad input.
Status as_runtime(Status st) { return st.ok() || st.code() != StatusCode::io_error ? st : Status::Runtime(st.message()); }

}  // namespace

namespace {

// Loss and metrics are means over a batch's rows (every built-in one is), and
// the eval program's batch is fixed. The last r < batch examples run padded
// with copies of their last example e; one more batch of e alone gives e's own
// values, and batch * mean - (batch - r) * value(e) is the r examples' sum.
// So every example counts once, whatever the batch size. With N ranks, rank r
// sums examples [size r / N, size (r + 1) / N), and the ranks' sums are added
// in rank order.
Status evaluate_on(Session& s, const Dataset& data, Split split, Communicator& comm, EvalReport* out) {
  int prog;
  SG_TRY(s.find_program("eval", &prog));
  Batcher b;
  SG_TRY(b.init(s));
  const int64_t batch = b.batch(), size = data.size(split);
  if (size == 0) return Status::Invalid("the evaluation split is empty");
  const int64_t lo = size * comm.rank() / comm.size(), hi = size * (comm.rank() + 1) / comm.size();
  const int64_t full = (hi - lo) / batch, rest = (hi - lo) % batch;
  const Model& m = s.model();
  std::vector<int> ids{m.loss()};
  for (const auto& [name, id] : m.metrics()) ids.push_back(id);
  std::vector<double> sums(ids.size(), 0.0), values(ids.size());
  std::vector<int64_t> idx(batch);
  auto run = [&](std::vector<double>* v) -> Status {  // batch means of loss and metrics
    SG_TRY(b.load(s, data, split, idx.data()));
    SG_TRY(s.run(prog));
    for (size_t i = 0; i < ids.size(); ++i) {
      float x;
      SG_TRY(s.read_scalar(ids[i], &x));
      (*v)[i] = x;
    }
    return Status::Ok();
  };
  for (int64_t k = 0; k < full; ++k) {
    std::iota(idx.begin(), idx.end(), lo + k * batch);
    SG_TRY(run(&values));
    for (size_t i = 0; i < ids.size(); ++i) sums[i] += batch * values[i];
  }
  if (rest > 0) {
    std::iota(idx.begin(), idx.begin() + rest, lo + full * batch);
    std::fill(idx.begin() + rest, idx.end(), hi - 1);
    SG_TRY(run(&values));
    std::vector<double> last(ids.size());
    std::fill(idx.begin(), idx.end(), hi - 1);
    SG_TRY(run(&last));
    for (size_t i = 0; i < ids.size(); ++i) sums[i] += batch * values[i] - (batch - rest) * last[i];
  }
  std::vector<double> ranks_sums(sums.size() * static_cast<size_t>(comm.size()));
  SG_TRY(comm.allgather(sums.data(), sums.size() * sizeof(double), ranks_sums.data()));
  for (size_t i = 0; i < sums.size(); ++i) {
    sums[i] = 0;
    for (int r = 0; r < comm.size(); ++r) sums[i] += ranks_sums[static_cast<size_t>(r) * sums.size() + i];
  }
  out->samples = size;
  out->loss = static_cast<float>(sums[0] / size);
  out->metrics.clear();
  for (size_t i = 1; i < ids.size(); ++i) out->metrics.push_back({m.metrics()[i - 1].first, static_cast<float>(sums[i] / size)});
  return Status::Ok();
}

}  // namespace

Status evaluate(Session& s, const Dataset& data, Split split, EvalReport* out) {
  return evaluate_on(s, data, split, *single_process_communicator(), out);
}

namespace {

// A step is non-finite when its gradients were (the update was skipped) or
// its loss was, even with finite gradients (a -inf loss).
struct NonfiniteTracker {
  int64_t streak = 0, total = 0;
  void add(bool bad) {
    streak = bad ? streak + 1 : 0;
    total += bad;
  }
};

}  // namespace

Status train(Session& s, const Dataset& data, const TrainOptions& opts, TrainResult* out) {
  const Model& m = s.model();
  const sg::TrainConfig* cfg = m.root().train();
  std::unique_ptr<Communicator> alone;
  Communicator& comm = opts.comm ? *opts.comm : *(alone = single_process_communicator());
  const int64_t ranks = comm.size();
  const bool lead = comm.rank() == 0;  // logs, checkpoints, reports
  RankStep step_runner;
  SG_TRY(step_runner.init(s, comm, opts.grad_comm));
  int prog, grad_prog = -1;
  SG_TRY(s.find_program("train_step", &prog));
  // sg.train{accumulate = k}: k micro-batches a step, grad_step on all but the last.
  const int64_t k = cfg ? std::max<int64_t>(1, cfg->accumulate()) : 1;
  if (k > 1) SG_TRY(s.find_program("grad_step", &grad_prog));
  Batcher b;
  SG_TRY(b.init(s));
  // Each rank reads step_samples examples a step: shard r of the step's ranks * step_samples.
  const int64_t micro = b.batch(), step_samples = k * micro, global_samples = ranks * step_samples;
  int64_t per_epoch = data.size(Split::train) / global_samples;
  if (per_epoch == 0)
    return Status::Invalid("the training split has fewer examples than one step reads (" + std::to_string(global_samples) + ")");
  int64_t total = opts.steps > 0 ? opts.steps
                  : (cfg && cfg->steps() > 0) ? cfg->steps()
                                               : per_epoch * (cfg ? std::max<int64_t>(1, cfg->epochs()) : 1);
  int64_t log_every = opts.log_every > 0 ? opts.log_every : (cfg && cfg->log_every() > 0 ? cfg->log_every() : 50);
  const int64_t eval_every = opts.eval_every > 0 ? opts.eval_every : cfg ? cfg->eval_every() : 0;
  SG_TRY(check_agree(comm, model_hash(m), "model (compiled with other flags or from another file)", StatusCode::invalid_input));
  SG_TRY(check_agree(comm, static_cast<uint64_t>(data.size(Split::train)), "training data (its number of examples)",
                     StatusCode::invalid_input));
  RunLock dir_lock;
  CheckpointMeta run;
  run.total_steps = total;
  run.seed = opts.seed;
  run.batches_per_epoch = per_epoch;
  run.examples_per_step = global_samples;
  if (lead) {
    SG_TRY(claim_checkpoint_dir(opts, &dir_lock));
    const std::string step = std::to_string(ranks) + (ranks > 1 ? " ranks" : " rank") + " x batch " + std::to_string(micro) +
                             " x accumulate " + std::to_string(k) + " = " + std::to_string(global_samples);
    SG_TRY(start_run(s, opts, step, &run));
  } else {
    SG_TRY(s.init(run.seed, run.total_steps));  // shapes only: rank 0's state replaces it
    CheckpointMeta ignored;  // ZeRO-1: each rank's moments are its own share of the checkpoint
    if (opts.resume && holds_shards(m)) SG_TRY(load_checkpoint(s, opts.checkpoint_dir, &ignored));
  }
  uint64_t position[3] = {static_cast<uint64_t>(run.step), static_cast<uint64_t>(run.total_steps), run.seed};
  SG_TRY(comm.broadcast(position, sizeof position, 0));  // a resumed run's seed orders every rank's shards
  run.step = static_cast<int64_t>(position[0]);
  run.total_steps = static_cast<int64_t>(position[1]);
  run.seed = position[2];
  SG_TRY(broadcast_state(s, comm));
  total = run.total_steps;
  out->start_step = out->end_step = run.step;

  RunLog log;
  if (opts.hand_over < 0 || (opts.hand_over > 0 && run.step >= total - opts.hand_over))
    return Status::Invalid("the run has " + std::to_string(total - run.step) + " steps to train, not more than the " +
                           std::to_string(opts.hand_over) + " final steps it hands to another recipe (--final-steps)");
  if (lead && !opts.log_path.empty())
    SG_TRY(log.open(opts.log_path, opts.resume || opts.continue_from ? run.step : -1));
  const Dataset& held_out = opts.validation ? *opts.validation : data;
  auto held_out_eval = [&](int64_t step, int64_t epoch) -> Status {
    EvalReport e;
    SG_TRY(evaluate_on(s, held_out, Split::test, comm, &e));
    e.step = step;
    e.epoch = epoch;
    e.validation = opts.validation != nullptr;
    SG_TRY(log.line(eval_json("eval", e)));
    if (opts.on_eval && lead) opts.on_eval(e);
    return Status::Ok();
  };
  std::vector<int64_t> order(data.size(Split::train));
  const bool shuffled = !m.root().data() || m.root().data()->shuffle();
  QuantMonitor quant(m, prog, grad_prog, k);
  std::vector<QuantTensorCounts> ignored;
  SG_TRY(quant.delta(s, 0, &ignored));  // a resumed run counts from its checkpoint
  int32_t ts[kTrainStateLen] = {};
  NonfiniteTracker bad;
  if (m.train_state() >= 0) {
    SG_TRY(s.read(m.train_state(), ts, sizeof ts));
    bad.total = ts[kNonfiniteTotal];
  }
  bool files_written = false, save_pending = false;
  float loss = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto rate = [&] {  // samples a second over this run's steps
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return secs > 0 ? static_cast<double>((out->end_step - out->start_step) * global_samples) / secs : 0;
  };
  auto window_start = t0;
  int64_t window_steps = 0;
  double window_comm = 0;
  for (int64_t step = run.step; step < total; ++step) {
    int64_t epoch = step / per_epoch, pos = step % per_epoch;
    if (pos == 0 || step == out->start_step) epoch_order(&order, shuffled, run.seed, epoch);
    double loss_sum = 0;  // the step's loss: the mean of its micro-batches'
    const int64_t* shard = order.data() + pos * global_samples + comm.rank() * step_samples;
    for (int64_t j = 0; j < k; ++j) {
      SG_TRY(b.load(s, data, Split::train, shard + j * micro));
      SG_TRY(j + 1 < k ? s.run(grad_prog) : step_runner.run(s));
      SG_TRY(s.read_scalar(m.loss(), &loss));
      loss_sum += loss;
    }
    // The loss over every rank's examples, and a stop signal seen by any rank,
    // decide alike everywhere.
    float agreed[2] = {static_cast<float>(loss_sum / static_cast<double>(k)),
                       opts.stop_signal && *opts.stop_signal != 0 ? 1.0f : 0.0f};
    SG_TRY(allreduce_sum(comm, agreed, 2, Wire::f32, 1.0f / static_cast<float>(ranks)));
    loss = agreed[0];
    SG_TRY(step_runner.sync_state(s));
    window_comm += step_runner.comm_seconds();
    ++window_steps;
    if (m.train_state() >= 0) SG_TRY(s.read(m.train_state(), ts, sizeof ts));
    bad.add(ts[kSkipStep] != 0 || !std::isfinite(loss));
    if (bad.streak >= opts.max_nonfinite_run)
      return Status::Runtime("training stopped at step " + std::to_string(step + 1) + ": " + std::to_string(bad.streak) +
                             " consecutive steps had NaN or inf gradients or loss; the last good checkpoint is kept");
    bool last = step + 1 == total;
    if ((step + 1) % log_every == 0 || last) {
      StepReport r;
      r.step = step + 1;
      r.total = total;
      r.start_step = out->start_step;
      r.epoch = epoch;
      r.loss = loss;
      if (m.lr() >= 0) SG_TRY(s.read_scalar(m.lr(), &r.lr));
      auto now = std::chrono::steady_clock::now();
      double secs = std::chrono::duration<double>(now - window_start).count();
      r.window_first = r.step - window_steps + 1;
      r.samples_per_s = secs > 0 ? static_cast<double>(window_steps * global_samples) / secs : 0;
      r.ranks = ranks;
      r.comm_bytes = step_runner.bytes_sent();
      r.comm_seconds = window_comm / static_cast<double>(window_steps);
      SG_TRY(quant.delta(s, window_steps, &r.quant));
      for (const QuantTensorCounts& c : r.quant) {
        r.overflows += c.saturated;
        r.underflows += c.flushed;
      }
      r.nonfinite_steps = bad.total;
      window_start = now;
      window_steps = 0;
      window_comm = 0;
      out->losses.push_back({r.step, r.loss});
      JsonLine line;
      line.integer("step", r.step)
          .integer("epoch", epoch)
          .num("loss", r.loss)
          .num("lr", r.lr)
          .num("samples_per_s", r.samples_per_s)
          .integer("overflows", r.overflows)
          .integer("underflows", r.underflows)
          .integer("nonfinite_steps", r.nonfinite_steps);
      if (!r.quant.empty()) line.object("flushed_share", flushed_shares(r.quant));
      if (ranks > 1)
        line.integer("ranks", ranks).integer("comm_bytes", static_cast<int64_t>(r.comm_bytes)).num("comm_s", r.comm_seconds);
      SG_TRY(log.line(line.done()));
      if (opts.on_step && lead) opts.on_step(r);
    }
    bool epoch_end = pos + 1 == per_epoch, every = eval_every > 0 && (step + 1) % eval_every == 0;
    if ((epoch_end || every) && !last) SG_TRY(held_out_eval(step + 1, epoch));
    run.step = out->end_step = step + 1;
    bool signalled = agreed[1] > 0;
    bool stop = (opts.stop_after > 0 && run.step == opts.stop_after && !last) || (signalled && !last) ||
                (opts.hand_over > 0 && run.step == total - opts.hand_over);
    save_pending |= (opts.checkpoint_every > 0 && run.step % opts.checkpoint_every == 0) || stop || last;
    if (save_pending && bad.streak == 0 && !opts.checkpoint_dir.empty()) {
      SG_TRY(check_identical(s, comm));
      std::vector<std::vector<uint8_t>> elsewhere;
      SG_TRY(gather_moments(s, comm, &elsewhere));
      if (lead) SG_TRY(as_runtime(save_run(s, opts, run, elsewhere, &files_written)));
      save_pending = false;
    }
    if (stop) {
      out->samples_per_s = rate();
      out->stopped = true;
      out->interrupted = signalled;
      return Status::Ok();
    }
  }
  out->samples_per_s = rate();
  out->comm_bytes_per_step = step_runner.bytes_sent();
  SG_TRY(check_identical(s, comm));
  SG_TRY(evaluate_on(s, data, Split::test, comm, &out->final_eval));
  out->final_eval.step = total;
  out->final_eval.epoch = (total - 1) / per_epoch;
  SG_TRY(log.line(eval_json("done", out->final_eval)));
  if (opts.on_eval && lead) opts.on_eval(out->final_eval);
  if (bad.streak > 0)
    return Status::Runtime("the last step's loss is " + std::to_string(loss) + " (" + std::to_string(bad.streak) +
                           " non-finite steps at the end of the run); the last good checkpoint is kept");
  if (!all_finite(out->final_eval))
    return Status::Runtime("the final evaluation is not finite (test loss " + std::to_string(out->final_eval.loss) +
                           "); the run diverged");
  return Status::Ok();
}

}  // namespace sgrt
