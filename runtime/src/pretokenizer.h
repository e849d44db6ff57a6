// The pre-tokenizers: text cut into the pieces BPE merges within (never
// across). Hand-written matchers of the reference regexes, no regex engine.
#pragma once
#include <string_view>
#include <vector>

#include "sgrt/tokenizer.h"

namespace sgrt {

// Appends the pieces of `text`, in order; together they cover it exactly.
void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>* pieces);

}  // namespace sgrt
