// Hand-made byte-level tokenizers for tests (test_tokenizer.cpp,
// test_instruct_data.cpp): no model file needed.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "sgrt/tokenizer.h"

namespace sgrt::test {

// GPT-2's byte-level alphabet (bytes_to_unicode), written out independently
// of the library: the character standing for byte b.
inline std::string byte_char(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A vocabulary of the 256 byte tokens (id = byte) plus `extra` tokens from
// 256 on, with `merges`.
inline TokenizerSpec tiny_spec(std::vector<std::string> extra, std::vector<std::string> merges) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(byte_char(b));
  for (auto& t : extra) spec.tokens.push_back(std::move(t));
  spec.merges = std::move(merges);
  return spec;
}

inline std::unique_ptr<Tokenizer> make(TokenizerSpec spec) {
  std::unique_ptr<Tokenizer> t;
  const Status st = Tokenizer::create(std::move(spec), &t);
  INFO(st.message());
  REQUIRE(st.ok());
  return t;
}

}  // namespace sgrt::test
