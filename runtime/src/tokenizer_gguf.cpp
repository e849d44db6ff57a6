#include "sgrt/tokenizer_gguf.h"

namespace sgrt {
namespace {

// One of `known` or an Unsupported status naming the key and the value.
Status expect(const GgufFile& gguf, const char* key, const char* known) {
  std::string value;
  SG_TRY(gguf.get_string(key, &value));
  if (value == known) return Status::Ok();
  std::string msg = gguf.path();
  msg.append(": ").append(key).append(" '").append(value).append("' not supported (known: ").append(known) += ')';
  return Status::Unsupported(std::move(msg));
}

// An optional token id; out of range values are left to Tokenizer::create.
Status optional_id(const GgufFile& gguf, const char* key, int32_t* id) {
  if (!gguf.has(key)) return Status::Ok();
  uint32_t v;
  SG_TRY(gguf.get_u32(key, &v));
  *id = v > INT32_MAX ? INT32_MAX : static_cast<int32_t>(v);
  return Status::Ok();
}

}  // namespace

Status tokenizer_from_gguf(const GgufFile& gguf, std::unique_ptr<Tokenizer>* out) {
  TokenizerSpec spec;
  SG_TRY(expect(gguf, "tokenizer.ggml.model", "gpt2"));
  spec.pre = PreTokenizer::smollm;
  SG_TRY(expect(gguf, "tokenizer.ggml.pre", pre_tokenizer_name(spec.pre)));
  SG_TRY(gguf.get_string_array("tokenizer.ggml.tokens", &spec.tokens));
  SG_TRY(gguf.get_string_array("tokenizer.ggml.merges", &spec.merges));
  if (gguf.has("tokenizer.ggml.token_type")) SG_TRY(gguf.get_i32_array("tokenizer.ggml.token_type", &spec.token_types));
  SG_TRY(optional_id(gguf, "tokenizer.ggml.bos_token_id", &spec.bos));
  SG_TRY(optional_id(gguf, "tokenizer.ggml.eos_token_id", &spec.eos));
  if (gguf.has("tokenizer.ggml.add_bos_token")) SG_TRY(gguf.get_bool("tokenizer.ggml.add_bos_token", &spec.add_bos));
  if (gguf.has("tokenizer.chat_template")) SG_TRY(gguf.get_string("tokenizer.chat_template", &spec.chat_template));
  return Tokenizer::create(std::move(spec), out).with_context(gguf.path());
}

}  // namespace sgrt
