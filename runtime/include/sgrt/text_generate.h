// Text in, text out: sgrt::generate (sgrt/generate.h) with a Tokenizer, what
// `sgrt run` and the C API's sgrt_generate share. The prompt may be rendered
// as a chat through the tokenizer's template; the new tokens come back as
// text pieces of whole UTF-8 characters as they are generated.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sgrt/generate.h"
#include "sgrt/tokenizer.h"

namespace sgrt {

struct PromptOptions {
  bool chat = false;          // the text is one user message in the chat template, the assistant's turn opened
  const char* system = nullptr;  // with chat: a system message first
};

// The prompt's ids: BOS first when the tokenizer asks, then the text (or its
// chat rendering). `source` (the file) prefixes a chat template's refusal.
Status prompt_ids(const Tokenizer& tok, std::string_view text, const PromptOptions& o, const std::string& source,
                  std::vector<int32_t>* ids);

// Generates up to max_new tokens after `prompt` (stopping after EOS), calling
// on_text with each piece of new text: whole characters only (a token may
// hold half of one), an invalid sequence as U+FFFD, EOS not shown.
Status generate_text(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt, int64_t max_new,
                     const SamplingOptions& o, const std::function<void(std::string_view)>& on_text, GenerateStats* stats);

}  // namespace sgrt
