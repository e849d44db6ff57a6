// `sgrt run MODEL.lua --init-weights FILE.gguf --prompt TEXT`: text from a
// pretrained llama (docs/llama.md). The GGUF gives the model's shape (as --set
// defaults), its weights and its tokenizer; --chat wraps the prompt in the
// file's chat template as one user message. The block is sized to the prompt
// plus --tokens (at most the file's context); --set kv_cache=true (the
// default here) decodes with a KV cache. Text goes to stdout as it comes; the
// speeds to stderr at the end.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "gguf_config.h"
#include "model_source.h"
#include "sgrt/chat_template.h"
#include "sgrt/checkpoint.h"
#include "sgrt/generate.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/safetensors.h"
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

// The prompt's ids: the text, or with --chat the chat template's rendering of
// one user message (after --system's message) and the assistant's opening; BOS
// first when the tokenizer asks. `source` (the file) prefixes template errors.
Status prompt_ids(const Args& a, const Tokenizer& tok, const std::string& source, std::vector<int32_t>* ids) {
  std::string text = a.get("--prompt");
  if (a.has("--chat")) {
    ChatTemplate ct;
    SG_TRY(ChatTemplate::parse(tok.chat_template(), &ct).with_context(source));
    std::vector<ChatMessage> turns;
    if (a.has("--system")) turns.push_back({"system", a.get("--system")});
    turns.push_back({"user", text});
    text = ct.render(turns, true);
  }
  if (tok.add_bos()) ids->push_back(tok.bos());
  std::vector<int32_t> body = tok.encode(text);
  ids->insert(ids->end(), body.begin(), body.end());
  if (ids->empty()) return Status::Invalid("--prompt is empty");
  return Status::Ok();
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

// The length of the longest prefix of `s` that does not end inside a UTF-8
// sequence: a token may hold half a character, the next one the rest.
size_t whole_chars(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

// --adapter FILE: LoRA adapters from `sgrt export-weights --trained`; their
// rank (lora_A is [rank, in]) becomes --set lora_rank unless given.
Status adapter_rank(const std::string& path, Args* a) {
  std::vector<SafeTensor> file;
  SG_TRY(read_safetensors(path, &file));
  for (const SafeTensor& t : file)
    if (t.name.ends_with(".lora_A") && t.shape.size() == 2) {
      if (!has_set(*a, "lora_rank")) a->sets.push_back({"lora_rank", std::to_string(t.shape[0])});
      return Status::Ok();
    }
  return Status::Invalid(path + ": holds no LoRA adapter (NAME.lora_A); write one with sgrt export-weights --trained");
}

// Generates up to `count` tokens after `ids`, printing the text to stdout as
// it comes (whole characters only: all new ids are decoded each time; invalid
// UTF-8 as U+FFFD) and the speeds to stderr.
Status print_generation(Session& s, const Tokenizer& tok, const std::vector<int32_t>& ids, int64_t count,
                        const SamplingOptions& o) {
  std::vector<int32_t> out;
  std::string text;
  size_t printed = 0;
  auto emit = [&](int32_t id) -> Status {
    if (id == tok.eos()) return Status::Ok();
    out.push_back(id);
    SG_TRY(tok.decode(out, &text));
    size_t end = whole_chars(text);
    if (end > printed) {  // a sequence no character can complete prints as U+FFFD, as at the end
      std::string shown = utf8_replace_invalid(std::string_view(text).substr(printed, end - printed));
      std::fwrite(shown.data(), 1, shown.size(), stdout);
    }
    std::fflush(stdout);
    printed = std::max(printed, end);
    return Status::Ok();
  };
  GenerateStats st;
  SG_TRY(generate(s, ids, count, tok.eos(), o, emit, &st));
  std::string rest = utf8_replace_invalid(std::string_view(text).substr(printed));
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text before the speeds, where both go to one terminal or file
  // The first forward reads the prompt (and gives the first new token); each later one gives one token.
  std::fprintf(stderr, "prompt: %lld tokens in %.3f s (%.1f tokens/s); generation: %lld more tokens in %.3f s (%.2f tokens/s)\n",
               static_cast<long long>(st.prompt_tokens), st.prompt_seconds, st.prompt_tokens / std::max(st.prompt_seconds, 1e-9),
               static_cast<long long>(st.generated - 1), st.generate_seconds,
               (st.generated - 1) / std::max(st.generate_seconds, 1e-9));
  return Status::Ok();
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
  int64_t count;
  SamplingOptions o;
  SG_TRY(sampling_options(a, &count, &o));

  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  SG_TRY(check_gguf_architecture(*f));
  std::map<std::string, std::string> config;
  SG_TRY(apply_gguf_config(&a, &config));
  std::unique_ptr<Tokenizer> tok;
  SG_TRY(tokenizer_from_gguf(*f, &tok));
  std::vector<int32_t> ids;
  SG_TRY(prompt_ids(a, *tok, f->path(), &ids));
  const int64_t n = static_cast<int64_t>(ids.size()), context = std::atoll(set_value(a, "context").c_str());
  if (n >= context)
    return Status::Invalid("--prompt is " + std::to_string(n) + " tokens, the model's context is " + std::to_string(context) +
                           " tokens (leave room for at least one new token)");
  if (!has_set(a, "block")) a.sets.push_back({"block", std::to_string(std::min(context, n + count))});
  if (!has_set(a, "kv_cache")) a.sets.push_back({"kv_cache", "true"});  // prefill once, then one token per step
  const int64_t block = std::atoll(set_value(a, "block").c_str());
  if (n >= block) return Status::Invalid("--prompt is " + std::to_string(n) + " tokens, --set block=" + std::to_string(block) + " leaves no room");
  count = std::min(count, block - n);
  if (has_set(a, "batch") && set_value(a, "batch") != "1") return Status::Invalid("generation runs one sequence: --set batch=1");

  if (a.has("--adapter")) SG_TRY(adapter_rank(a.get("--adapter"), &a));
  std::shared_ptr<const Model> m;
  SG_TRY(load_model(a, a.positional[0], &m, /*infer_only=*/true));
  SG_TRY(apply_threads(a));
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(a.get("--backend", "cpu"), &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(m, std::move(be), &s));
  SG_TRY(s->init(0, 0));
  SG_TRY(import_gguf(*s, path));
  if (a.has("--adapter")) SG_TRY(import_safetensors(*s, a.get("--adapter"), ParamSet::trained));

  return print_generation(*s, *tok, ids, count, o);
}

Status run_tokenized(Args& a, std::shared_ptr<const Model> m) {
  int64_t count;
  SamplingOptions o;
  SG_TRY(sampling_options(a, &count, &o));
  std::unique_ptr<Tokenizer> tok;
  SG_TRY(tokenizer_from_model(*m, &tok));
  std::vector<int32_t> ids;
  SG_TRY(prompt_ids(a, *tok, m->label(), &ids));
  const int tokens = m->find_tensor("tokens");
  if (tokens >= 0 && m->tensors()[tokens].type.shape.size() == 2 && m->tensors()[tokens].type.shape[0] != 1)
    return Status::Invalid(m->label() + ": runs a batch of " + std::to_string(m->tensors()[tokens].type.shape[0]) +
                           " sequences, generation one (export it with --set batch=1)");
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
  SG_TRY(s->init(0, 0));
  int64_t step = 0;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), &step));
  return print_generation(*s, *tok, ids, count, o);
}

}  // namespace sgrt::tool
