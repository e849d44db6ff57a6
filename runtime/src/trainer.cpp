#include "sgrt/trainer.h"

#include <chrono>
#include <cstdio>
#include <numeric>

#include "sg_generated.h"
#include "sgrt/checkpoint.h"
#include "sgrt/quant.h"
#include "sgrt/rng.h"
#include "sgrt/gguf_weights.h"

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

// A seeded permutation of 0..n-1 for one epoch (Fisher-Yates).
void shuffle(std::vector<int64_t>* order, uint64_t seed, int64_t epoch) {
  std::iota(order->begin(), order->end(), 0);
  for (int64_t i = static_cast<int64_t>(order->size()) - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng_u64(seed, 0x5EED0000ull + epoch, i) % static_cast<uint64_t>(i + 1));
    std::swap((*order)[i], (*order)[j]);
  }
}

class Log {
 public:
  Status open(const std::string& path, bool append) {
    if (path.empty()) return Status::Ok();
    f_ = std::fopen(path.c_str(), append ? "a" : "w");
    if (!f_) return Status::Io(path + ": cannot open the log for writing");
    return Status::Ok();
  }
  ~Log() { if (f_) std::fclose(f_); }
  void line(const std::string& json) {
    if (!f_) return;
    std::fputs(json.c_str(), f_);
    std::fputc('\n', f_);
    std::fflush(f_);
  }

 private:
  FILE* f_ = nullptr;
};

// Sums the saturation and underflow counters of every quantization state.
class QuantCounters {
 public:
  explicit QuantCounters(const Model& m) {
    for (size_t id = 0; id < m.tensors().size(); ++id) {
      const TensorInfo& t = m.tensors()[id];
      if (t.role == Role::scale_state && t.type.dtype == DType::f32 && t.type.shape.size() == 1 &&
          t.type.shape[0] >= kStateHeader)
        states_.push_back(static_cast<int>(id));
    }
  }
  // Counts since the previous call.
  Status delta(const Session& s, int64_t* overflows, int64_t* underflows) {
    double sat = 0, under = 0;
    for (int id : states_) {
      std::vector<float> state(s.model().tensors()[id].bytes / sizeof(float));
      SG_TRY(s.read(id, state.data(), state.size() * sizeof(float)));
      sat += state[kStateSaturated];
      under += state[kStateUnderflow];
    }
    *overflows = static_cast<int64_t>(sat - last_sat_);
    *underflows = static_cast<int64_t>(under - last_under_);
    last_sat_ = sat;
    last_under_ = under;
    return Status::Ok();
  }

 private:
  std::vector<int> states_;
  double last_sat_ = 0, last_under_ = 0;
};

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string eval_json(const char* event, const EvalReport& e, int64_t step) {
  std::string j = std::string("{\"event\":\"") + event + "\",\"step\":" + std::to_string(step) + ",\"epoch\":" +
                  std::to_string(e.epoch) + ",\"eval_samples\":" + std::to_string(e.samples) + ",\"loss\":" + num(e.loss);
  for (auto& [n, v] : e.metrics) j += ",\"" + n + "\":" + num(v);
  return j + "}";
}

// Initial state of a run: fresh (parameters from their initializers or from
// safetensors) or resumed from the checkpoint, whose seed and planned total win.
Status start_run(Session& s, const TrainOptions& opts, CheckpointMeta* run) {
  SG_TRY(s.init(run->seed, run->total_steps));
  if (!opts.resume) return opts.init_weights.empty() ? Status::Ok() : import_weights(s, opts.init_weights);
  if (opts.checkpoint_dir.empty()) return Status::Invalid("resuming needs a checkpoint folder");
  CheckpointMeta saved;
  SG_TRY(load_checkpoint(s, opts.checkpoint_dir, &saved));
  if (opts.steps > 0 && opts.steps != saved.total_steps)
    return Status::Invalid(opts.checkpoint_dir + ": the run was planned for " + std::to_string(saved.total_steps) +
                           " steps (--steps is the run's total), not " + std::to_string(opts.steps));
  if (saved.batches_per_epoch != run->batches_per_epoch)
    return Status::Invalid(opts.checkpoint_dir + ": saved with " + std::to_string(saved.batches_per_epoch) +
                           " batches per epoch, the data now gives " + std::to_string(run->batches_per_epoch));
  *run = saved;
  return Status::Ok();
}

}  // namespace

Status evaluate(Session& s, const Dataset& data, Split split, EvalReport* out) {
  int prog;
  SG_TRY(s.find_program("eval", &prog));
  Batcher b;
  SG_TRY(b.init(s));
  int64_t n = data.size(split) / b.batch();
  if (n == 0) return Status::Invalid("the evaluation split has fewer examples than one batch");
  const Model& m = s.model();
  double loss = 0;
  std::vector<double> metrics(m.metrics().size(), 0.0);
  std::vector<int64_t> idx(b.batch());
  for (int64_t k = 0; k < n; ++k) {
    std::iota(idx.begin(), idx.end(), k * b.batch());
    SG_TRY(b.load(s, data, split, idx.data()));
    SG_TRY(s.run(prog));
    float v;
    SG_TRY(s.read_scalar(m.loss(), &v));
    loss += v;
    for (size_t i = 0; i < metrics.size(); ++i) {
      SG_TRY(s.read_scalar(m.metrics()[i].second, &v));
      metrics[i] += v;
    }
  }
  out->samples = n * b.batch();
  out->loss = static_cast<float>(loss / n);
  out->metrics.clear();
  for (size_t i = 0; i < metrics.size(); ++i) out->metrics.push_back({m.metrics()[i].first, static_cast<float>(metrics[i] / n)});
  return Status::Ok();
}

