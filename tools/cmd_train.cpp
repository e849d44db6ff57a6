// `sgrt train` and `sgrt eval`.
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>

#include "commands.h"
#include "cpu/parallel.h"
#include "gguf_config.h"
#include "model_source.h"
#include "own_data_tool.h"
#include "profile_report.h"
#include "run_gguf.h"
#include "sg_generated.h"
#include "sgrt/checked_math.h"
#include "sgrt/checkpoint.h"
#include "sgrt/communicator.h"
#include "sgrt/data_parallel.h"
#include "sgrt/export.h"
#include "sgrt/gguf.h"
#include "sgrt/tokenizer_gguf.h"
#include "sgrt/trainer.h"
#include "stop_signal.h"
#ifdef SGRT_WITH_MPI
#include "sgrt/mpi_communicator.h"
#endif

namespace sgrt::tool {
namespace {

// --max-memory BYTES, with an optional K, M or G suffix (powers of 1024).
Status max_memory(const Args& a, uint64_t* out) {
  const std::string v = a.get("--max-memory");
  size_t digits = 0;
  while (digits < v.size() && std::isdigit(static_cast<unsigned char>(v[digits]))) ++digits;
  const std::string suffix = v.substr(digits);
  int shift = suffix.empty() ? 0 : suffix == "K" || suffix == "k" ? 10 : suffix == "M" || suffix == "m" ? 20
            : suffix == "G" || suffix == "g" ? 30 : -1;
  uint64_t n = digits > 0 && digits <= 18 ? std::strtoull(v.c_str(), nullptr, 10) : 0;
  if (n == 0 || shift < 0)
    return Status::Invalid("--max-memory expects a positive byte count with an optional K, M or G suffix (e.g. 64M), got '" + v + "'");
  if (!checked_mul<uint64_t>(n, uint64_t{1} << shift, out))
    return Status::Invalid("--max-memory " + v + " is more than 2^64 bytes");
  return Status::Ok();
}

// The arena is the plan's one allocation: refuse it before it is made.
Status check_memory(const Args& a, const Model& m) {
  if (!a.has("--max-memory")) return Status::Ok();
  uint64_t limit = 0;
  SG_TRY(max_memory(a, &limit));
  if (m.arena_bytes() <= limit) return Status::Ok();
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", m.arena_bytes() / 1048576.0);
  return Status::Invalid(m.label() + ": the memory plan needs a " + std::to_string(m.arena_bytes()) + "-byte arena (" +
                         mib + "), over --max-memory " + a.get("--max-memory") + " (" + std::to_string(limit) + " bytes)");
}

// The tokenizer of --init-weights FILE.gguf when the model's data set reads
// text in the model's tokens (instruct); null otherwise. of_checkpoint (eval,
// a resumed run): by default that of the GGUF the checkpoint's run started from.
bool reads_instruct(const Model& m) {
  const sg::DataBinding* d = m.root().data();
  return d && d->dataset() && d->dataset()->str() == "instruct";
}

Status data_tokenizer(const Args& a, const Model& m, bool of_checkpoint, std::unique_ptr<Tokenizer>* out) {
  if (!reads_instruct(m)) return Status::Ok();
  std::string path = a.get("--init-weights");
  if (path.empty() && of_checkpoint) SG_TRY(gguf_of_run(a, "--init-weights", &path));
  if (!is_gguf(path)) return Status::Ok();
  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  return tokenizer_from_gguf(*f, out);
}

// eval and a resumed run take their weights from the checkpoint: there
// --init-weights names only the GGUF whose tokenizer reads an instruct data set.
Status check_init_weights_for_tokenizer(const Args& a, const Model& m) {
  if (a.has("--init-weights") && !reads_instruct(m))
    return Status::Invalid("--init-weights names the tokenizer of an instruct data set (the weights are the checkpoint's); " +
                           m.label() + " reads none");
  return Status::Ok();
}

Status new_session(const Args& a, std::shared_ptr<const Model> m, std::unique_ptr<Session>* s) {
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  if (a.has("--profile")) SG_TRY(be->request_profile());
  return Session::create(std::move(m), std::move(be), s);
}

Status open_session(const Args& a, std::shared_ptr<const Model> m, bool of_checkpoint, std::unique_ptr<Session>* s,
                    std::unique_ptr<Dataset>* data) {
  SG_TRY(check_memory(a, *m));  // before the data set loads
  SG_TRY(apply_threads(a));
  std::unique_ptr<Tokenizer> tok;
  SG_TRY(data_tokenizer(a, *m, of_checkpoint, &tok));
  SG_TRY(open_dataset(*m, a.get("--data"), data, tok.get(), open_own_data));
  return new_session(a, std::move(m), s);
}

// --final-recipe R --final-steps N: the script compiled again under R, for a
// second session that trains the run's last N steps (TrainOptions::hand_over).
Status final_recipe_model(const Args& a, const Communicator& comm, const TrainOptions& opts, int64_t* steps,
                          std::shared_ptr<const Model>* out) {
  if (!a.has("--final-recipe") && !a.has("--final-steps")) return Status::Ok();
  if (!a.has("--final-recipe") || !a.has("--final-steps"))
    return Status::Invalid("--final-recipe R and --final-steps N go together");
  SG_TRY(a.get_int("--final-steps", 0, steps));
  if (*steps < 1) return Status::Invalid("--final-steps must be at least 1, got " + a.get("--final-steps"));
  if (opts.resume || !opts.checkpoint_dir.empty() || opts.stop_after > 0)
    return Status::Invalid("--final-recipe takes no --checkpoint, --resume or --stop-after (a checkpoint holds one compiled model)");
  if (comm.size() > 1) return Status::Invalid("--final-recipe trains in one process, not under mpirun");
  if (!is_script(a.positional[0]))
    return Status::Invalid(a.positional[0] + ": --final-recipe compiles the model again, from its MODEL.lua script");
  Args final_args = a;
  final_args.flags["--recipe"] = a.get("--final-recipe");
  return load_model(final_args, a.positional[0], out);
}

// Samples a second over both parts of a recipe switch (each TrainResult's rate
// is over its own steps).
double overall_rate(const TrainResult& first, const TrainResult& second) {
  double n1 = static_cast<double>(first.end_step - first.start_step), n2 = static_cast<double>(second.end_step - second.start_step);
  double secs = (first.samples_per_s > 0 ? n1 / first.samples_per_s : 0) + (second.samples_per_s > 0 ? n2 / second.samples_per_s : 0);
  return secs > 0 ? (n1 + n2) / secs : 0;
}

void print_eval(const char* what, const EvalReport& e) {
  std::fprintf(stderr, "%s step %lld (epoch %lld): %sloss %.4f", what, static_cast<long long>(e.step),
               static_cast<long long>(e.epoch), e.validation ? "validation " : "", e.loss);
  for (auto& [n, v] : e.metrics) std::fprintf(stderr, ", %s %.4f", n.c_str(), v);
  std::fprintf(stderr, " (%lld %s examples)\n", static_cast<long long>(e.samples), e.validation ? "held-out" : "test");
}

// Tokens per example for a language model (its "tokens" input is [batch, block]); 0 otherwise.
int64_t tokens_per_example(const Model& m) {
  if (const sg::DataBinding* d = m.root().data(); d && d->fields())
    for (const sg::DataField* f : *d->fields())
      if (f->field()->str() == "tokens" && m.tensors()[f->tensor()].type.shape.size() == 2)
        return m.tensors()[f->tensor()].type.shape[1];
  return 0;
}

// One line on what is about to run.
void print_header(const Args& a, const Model& m, const Communicator& comm, GradComm grad_comm, bool zero) {
  ParamCounts pc = count_params(m.tensors());
  std::string frozen = pc.frozen ? " (" + std::to_string(pc.frozen) + " frozen)" : "";
  std::string ranks = comm.size() > 1 ? ", " + std::to_string(comm.size()) + " ranks (" + comm.name() + ", " +
                                            grad_comm_label(grad_comm, m) + " gradients" + (zero ? ", ZeRO-1" : "") + ")"
                                      : "";
  const auto* recipe = m.root().recipe();
  std::fprintf(stderr, "sgrt train: %s, %llu parameters%s, backend %s, recipe %s, threads %d%s, arena %.2f MiB\n",
               m.label().c_str(), static_cast<unsigned long long>(pc.trained), frozen.c_str(), a.get("--backend", "cpu").c_str(),
               recipe ? recipe->c_str() : "fp32", cpu::num_threads(), ranks.c_str(), m.arena_bytes() / 1048576.0);
}

std::string duration(double secs) {
  char b[32];
  long s = std::lround(secs);
  if (s >= 3600) std::snprintf(b, sizeof b, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else std::snprintf(b, sizeof b, "%ldm%02lds", s / 60, s % 60);
  return b;
}

// fp8-static fixes every scale at compile time from the magnitudes unit-scaled
// initial weights give; weights loaded from a file do not follow them, and the
// precision lost in E4M3's subnormals shows in no counter: docs/recipes.md's
// LoRA run lost more than the fine-tune gained, with nothing flushed or saturated.
void warn_static_scales(const Model& m, const TrainOptions& opts) {
  const auto* recipe = m.root().recipe();
  if (opts.resume || opts.init_weights.empty() || !recipe || recipe->str() != "fp8-static") return;
  std::fprintf(stderr,
               "warning: recipe fp8-static scales every tensor for unit-scaled initial weights; the weights of %s "
               "may sit far from those scales (fine-tune with fp8 or fp8-row; docs/recipes.md, \"fp8-static\")\n",
               opts.init_weights.c_str());
}

// Progress: one line per logged step, rewritten in place on a terminal, with
// throughput (tokens/s for language models) and the time left.
// Once per quantized tensor, the first window that flushed more of it to zero
// than kFlushedShareWarning: accuracy leaks there with no overflow to see.
void warn_flushed(const StepReport& r, bool tty, std::set<std::string>* warned) {
  for (const QuantTensorCounts& c : r.quant)
    if (c.flushed_share() > kFlushedShareWarning && warned->insert(c.tensor).second)
      std::fprintf(stderr,
                   "%swarning: %s: %.1f%% of its elements were flushed to zero in steps %lld-%lld: its scale groups hold "
                   "values too small for the format beside their largest (docs/recipes.md, \"Flushed to zero\")\n",
                   tty ? "\n" : "", c.tensor.c_str(), 100 * c.flushed_share(), static_cast<long long>(r.window_first),
                   static_cast<long long>(r.step));
}

// A text model's rate in tokens (what its users compare), any other's in examples.
std::string rate_text(double samples_per_s, int64_t tokens_per_example) {
  return tokens_per_example > 0 ? std::to_string(std::llround(samples_per_s * static_cast<double>(tokens_per_example))) + " tokens/s"
                                : std::to_string(std::llround(samples_per_s)) + " samples/s";
}

std::function<void(const StepReport&)> progress(const Model& m, bool tty) {
  int64_t tokens = tokens_per_example(m);
  auto start = std::chrono::steady_clock::now();
  auto warned = std::make_shared<std::set<std::string>>();
  return [=](const StepReport& r) {
    warn_flushed(r, tty, warned.get());
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Steps done before this process (a resume) took no time here.
    double per_step = r.step > r.start_step ? secs / static_cast<double>(r.step - r.start_step) : 0;
    std::string rate = rate_text(r.samples_per_s, tokens);
    std::fprintf(stderr, "%sstep %lld/%lld  epoch %lld  loss %.4f  lr %.3g  %s  ETA %s%s", tty ? "\r" : "",
                 static_cast<long long>(r.step), static_cast<long long>(r.total), static_cast<long long>(r.epoch), r.loss,
                 r.lr, rate.c_str(), duration(per_step * static_cast<double>(r.total - r.step)).c_str(), tty ? "   " : "\n");
    std::fflush(stderr);
  };
}

// The ranks this process trains with: mpirun's (MPI), else this process alone.
Status open_ranks(const Args& a, std::unique_ptr<Communicator>* out) {
  int ranks;
  if (!launched_by_mpirun(&ranks)) {
    *out = single_process_communicator();
    return Status::Ok();
  }
#ifdef SGRT_WITH_MPI
  double timeout;
  SG_TRY(a.get_double("--comm-timeout", 300.0, 1.0, 1e6, &timeout));
  return open_mpi_communicator(timeout, out);
#else
  if (ranks == 1) {
    *out = single_process_communicator();
    return Status::Ok();
  }
  return Status::Invalid("started by mpirun with " + std::to_string(ranks) +
                         " ranks, but this sgrt was built without MPI (install libopenmpi-dev and build with -DSGRT_MPI=ON)");
#endif
}

Status train_ranks(Args& a, Communicator& comm);

}  // namespace

// With several ranks, each one's error names it; a rank that fails leaves
// without finish(), and mpirun then ends the others.
Status cmd_train(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  std::unique_ptr<Communicator> comm;
  SG_TRY(open_ranks(a, &comm));
  Status st = train_ranks(a, *comm);
  if (!st.ok() && comm->size() > 1) return st.with_context("rank " + std::to_string(comm->rank()) + " of " + std::to_string(comm->size()));
  SG_TRY(st);
  return comm->finish();
}

namespace {

Status train_ranks(Args& a, Communicator& comm) {
  TrainOptions opts;
  opts.comm = &comm;
  SG_TRY(parse_grad_comm(a.get("--grad-comm", "fp32"), &opts.grad_comm));
  int64_t zero;
  SG_TRY(a.get_int("--zero", 0, &zero));
  if (zero != 0 && zero != 1) return Status::Invalid("--zero expects 0 or 1 (ZeRO stage 1: optimizer state sharding), got " + a.get("--zero"));
  if (zero == 1 && comm.size() == 1)
    return Status::Invalid("--zero 1 shards the optimizer state over data-parallel ranks: start sgrt train with mpirun -np N (N > 1)");
  int64_t seed;
  SG_TRY(a.get_int("--steps", 0, &opts.steps));
  if (a.has("--steps") && opts.steps == 0)  // not "the default": a run of zero steps is a mistake
    return Status::Invalid("--steps must be at least 1 (leave it out for the model's own length)");
  SG_TRY(a.get_int("--log-every", 0, &opts.log_every));
  SG_TRY(a.get_int("--eval-every", 0, &opts.eval_every));
  SG_TRY(a.get_int("--seed", 1, &seed));
  opts.seed = static_cast<uint64_t>(seed);
  opts.log_path = a.get("--log");
  SG_TRY(a.get_int("--checkpoint-every", 0, &opts.checkpoint_every));
  SG_TRY(a.get_int("--stop-after", 0, &opts.stop_after));
  opts.checkpoint_dir = a.get("--checkpoint");
  opts.resume = a.has("--resume");
  opts.overwrite = a.has("--overwrite") && !opts.resume;
  opts.check_seed = opts.resume && a.has("--seed");  // the original command's --seed is fine; another is not
  opts.init_weights = a.get("--init-weights");       // on resume only an instruct data set's tokenizer
  if (!opts.resume) opts.adapter = a.get("--adapter");  // a resumed run's adapters are its checkpoint's
  if ((opts.checkpoint_every > 0 || opts.resume || a.has("--overwrite")) && opts.checkpoint_dir.empty())
    return Status::Invalid("--checkpoint-every, --resume and --overwrite need --checkpoint DIR");
  if (!opts.adapter.empty() && opts.init_weights.empty())
    return Status::Invalid("--adapter needs --init-weights FILE: the base model its adapters were trained on");
  std::shared_ptr<const Model> m;
  if (opts.resume) {
    SG_TRY(load_checkpoint_model(&a, "MODEL.lua or MODEL.sg", &m, &opts.resume_step_identity));
    SG_TRY(check_init_weights_for_tokenizer(a, *m));
  } else if (a.positional.size() != 1) return Status::Invalid("train takes one MODEL.lua or MODEL.sg");
  std::map<std::string, std::string> gguf_config;  // a GGUF's shape as --set defaults (models/llama.lua)
  if (!opts.resume) SG_TRY(apply_gguf_config(&a, &gguf_config));
  if (!opts.adapter.empty()) SG_TRY(apply_adapter_config(&a));
  if (!opts.resume) SG_TRY(load_model(a, a.positional[0], &m));
  if (comm.size() > 1) {
    std::unique_ptr<Model> parts;
    SG_TRY(split_train_step(*m, &parts));
    if (zero == 1) SG_TRY(shard_optimizer_state(comm.size(), comm.rank(), &parts));
    place_dropout_masks(parts.get(), comm.rank());
    m = std::move(parts);
  }
  int64_t final_steps = 0;
  std::shared_ptr<const Model> final_model;
  SG_TRY(final_recipe_model(a, comm, opts, &final_steps, &final_model));
  if (final_model) SG_TRY(check_memory(a, *final_model));
  if (!opts.checkpoint_dir.empty()) {
    opts.checkpoint_files = checkpoint_model_files(a, *m);
    SG_TRY(class_names_files(*m, a.get("--data"), &opts.checkpoint_files));  // for sgrt predict
  }
  std::unique_ptr<Session> s;
  std::unique_ptr<Dataset> data;
  SG_TRY(open_session(a, m, opts.resume, &s, &data));
  std::unique_ptr<Dataset> train_part, validation;
  if (a.has("--val-split")) {
    double f;
    SG_TRY(a.get_double("--val-split", 0.0, 0.0, 1.0, &f));  // split_validation checks (0, 1)
    // A text corpus has a window per byte: evaluate on 1024 of them, evenly spaced.
    int64_t max_examples = tokens_per_example(*m) > 0 ? 1024 : 0;
    SG_TRY(split_validation(std::shared_ptr<const Dataset>(std::move(data)), f, max_examples, &train_part, &validation));
    opts.validation = validation.get();
  } else {
    train_part = std::move(data);
  }

  const bool lead = comm.rank() == 0;  // the other ranks print nothing
  bool quiet = a.has("--quiet") || !lead, tty = isatty(2);
  if (lead) warn_static_scales(*m, opts);
  if (!quiet) {
    print_header(a, *m, comm, opts.grad_comm, zero == 1);
    opts.on_step = progress(*m, tty);
    opts.on_eval = [tty](const EvalReport& e) {
      if (tty) std::fputc('\n', stderr);
      print_eval("eval", e);
    };
  }
  opts.stop_signal = catch_stop_signals();
  std::unique_ptr<Session> final_session;
  if (final_model) {
    SG_TRY(new_session(a, final_model, &final_session));  // before the first part: a bad arena fails first
    opts.hand_over = final_steps;
    if (!quiet) std::fprintf(stderr, "then recipe %s for the last %lld steps\n", a.get("--final-recipe").c_str(),
                             static_cast<long long>(final_steps));
  }
  TrainResult result;
  SG_TRY(train(*s, *train_part, opts, &result));
  if (final_session && !result.interrupted) {
    TrainOptions rest = opts;
    rest.hand_over = 0;
    rest.continue_from = s.get();
    if (!quiet) {
      std::fprintf(stderr, "%sstep %lld: recipe %s from here\n", tty ? "\n" : "", static_cast<long long>(result.end_step),
                   a.get("--final-recipe").c_str());
      rest.on_step = progress(*final_model, tty);
    }
    TrainResult first = result;
    result = {};
    SG_TRY(train(*final_session, *train_part, rest, &result));
    result.samples_per_s = overall_rate(first, result);
  }
  if (!lead) return Status::Ok();
  if (a.has("--profile"))
    for (Session* part : {s.get(), final_session.get()})
      if (part) print_profile(part->model(), part->backend().name(), part->backend().profile(), stderr);
  if (result.interrupted) {
    std::fprintf(stderr, "%sinterrupted by %s after step %lld; %s\n", tty && !quiet ? "\n" : "", stop_signal_name(),
                 static_cast<long long>(result.end_step),
                 opts.checkpoint_dir.empty()
                     ? "nothing was saved (no --checkpoint DIR)"
                     : ("checkpoint saved to " + opts.checkpoint_dir + "; resume with the same command plus --resume").c_str());
    return Status::Ok();
  }
  if (result.stopped) {
    std::printf("stopped after step %lld%s%s\n", static_cast<long long>(opts.stop_after),
                opts.checkpoint_dir.empty() ? "" : "; resume with --resume --checkpoint ", opts.checkpoint_dir.c_str());
    return Status::Ok();
  }
  std::printf("test loss %.4f", result.final_eval.loss);
  for (auto& [n, v] : result.final_eval.metrics) std::printf(", %s %.4f", n.c_str(), v);
  std::printf(" (training %s", rate_text(result.samples_per_s, tokens_per_example(*m)).c_str());
  if (comm.size() > 1)
    std::printf(", %d ranks, %s gradients: %llu bytes sent per rank per step", comm.size(),
                grad_comm_label(opts.grad_comm, *m).c_str(),
                static_cast<unsigned long long>(result.comm_bytes_per_step));
  std::printf(")\n");
  if (!quiet && !opts.checkpoint_dir.empty()) std::fprintf(stderr, "checkpoint saved to %s\n", opts.checkpoint_dir.c_str());
  return Status::Ok();
}

}  // namespace

Status cmd_eval(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  std::shared_ptr<const Model> m, trained;  // a script compiled without its training step; as it was trained
  // MODEL.lua --init-weights FILE.gguf [--adapter A] without a checkpoint: the
  // GGUF's weights; otherwise --init-weights names only an instruct data set's tokenizer.
  const bool gguf_model = !a.has("--checkpoint") && is_gguf(a.get("--init-weights")) && a.positional.size() == 1 &&
                          is_script(a.positional[0]);
  if (gguf_model) {
    SG_TRY(load_gguf_model(&a, /*infer_only=*/true, &m));
  } else {
    if (a.has("--adapter"))
      return Status::Invalid("eval --adapter takes the base from MODEL.lua --init-weights FILE.gguf, without --checkpoint");
    SG_TRY(load_inference_model(&a, "MODEL.sg", {}, &m, &trained));
    SG_TRY(check_init_weights_for_tokenizer(a, *m));
  }
  std::unique_ptr<Session> s;
  std::unique_ptr<Dataset> data;
  SG_TRY(open_session(a, m, !gguf_model, &s, &data));
  // An exported graph carries its weights; anything else needs a checkpoint or a GGUF.
  if (!a.has("--checkpoint") && !gguf_model && !carries_weights(s->model()))
    return Status::Invalid("eval needs --checkpoint DIR (from sgrt train --checkpoint DIR), or MODEL.lua --init-weights FILE.gguf");
  if (gguf_model) SG_TRY(init_from_gguf(a, 0, *s));
  else SG_TRY(s->init(0, 0, checkpoint_supplied(a, s->model(), trained.get())));
  CheckpointMeta meta;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), *trained, &meta));
  EvalReport e;
  SG_TRY(evaluate(*s, *data, Split::test, &e));
  std::printf("%s: test loss %.4f", weights_source(a, gguf_model, meta.step).c_str(), e.loss);
  for (auto& [n, v] : e.metrics) std::printf(", %s %.4f", n.c_str(), v);
  std::printf(" (%lld examples)\n", static_cast<long long>(e.samples));
  bool finite = std::isfinite(e.loss);
  for (auto& [n, v] : e.metrics) finite &= std::isfinite(v) != 0;
  return finite ? Status::Ok() : Status::Runtime("the evaluation is not finite (NaN or inf loss or metric)");
}

}  // namespace sgrt::tool
