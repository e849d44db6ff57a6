#include "sgrt/tokenizer_gguf.h"

namespace sgrt {

Status tokenizer_from_gguf(const GgufFile& gguf, std::unique_ptr<Tokenizer>* out) {
  const auto in_file = [&](Status st) { return st.with_context(gguf.path()); };
  TokenizerSpec spec;
  std::string model, pre;
  SG_TRY(gguf.get_string("tokenizer.ggml.model", &model));
  if (model != "gpt2")
    return in_file(Status::Unsupported("tokenizer.ggml.model '" + model +
                                       "' not supported (known: gpt2, byte-level BPE)"));
  SG_TRY(gguf.get_string("tokenizer.ggml.pre", &pre));
  if (pre != "smollm")
    return in_file(Status::Unsupported("tokenizer.ggml.pre '" + pre + "' not supported (known: smollm)"));
  spec.pre = PreTokenizer::smollm;
  SG_TRY(gguf.get_string_array("tokenizer.ggml.tokens", &spec.tokens));
  SG_TRY(gguf.get_string_array("tokenizer.ggml.merges", &spec.merges));
  if (gguf.has("tokenizer.ggml.token_type")) SG_TRY(gguf.get_i32_array("tokenizer.ggml.token_type", &spec.token_types));
  for (const auto& [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &spec.bos},
                                std::pair{"tokenizer.ggml.eos_token_id", &spec.eos}}) {
    if (!gguf.has(key)) continue;
    uint32_t v;
    SG_TRY(gguf.get_u32(key, &v));
    *id = v > INT32_MAX ? INT32_MAX : static_cast<int32_t>(v);  // out of range: refused by create()
  }
  if (gguf.has("tokenizer.chat_template")) SG_TRY(gguf.get_string("tokenizer.chat_template", &spec.chat_template));
  return in_file(Tokenizer::create(std::move(spec), out));
}

}  // namespace sgrt
