// `sgrt train` and `sgrt eval`.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "model_source.h"
#include "sgrt/checked_math.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/trainer.h"

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
  uint64_t limit;
  SG_TRY(max_memory(a, &limit));
  if (m.arena_bytes() <= limit) return Status::Ok();
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", m.arena_bytes() / 1048576.0);
  return Status::Invalid(m.label() + ": the memory plan needs a " + std::to_string(m.arena_bytes()) + "-byte arena (" +
                         mib + "), over --max-memory " + a.get("--max-memory") + " (" + std::to_string(limit) + " bytes)");
}

Status open_session(const Args& a, const std::string& path, std::unique_ptr<Session>* s,
                    std::unique_ptr<Dataset>* data) {
  std::shared_ptr<const Model> m;
  SG_TRY(load_model(a, path, &m));
  SG_TRY(check_memory(a, *m));
  SG_TRY(open_dataset(*m, a.get("--data"), data));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  return Session::create(std::move(m), std::move(be), s);
}

void print_eval(const char* what, const EvalReport& e) {
  std::fprintf(stderr, "%s epoch %lld: loss %.4f", what, static_cast<long long>(e.epoch), e.loss);
  for (auto& [n, v] : e.metrics) std::fprintf(stderr, ", %s %.4f", n.c_str(), v);
  std::fprintf(stderr, " (%lld test examples)\n", static_cast<long long>(e.samples));
}

}  // namespace

Status cmd_train(int argc, char** argv) {
  Args a;
  SG_TRY(parse_args(argc, argv, 2,
                    {"--backend", "--steps", "--data", "--checkpoint", "--log", "--seed", "--log-every", "--recipe", "--set",
                     "--opt-level", "--checkpoint-every", "--stop-after", "--init-weights", "--max-memory"},
                    {"--quiet", "--no-plan", "--unsafe-lua", "--resume"}, &a));
  if (a.positional.size() != 1) return Status::Invalid("train takes one MODEL.lua or MODEL.sg");
  TrainOptions opts;
  int64_t seed;
  SG_TRY(a.get_int("--steps", 0, &opts.steps));
  if (a.has("--steps") && opts.steps == 0)  // not "the default": a run of zero steps is a mistake
    return Status::Invalid("--steps must be at least 1 (leave it out for the model's own length)");
  SG_TRY(a.get_int("--log-every", 0, &opts.log_every));
  SG_TRY(a.get_int("--seed", 1, &seed));
  opts.seed = static_cast<uint64_t>(seed);
  opts.log_path = a.get("--log");
  SG_TRY(a.get_int("--checkpoint-every", 0, &opts.checkpoint_every));
  SG_TRY(a.get_int("--stop-after", 0, &opts.stop_after));
  opts.checkpoint_dir = a.get("--checkpoint");
  opts.resume = a.has("--resume");
  opts.init_weights = a.get("--init-weights");
  if ((opts.checkpoint_every > 0 || opts.resume) && opts.checkpoint_dir.empty())
    return Status::Invalid("--checkpoint-every and --resume need --checkpoint DIR");
  if (opts.resume && (a.has("--seed") || a.has("--init-weights")))
    return Status::Invalid("--resume continues the saved run: its seed and weights come from the checkpoint");
  std::unique_ptr<Session> s;
  std::unique_ptr<Dataset> data;
  SG_TRY(open_session(a, a.positional[0], &s, &data));

  bool quiet = a.has("--quiet"), tty = isatty(2);
  if (!quiet) {
    opts.on_step = [tty](const StepReport& r) {
      std::fprintf(stderr, "%sstep %lld/%lld  epoch %lld  loss %.4f  lr %.3g  %.0f samples/s%s", tty ? "\r" : "",
                   static_cast<long long>(r.step), static_cast<long long>(r.total), static_cast<long long>(r.epoch),
                   r.loss, r.lr, r.samples_per_s, tty ? "   " : "\n");
      std::fflush(stderr);
    };
    opts.on_eval = [tty](const EvalReport& e) {
      if (tty) std::fputc('\n', stderr);
      print_eval("eval", e);
    };
  }
  TrainResult result;
  SG_TRY(train(*s, *data, opts, &result));
  if (result.stopped) {
    std::printf("stopped after step %lld%s%s\n", static_cast<long long>(opts.stop_after),
                opts.checkpoint_dir.empty() ? "" : "; resume with --resume --checkpoint ", opts.checkpoint_dir.c_str());
    return Status::Ok();
  }
  std::printf("test loss %.4f", result.final_eval.loss);
  for (auto& [n, v] : result.final_eval.metrics) std::printf(", %s %.4f", n.c_str(), v);
  std::printf(" (%.0f samples/s)\n", result.samples_per_s);
  if (!quiet && !opts.checkpoint_dir.empty()) std::fprintf(stderr, "checkpoint saved to %s\n", opts.checkpoint_dir.c_str());
  return Status::Ok();
}

Status cmd_eval(int argc, char** argv) {
  Args a;
  SG_TRY(parse_args(argc, argv, 2, {"--backend", "--data", "--checkpoint", "--recipe", "--set", "--max-memory"}, {"--no-plan", "--unsafe-lua"},
                    &a));
  if (a.positional.size() != 1) return Status::Invalid("eval takes one MODEL.sg");
  std::unique_ptr<Session> s;
  std::unique_ptr<Dataset> data;
  SG_TRY(open_session(a, a.positional[0], &s, &data));
  // An exported graph carries its weights; anything else needs a checkpoint.
  if (!a.has("--checkpoint") && !carries_weights(s->model()))
    return Status::Invalid("eval needs --checkpoint DIR (from sgrt train --checkpoint DIR)");
  SG_TRY(s->init(0, 0));
  int64_t step = 0;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), &step));
  EvalReport e;
  SG_TRY(evaluate(*s, *data, Split::test, &e));
  std::printf("step %lld: test loss %.4f", static_cast<long long>(step), e.loss);
  for (auto& [n, v] : e.metrics) std::printf(", %s %.4f", n.c_str(), v);
  std::printf(" (%lld examples)\n", static_cast<long long>(e.samples));
  return Status::Ok();
}

}  // namespace sgrt::tool
