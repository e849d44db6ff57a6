#include "sgrt/tokenizer_model.h"

#include "sg_generated.h"

namespace sgrt {
namespace {

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const flatbuffers::String* s : *v) out.push_back(s->str());
  return out;
}

}  // namespace

bool has_tokenizer(const Model& m) { return m.root().tokenizer() != nullptr; }

Status tokenizer_from_model(const Model& m, std::unique_ptr<Tokenizer>* out) {
  const sg::Tokenizer* t = m.root().tokenizer();
  if (!t)
    return Status::Invalid(m.label() + ": carries no tokenizer (export it with sgrt export --tokenizer FILE.gguf, "
                                       "the GGUF it was fine-tuned from)");
  TokenizerSpec spec;
  if (!pre_tokenizer_named(t->pre()->str(), &spec.pre))
    return Status::Unsupported(m.label() + ": tokenizer pre-tokenizer '" + t->pre()->str() + "' not supported (known: " +
                               pre_tokenizer_name(PreTokenizer::smollm) + ")");
  spec.tokens = strings(t->tokens());
  spec.merges = strings(t->merges());
  if (t->token_types()) spec.token_types.assign(t->token_types()->begin(), t->token_types()->end());
  spec.bos = t->bos();
  spec.eos = t->eos();
  spec.add_bos = t->add_bos();
  if (t->chat_template()) spec.chat_template = t->chat_template()->str();
  return Tokenizer::create(std::move(spec), out).with_context(m.label());
}

std::unique_ptr<sg::TokenizerT> tokenizer_table(const TokenizerSpec& spec) {
  auto t = std::make_unique<sg::TokenizerT>();
  t->pre = pre_tokenizer_name(spec.pre);
  t->tokens = spec.tokens;
  t->token_types = spec.token_types;
  t->merges = spec.merges;
  t->bos = spec.bos;
  t->eos = spec.eos;
  t->add_bos = spec.add_bos;
  t->chat_template = spec.chat_template;
  return t;
}

}  // namespace sgrt
