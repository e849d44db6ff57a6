// The tokenizer an exported .sg file carries (Model.tokenizer in
// ir/schema/sg.fbs; sgrt export --tokenizer FILE.gguf), so that the file alone
// turns text into tokens and back: sgrt run FILE.sg --prompt TEXT.
#pragma once
#include <memory>

#include "sgrt/model.h"
#include "sgrt/tokenizer.h"

namespace sg { struct TokenizerT; }

namespace sgrt {

bool has_tokenizer(const Model& m);

// The file's tokenizer, checked as Tokenizer::create checks any; errors name
// the model. A file without one is an error that says how to add it.
Status tokenizer_from_model(const Model& m, std::unique_ptr<Tokenizer>* out);

// The table the exporter writes for `spec`.
std::unique_ptr<sg::TokenizerT> tokenizer_table(const TokenizerSpec& spec);

}  // namespace sgrt
