// The tokenizer of a GGUF model, from its `tokenizer.*` metadata:
//   tokenizer.ggml.model       "gpt2" (byte-level BPE; others are refused, Unsupported, by name)
//   tokenizer.ggml.pre         "smollm" (others are refused by name)
//   tokenizer.ggml.tokens      [string], tokenizer.ggml.merges [string]
//   tokenizer.ggml.token_type  [i32] (optional), bos/eos_token_id (optional)
//   tokenizer.ggml.add_bos_token (optional; absent: false)
//   tokenizer.chat_template    (optional)
#pragma once
#include <memory>

#include "sgrt/gguf.h"
#include "sgrt/tokenizer.h"

namespace sgrt {

// Errors name the file and the key.
Status tokenizer_from_gguf(const GgufFile& gguf, std::unique_ptr<Tokenizer>* out);

}  // namespace sgrt
