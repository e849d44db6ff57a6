// `sgrt run MODEL.lua --init-weights FILE.gguf --prompt TEXT`: text from a
// pretrained llama (docs/llama.md). The GGUF gives the model's shape (as --set
// defaults), its weights and its tokenizer; --chat wraps the prompt in the
// file's chat template as one user message. The block is sized to the prompt
// plus --tokens (at most the file's context); --set kv_cache=true (the
// default here) decodes with a KV cache. Text goes to stdout as it comes; the
// speeds to stderr at the end. `sgrt run FILE.sg` of an export that carries
// its tokenizer (sgrt export --tokenizer) runs the same way from the file alone,
// and `sgrt run MODEL.lua --checkpoint DIR` of a run that started from a GGUF
// from the checkpoint's weights and that GGUF's tokenizer (run_gguf.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "gguf_config.h"
#include "model_source.h"
#include "run_gguf.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/text_generate.h"
#include "sgrt/tokenizer_gguf.h"
#include "sgrt/tokenizer_model.h"

namespace sgrt::tool {
namespace {

bool has_set(const Args& a, const std::string& key) {
  for (auto& [k, v] : a.sets)
    if (k == key) return true;
  return false;
}

std::string set_value(const Args& a, const std::string& key) {
  std::string r;
  for (auto& [k, v] : a.sets)
    if (k == key) r = v;  // the last wins, as in the DSL
  return r;
}

// The prompt's ids: --prompt, with --chat (and --system) as a chat.
Status prompt_of(const Args& a, const Tokenizer& tok, const std::string& source, std::vector<int32_t>* ids) {
  const std::string system = a.get("--system");
  PromptOptions po{a.has("--chat"), a.has("--system") ? system.c_str() : nullptr};
  return prompt_ids(tok, a.get("--prompt"), po, source, ids);
}

// --tokens, --temperature (default 0: greedy), --top-k, --top-p, --seed.
Status sampling_options(const Args& a, int64_t* count, SamplingOptions* o) {
  int64_t top_k, seed;
  SG_TRY(a.get_int("--tokens", 200, count));
  SG_TRY(a.get_int("--top-k", 0, &top_k));
  SG_TRY(a.get_int("--seed", 1, &seed));
  SG_TRY(a.get_double("--temperature", 0.0, 0.0, 100.0, &o->temperature));
  SG_TRY(a.get_double("--top-p", 1.0, 1e-6, 1.0, &o->top_p));
  o->top_k = top_k;
  o->seed = static_cast<uint64_t>(seed);
  if (*count < 1) return Status::Invalid("--tokens must be at least 1");
  return Status::Ok();
}

// Generates up to `count` tokens after `ids`: the text to stdout as it comes,
// the speeds to stderr.
Status print_generation(Session& s, const Tokenizer& tok, const std::vector<int32_t>& ids, int64_t count,
                        const SamplingOptions& o) {
  GenerateStats st;
  SG_TRY(generate_text(s, tok, ids, count, o, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  }, &st));
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text before the speeds, where both go to one terminal or file
  // The first forward reads the prompt (and gives the first new token); each later one gives one token.
  std::fprintf(stderr, "prompt: %lld tokens in %.3f s (%.1f tokens/s); generation: %lld more tokens in %.3f s (%.2f tokens/s)\n",
               static_cast<long long>(st.prompt_tokens), st.prompt_seconds, st.prompt_tokens / std::max(st.prompt_seconds, 1e-9),
               static_cast<long long>(st.generated - 1), st.generate_seconds,
               (st.generated - 1) / std::max(st.generate_seconds, 1e-9));
  return Status::Ok();
}

// The GGUF's tokenizer and the prompt's ids; --set block (the prompt plus
// --tokens, rounded up to whole prefill chunks, at most `context`), kv_cache,
// prefill_chunk and batch for generating one sequence; *count cut to what the
// block holds.
Status plan_generation(Args* a, const GgufFile& f, int64_t context, std::unique_ptr<Tokenizer>* tok, std::vector<int32_t>* ids,
                       int64_t* count) {
  SG_TRY(tokenizer_from_gguf(f, tok));
  SG_TRY(prompt_of(*a, **tok, f.path(), ids));
  const int64_t n = static_cast<int64_t>(ids->size());
  if (n >= context)
    return Status::Invalid("--prompt is " + std::to_string(n) + " tokens, the model's context is " + std::to_string(context) +
                           " tokens (leave room for at least one new token)");
  // The prompt is prefilled kChunk tokens at a time: its cost follows its
  // length, not the block's (which the chunk must divide).
  constexpr int64_t kChunk = 64;
  if (!has_set(*a, "block")) {
    const int64_t whole = (n + *count + kChunk - 1) / kChunk * kChunk;
    a->sets.push_back({"block", std::to_string(std::min(context, whole))});
  }
  if (!has_set(*a, "kv_cache")) a->sets.push_back({"kv_cache", "true"});  // prefill once, then one token per step
  const int64_t block = std::atoll(set_value(*a, "block").c_str());
  if (!has_set(*a, "prefill_chunk") && block % kChunk == 0) a->sets.push_back({"prefill_chunk", std::to_string(kChunk)});
  if (n >= block) return Status::Invalid("--prompt is " + std::to_string(n) + " tokens, --set block=" + std::to_string(block) + " leaves no room");
  *count = std::min(*count, block - n);
  if (has_set(*a, "batch") && set_value(*a, "batch") != "1") return Status::Invalid("generation runs one sequence: --set batch=1");
  if (!has_set(*a, "batch")) a->sets.push_back({"batch", "1"});
  return Status::Ok();
}

// A session on --backend with --threads, not yet initialized.
Status session_for(const Args& a, std::shared_ptr<const Model> m, std::unique_ptr<Session>* s) {
  SG_TRY(apply_threads(a));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  return Session::create(std::move(m), std::move(be), s);
}

}  // namespace

