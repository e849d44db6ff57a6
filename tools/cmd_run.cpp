// `sgrt run`: samples bytes from a trained language model through its infer
// program. The model binds an i32 [batch, block] input as the text data set's
// "tokens" and declares sg.output("logits", ...) of shape [batch, block, vocab]
// (or [batch * block, vocab]). The context sits at positions 0..n-1 of batch
// row 0; causal attention makes the padding after it irrelevant, and the
// logits at position n-1 give the next byte. Past the block, the context
// slides to the last block bytes. A model that carries its tokenizer (sgrt
// export --tokenizer) takes text instead (cmd_generate.cpp: run_tokenized).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "model_source.h"
#include "run_gguf.h"
#include "sg_generated.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/generate.h"
#include "sgrt/rng.h"
#include "sgrt/tokenizer_model.h"

namespace sgrt::tool {
namespace {

// The input bound as "tokens" and the "logits" output.
Status find_io(const Model& m, int* tokens, int* logits) {
  *tokens = -1;
  *logits = m.find_output("logits");
  if (const sg::DataBinding* d = m.root().data(); d && d->fields())
    for (const sg::DataField* f : *d->fields())
      if (f->field()->str() == "tokens") *tokens = f->tensor();
  if (*tokens < 0) return Status::Invalid(m.label() + ": binds no \"tokens\" input (sg.data.text{tokens = ...})");
  if (*logits < 0) return Status::Invalid(m.label() + ": declares no sg.output(\"logits\", ...)");
  const TensorType& t = m.tensors()[*tokens].type;
  const TensorType& l = m.tensors()[*logits].type;
  if (t.shape.size() != 2 || t.dtype != DType::i32) return Status::Invalid(m.label() + ": tokens must be i32 [batch, block]");
  if (l.dtype != DType::f32 || numel(l.shape) % numel(t.shape) != 0)
    return Status::Invalid(m.label() + ": logits " + type_str(l) + " do not hold one row per token of " + type_str(t));
  return Status::Ok();
}

}  // namespace

Status cmd_run(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)  // a pretrained GGUF model: tokenizer, chat template, sampling (cmd_generate.cpp)
    if (std::string(argv[i]).rfind("--init-weights", 0) == 0) return cmd_generate(argc, argv);
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (a.has("--adapter")) return Status::Invalid("--adapter applies to a pretrained GGUF model (run MODEL.lua --init-weights FILE.gguf)");
  std::string gguf;  // --tokenizer, or the GGUF the checkpoint's run started from
  SG_TRY(gguf_of_run(a, "--tokenizer", &gguf));
  if (!gguf.empty()) return run_checkpoint_tokenized(std::move(a), gguf);
  std::shared_ptr<const Model> m, trained;  // a script compiled without its training step; as it was trained
  SG_TRY(load_inference_model(&a, "MODEL.sg or MODEL.lua", {}, &m, &trained));
  if (!a.has("--checkpoint") && !carries_weights(*m))
    return Status::Invalid(m->label() + ": run needs --checkpoint DIR (from sgrt train --checkpoint DIR); an exported file carries its weights");
  if (has_tokenizer(*m)) return run_tokenized(a, std::move(m));
  for (const char* f : {"--chat", "--system", "--top-p"})
    if (a.has(f))
      return Status::Invalid(std::string(f) + " applies to a model with a tokenizer: a pretrained GGUF (run MODEL.lua --init-weights "
                             "FILE.gguf) or an export with --tokenizer; " + m->label() + " is byte-level");
  int64_t count, top_k, seed;
  double temperature;
  SG_TRY(a.get_int("--tokens", 200, &count));
  SG_TRY(a.get_int("--top-k", 0, &top_k));
  SG_TRY(a.get_int("--seed", 1, &seed));
  SG_TRY(a.get_double("--temperature", 1.0, 1e-6, 100.0, &temperature));  // > 0: logits are divided by it
  int tokens, logits;
  SG_TRY(find_io(*m, &tokens, &logits));
  const Shape& ts = m->tensors()[tokens].type.shape;
  int64_t batch = ts[0], block = ts[1], vocab = numel(m->tensors()[logits].type.shape) / (batch * block);
  if (vocab > 256)
    return Status::Invalid(m->label() + ": predicts " + std::to_string(vocab) + " tokens, not bytes: give --tokenizer FILE.gguf "
                           "(the GGUF it was trained from) with its MODEL.lua");
  std::string prompt = a.has("--prompt") ? a.get("--prompt") : "\n";
  if (prompt.empty()) return Status::Invalid("--prompt is empty (give at least one byte)");
  if (static_cast<int64_t>(prompt.size()) > block)
    return Status::Invalid("--prompt is " + std::to_string(prompt.size()) + " bytes, longer than the model's block of " +
                           std::to_string(block) + " bytes");

  SG_TRY(apply_threads(a));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(m, std::move(be), &s));
  SG_TRY(s->init(0, 0, checkpoint_supplied(a, s->model(), trained.get())));
  CheckpointMeta meta;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), *trained, &meta));
  int prog;
  SG_TRY(s->find_program("infer", &prog));

  std::vector<uint8_t> text(prompt.begin(), prompt.end());
  std::vector<int32_t> in(batch * block, 0);
  std::vector<float> out(vocab);  // the logits' row at position n - 1 of batch row 0
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  for (int64_t i = 0; i < count; ++i) {
    int64_t n = std::min<int64_t>(block, static_cast<int64_t>(text.size()));
    std::fill(in.begin(), in.end(), 0);
    std::copy(text.end() - n, text.end(), in.begin());
    SG_TRY(s->write(tokens, in.data(), in.size() * sizeof(int32_t)));
    SG_TRY(s->run(prog));
    SG_TRY(s->read_range(logits, sizeof(float) * static_cast<uint64_t>((n - 1) * vocab), out.data(), out.size() * sizeof(float)));
    float u = rng_uniform(static_cast<uint64_t>(seed), 0x52554Eull, static_cast<uint64_t>(i));
    SamplingOptions o{temperature, top_k, 1.0, static_cast<uint64_t>(seed)};
    int next = sample_token(out, o, u);
    text.push_back(static_cast<uint8_t>(next));
    std::fputc(next, stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return Status::Ok();
}

}  // namespace sgrt::tool
