// `sgrt export`: a deployable graph with the checkpoint's weights folded in
// (runtime/include/sgrt/export.h does the work; the C API exposes the same).
// With a script, a model for generation may be compiled from a checkpoint
// trained at another shape: --set batch, block and kv_cache are free
// (docs/lora.md); --tokenizer stores a GGUF's tokenizer in the file, by
// default that of the GGUF the checkpoint's run started from (run_gguf.h).
// Without a checkpoint, a script's weights may be a GGUF's (--init-weights,
// with --adapter's LoRA adapters), whose tokenizer is then the default.
#include <cstdio>

#include "commands.h"
#include "gguf_config.h"
#include "model_source.h"
#include "run_gguf.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/tokenizer_gguf.h"

namespace sgrt::tool {

Status cmd_export(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (!a.has("--output")) return Status::Invalid("export needs -o DEPLOY.sg");
  ExportOptions opts;
  opts.merge_lora = a.has("--merge");
  opts.infer_only = a.has("--infer-only") || opts.merge_lora;
  SG_TRY(parse_export_quant(a.get("--quantize"), &opts.quantize).with_context("--quantize"));
  std::unique_ptr<Tokenizer> tok;
  std::string tok_path;  // --tokenizer, or by default the GGUF the checkpoint's run started from
  bool from_run = false;
  if (a.has("--no-tokenizer") && a.has("--tokenizer")) return Status::Invalid("--tokenizer and --no-tokenizer contradict each other");
  if (!a.has("--no-tokenizer")) SG_TRY(gguf_of_run(a, "--tokenizer", &tok_path, &from_run, " (or --no-tokenizer)"));
  if (!tok_path.empty()) {
    if (!is_gguf(tok_path)) return Status::Invalid("--tokenizer expects a .gguf file, got '" + tok_path + "'");
    std::unique_ptr<GgufFile> f;
    SG_TRY(GgufFile::open(tok_path, &f));
    SG_TRY(tokenizer_from_gguf(*f, &tok));
    opts.tokenizer = tok.get();
  }
  // The model exported and the one the checkpoint was trained as: with
  // --infer-only (or --merge), the script compiled without its training step.
  std::shared_ptr<const Model> m, trained;
  const std::vector<std::string> free_keys = {"batch", "block", "kv_cache"};
  uint64_t step_id = 0;  // the training step the checkpoint comes from, when --set reshapes the script
  bool gguf_model = false;
  SG_TRY(weights_from_gguf(a, "export", &gguf_model));
  if (gguf_model) {
    SG_TRY(load_gguf_model(&a, opts.infer_only, &m));
  } else if (opts.infer_only) {
    SG_TRY(load_inference_model(&a, "MODEL.sg (or MODEL.lua)", free_keys, &m, &trained));
  } else {
    SG_TRY(load_checkpoint_model(&a, "MODEL.sg (or MODEL.lua)", &m, &step_id, free_keys));
  }
  if (!a.has("--checkpoint") && !gguf_model && !carries_weights(*m))
    return Status::Invalid(m->label() + ": export needs --checkpoint DIR (its weights are not in the file)");
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend("cpu", &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(m, std::move(be), &s));
  if (gguf_model) SG_TRY(init_from_gguf(a, 0, *s));
  else SG_TRY(s->init(0, 0, checkpoint_supplied(a, s->model(), trained.get())));
  CheckpointMeta meta;
  if (a.has("--checkpoint"))
    SG_TRY(trained ? load_checkpoint(*s, a.get("--checkpoint"), *trained, &meta)
                   : load_checkpoint(*s, a.get("--checkpoint"), &meta, step_id));
  const int64_t step = meta.step;
  const std::string tok_note = !tok ? "" : from_run ? ", with the tokenizer of " + tok_path + " (the run's --init-weights)" : ", with its tokenizer";
  SG_TRY(export_to_file(*s, opts, a.get("--output")));
  std::printf("exported %s (%s%s%s%s%s%s) to %s\n", m->label().c_str(), weights_source(a, gguf_model, step).c_str(),
              opts.infer_only ? ", inference only" : "", opts.merge_lora ? ", adapters merged" : "", a.has("--quantize") ? ", weights " : "",
              a.get("--quantize").c_str(), tok_note.c_str(), a.get("--output").c_str());
  return Status::Ok();
}

}  // namespace sgrt::tool