Status cmd_generate(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (a.has("--checkpoint")) return Status::Invalid("run --init-weights FILE.gguf takes no --checkpoint");
  if (a.positional.size() != 1 || !is_script(a.positional[0]))
    return Status::Invalid("run --init-weights FILE.gguf takes one MODEL.lua (models/llama.lua)");
  const std::string path = a.get("--init-weights");
  if (!is_gguf(path)) return Status::Invalid("run --init-weights expects a .gguf file, got '" + path + "'");
  if (a.has("--tokenizer")) return Status::Invalid("run --init-weights FILE.gguf reads the prompt with that file's tokenizer; leave out --tokenizer");
  int64_t count;
  SamplingOptions o;
  SG_TRY(sampling_options(a, &count, &o));

  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  SG_TRY(check_gguf_architecture(*f));
  std::map<std::string, std::string> config;
  SG_TRY(apply_gguf_config(&a, &config));
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;
  SG_TRY(plan_generation(&a, *f, std::atoll(set_value(a, "context").c_str()), &tok, &ids, &count));
  if (a.has("--adapter")) SG_TRY(apply_adapter_config(&a));
  std::shared_ptr<const Model> m;
  SG_TRY(load_model(a, a.positional[0], &m, /*infer_only=*/true));
  std::unique_ptr<Session> s;
  SG_TRY(session_for(a, std::move(m), &s));
  SG_TRY(init_from_gguf(a, 0, *s));

  return print_generation(*s, *tok, ids, count, o);
}

Status run_checkpoint_tokenized(Args a, const std::string& gguf) {
  if (!a.has("--checkpoint"))
    return Status::Invalid("--tokenizer applies to run MODEL.lua --checkpoint DIR (a llama trained from a GGUF, whose tokenizer it names)");
  if (a.positional.size() != 1 || !is_script(a.positional[0]))
    return Status::Invalid("run --checkpoint DIR of a model with a tokenizer compiles it for generation: give its MODEL.lua");
  int64_t count;
  SamplingOptions o;
  SG_TRY(sampling_options(a, &count, &o));
  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(gguf, &f));
  uint32_t context = UINT32_MAX;  // a tokenizer-only GGUF sets no bound on the block
  if (f->has("llama.context_length")) SG_TRY(f->get_u32("llama.context_length", &context));
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;
  SG_TRY(plan_generation(&a, *f, context, &tok, &ids, &count));
  std::shared_ptr<const Model> m, trained;  // inference-only; the script as the checkpoint was trained
  SG_TRY(load_inference_model(&a, "MODEL.lua", {"batch", "block", "kv_cache"}, &m, &trained));
  const std::vector<bool> supplied = checkpoint_tensors(*m, *trained);
  std::unique_ptr<Session> s;
  SG_TRY(session_for(a, std::move(m), &s));
  SG_TRY(s->init(0, 0, supplied));
  CheckpointMeta meta;
  SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), *trained, &meta));
  return print_generation(*s, *tok, ids, count, o);
}

Status run_tokenized(const Args& a, std::shared_ptr<const Model> m) {
  int64_t count;
  SamplingOptions o;
  SG_TRY(sampling_options(a, &count, &o));
  std::unique_ptr<Tokenizer> tok;
  SG_TRY(tokenizer_from_model(*m, &tok));
  std::vector<int32_t> ids;
  SG_TRY(prompt_of(a, *tok, m->label(), &ids));
  const int tokens = m->find_tensor("tokens");
  if (tokens >= 0 && m->tensors()[tokens].type.shape.size() == 2 && m->tensors()[tokens].type.shape[0] != 1)
    return Status::Invalid(m->label() + ": runs a batch of " + std::to_string(m->tensors()[tokens].type.shape[0]) +
                           " sequences, generation one (export it from its script with --set batch=1)");
  int64_t block, vocab;
  SG_TRY(generation_shape(*m, &block, &vocab));
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n >= block)
    return Status::Invalid("--prompt is " + std::to_string(n) + " tokens, " + m->label() + "'s block is " + std::to_string(block) +
                           " tokens (leave room for at least one new token; export it with --set block=N)");
  count = std::min(count, block - n);

  SG_TRY(apply_threads(a));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(std::move(m), std::move(be), &s));
  SG_TRY(s->init(0, 0, checkpoint_supplied(a, s->model())));
  int64_t step = 0;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), &step));
  return print_generation(*s, *tok, ids, count, o);
}

}  // namespace sgrt::tool