Status train(Session& s, const Dataset& data, const TrainOptions& opts, TrainResult* out) {
  const Model& m = s.model();
  const sg::TrainConfig* cfg = m.root().train();
  int prog;
  SG_TRY(s.find_program("train_step", &prog));
  Batcher b;
  SG_TRY(b.init(s));
  int64_t per_epoch = data.size(Split::train) / b.batch();
  if (per_epoch == 0) return Status::Invalid("the training split has fewer examples than one batch");
  int64_t total = opts.steps > 0 ? opts.steps
                  : (cfg && cfg->steps() > 0) ? cfg->steps()
                                               : per_epoch * (cfg ? std::max<int64_t>(1, cfg->epochs()) : 1);
  int64_t log_every = opts.log_every > 0 ? opts.log_every : (cfg && cfg->log_every() > 0 ? cfg->log_every() : 50);
  CheckpointMeta run{0, total, opts.seed, per_epoch};
  SG_TRY(start_run(s, opts, &run));
  total = run.total_steps;
  out->start_step = run.step;

  Log log;
  SG_TRY(log.open(opts.log_path, opts.resume));
  std::vector<int64_t> order(data.size(Split::train));
  QuantCounters counters(m);
  int64_t ignored;
  SG_TRY(counters.delta(s, &ignored, &ignored));  // a resumed run counts from its checkpoint
  int32_t ts[kTrainStateLen] = {};
  auto t0 = std::chrono::steady_clock::now();
  auto window_start = t0;
  int64_t window_steps = 0;
  for (int64_t step = run.step; step < total; ++step) {
    int64_t epoch = step / per_epoch, pos = step % per_epoch;
    if (pos == 0 || step == out->start_step) shuffle(&order, run.seed, epoch);
    SG_TRY(b.load(s, data, Split::train, order.data() + pos * b.batch()));
    SG_TRY(s.run(prog));
    ++window_steps;
    if (m.train_state() >= 0) {
      SG_TRY(s.read(m.train_state(), ts, sizeof ts));
      if (ts[kNonfiniteRun] >= opts.max_nonfinite_run)
        return Status::Runtime("training stopped at step " + std::to_string(step + 1) + ": " +
                               std::to_string(ts[kNonfiniteRun]) +
                               " consecutive steps had NaN or inf gradients (updates skipped); the last saved checkpoint is kept");
    }
    bool last = step + 1 == total;
    if ((step + 1) % log_every == 0 || last) {
      StepReport r;
      r.step = step + 1;
      r.total = total;
      r.epoch = epoch;
      SG_TRY(s.read_scalar(m.loss(), &r.loss));
      if (m.lr() >= 0) SG_TRY(s.read_scalar(m.lr(), &r.lr));
      auto now = std::chrono::steady_clock::now();
      double secs = std::chrono::duration<double>(now - window_start).count();
      r.samples_per_s = secs > 0 ? static_cast<double>(window_steps * b.batch()) / secs : 0;
      SG_TRY(counters.delta(s, &r.overflows, &r.underflows));
      r.nonfinite_steps = ts[kNonfiniteTotal];
      window_start = now;
      window_steps = 0;
      out->losses.push_back({r.step, r.loss});
      log.line("{\"step\":" + std::to_string(r.step) + ",\"epoch\":" + std::to_string(epoch) + ",\"loss\":" +
               num(r.loss) + ",\"lr\":" + num(r.lr) + ",\"samples_per_s\":" + num(r.samples_per_s) +
               ",\"overflows\":" + std::to_string(r.overflows) + ",\"underflows\":" + std::to_string(r.underflows) +
               ",\"nonfinite_steps\":" + std::to_string(r.nonfinite_steps) + "}");
      if (opts.on_step) opts.on_step(r);
    }
    if (pos + 1 == per_epoch && !last) {
      EvalReport e;
      SG_TRY(evaluate(s, data, Split::test, &e));
      e.epoch = epoch;
      log.line(eval_json("eval", e, step + 1));
      if (opts.on_eval) opts.on_eval(e);
    }
    run.step = step + 1;
    bool stop = opts.stop_after > 0 && run.step == opts.stop_after && !last;
    bool save = (opts.checkpoint_every > 0 && run.step % opts.checkpoint_every == 0) || stop || last;
    if (save && !opts.checkpoint_dir.empty()) SG_TRY(save_checkpoint(s, opts.checkpoint_dir, run));
    if (stop) {
      out->stopped = true;
      return Status::Ok();
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out->samples_per_s = secs > 0 ? static_cast<double>((total - out->start_step) * b.batch()) / secs : 0;
  SG_TRY(evaluate(s, data, Split::test, &out->final_eval));
  out->final_eval.epoch = (total - 1) / per_epoch;
  log.line(eval_json("done", out->final_eval, total));
  if (opts.on_eval) opts.on_eval(out->final_eval);
  return Status::Ok();
}

}  // namespace sgrt
