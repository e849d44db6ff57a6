// Byte-level BPE tokenizer (GPT-2 family), built from plain data so that it
// does not depend on where the vocabulary comes from (a GGUF file:
// sgrt/tokenizer_gguf.h). Encoding is exact: the ids equal those of
// Hugging Face `tokenizers` configured as the model's tokenizer.json
// (checked by tests/test_tokenizer.cpp against scripts/make_tokenizer_reference.py).
//
//   text --special tokens split out--> segments --pre-tokenizer--> pieces
//        --bytes to byte-level ids--> BPE merges by rank --> ids
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sgrt/status.h"

namespace sgrt {

// How text is cut into pieces before BPE (GGUF `tokenizer.ggml.pre`).
//   smollm: every \p{N} code point alone, then in each remaining span the GPT-2
//   regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
enum class PreTokenizer { smollm };

// A pre-tokenizer's name, as GGUF files (`tokenizer.ggml.pre`) and .sg files store it.
const char* pre_tokenizer_name(PreTokenizer p);
// The pre-tokenizer called `name`; false for a name none has.
bool pre_tokenizer_named(std::string_view name, PreTokenizer* out);

// GGUF / llama.cpp token types (`tokenizer.ggml.token_type`).
enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct TokenizerSpec {
  std::vector<std::string> tokens;    // id -> text; normal tokens in the GPT-2 byte-level alphabet
  std::vector<int32_t> token_types;   // TokenType per id; empty means all normal
  std::vector<std::string> merges;    // "left right"; rank = index (lower merges first)
  int32_t bos = -1, eos = -1;         // -1: none
  bool add_bos = false;               // a prompt starts with bos (GGUF tokenizer.ggml.add_bos_token)
  PreTokenizer pre = PreTokenizer::smollm;
  std::string chat_template;          // the model's Jinja template (sgrt/chat_template.h); may be empty
};

// Immutable once created: encode() and decode() may run on many threads.
class Tokenizer {
 public:
  // Checks the spec: printable ASCII has byte tokens, every merge names two tokens
  // whose concatenation is a token, types and special ids are in range.
  static Status create(TokenizerSpec spec, std::unique_ptr<Tokenizer>* out);

  // UTF-8 text to ids. Control and user-defined tokens written in the text
  // (e.g. "<|im_start|>") become their single id (leftmost, longest match);
  // invalid UTF-8 is tokenized byte by byte, never refused. Bytes the
  // vocabulary has no token for are dropped, as by the reference.
  std::vector<int32_t> encode(std::string_view text) const;
  // Ids to the exact bytes they stand for (control tokens as their text). A
  // cut inside a multi-byte character gives a partial sequence: callers that
  // need valid UTF-8 pass the result to utf8_replace_invalid().
  Status decode(std::span<const int32_t> ids, std::string* out) const;

  size_t vocab_size() const { return token_bytes_offset_.size() - 1; }
  int32_t bos() const { return spec_.bos; }
  int32_t eos() const { return spec_.eos; }
  const std::string& token_text(int32_t id) const { return spec_.tokens[id]; }
  const std::string& chat_template() const { return spec_.chat_template; }
  bool add_bos() const { return spec_.add_bos; }
  const TokenizerSpec& spec() const { return spec_; }

  ~Tokenizer();

 private:
  struct MergeTable;
  struct Scratch;
  Tokenizer();
  void encode_plain(std::string_view text, Scratch& scratch, std::vector<int32_t>* ids) const;
  void bpe(std::string_view piece, Scratch& scratch, std::vector<int32_t>* ids) const;
  size_t special_at(std::string_view text, size_t pos, int32_t* id) const;

  TokenizerSpec spec_;
  int32_t byte_token_[256] = {};              // byte -> id of its one-character token, -1: none
  std::unique_ptr<MergeTable> merges_;        // (left id, right id) -> rank, merged id
  std::vector<int32_t> specials_;             // control and user-defined ids, longest text first
  bool special_first_byte_[256] = {};
  std::string token_bytes_;                   // every token's decoded bytes, concatenated
  std::vector<uint32_t> token_bytes_offset_;  // id -> [offset[id], offset[id + 1])
};

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD (one per
// maximal invalid subpart, as Python's errors="replace" and Rust's
// from_utf8_lossy do).
std::string utf8_replace_invalid(std::string_view bytes);

}  // namespace sgrt
