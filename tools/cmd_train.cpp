// `sgrt train` and `sgrt eval`.
#include <unistd.h>

#include <cstdio>

#include "commands.h"
#include "model_source.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/trainer.h"

namespace sgrt::tool {
namespace {

Status open_session(const Args& a, const std::string& path, std::unique_ptr<Session>* s,
                    std::unique_ptr<Dataset>* data) {
  std::shared_ptr<const Model> m;
  SG_TRY(load_model(a, path, &m));
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
                     "--opt-level", "--checkpoint-every", "--stop-after", "--init-weights"},
                    {"--quiet", "--no-plan", "--resume"}, &a));
  if (a.positional.size() != 1) return Status::Invalid("train takes one MODEL.lua or MODEL.sg");
  TrainOptions opts;
  int64_t seed;
  SG_TRY(a.get_int("--steps", 0, &opts.steps));
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
  SG_TRY(parse_args(argc, argv, 2, {"--backend", "--data", "--checkpoint", "--recipe", "--set"}, {"--no-plan"}, &a));
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
