// The byte-level BPE tokenizer without a model: the BPE core on tiny
// hand-made vocabularies (merge order worked out by hand from the algorithm's
// definition), pre-tokenizer cuts, special tokens, decoding, refused specs,
// the chat template. test_tokenizer_smollm2.cpp checks a real vocabulary
// against the reference implementation.
#include <doctest/doctest.h>

#include "sgrt/chat_template.h"
#include "tiny_tokenizer.h"

using namespace sgrt;
using test::byte_char;
using test::make;
using test::tiny_spec;

namespace {

std::string decode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string out;
  REQUIRE(t.decode(ids, &out).ok());
  return out;
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("BPE merges the lowest-ranked adjacent pair first, leftmost among equals") {
  // 256 "ab", 257 "bc", 258 "abc"
  SUBCASE("rank decides") {
    auto t = make(tiny_spec({"bc", "ab", "abc"}, {"b c", "a b", "a bc"}));
    CHECK(t->encode("abc") == Ids{258});  // b c (rank 0) first, then a bc
    auto u = make(tiny_spec({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}));
    CHECK(u->encode("abc") == Ids{258});  // a b (rank 0) first, then ab c
    auto v = make(tiny_spec({"ab", "bc"}, {"a b", "b c"}));
    CHECK(v->encode("abc") == Ids{256, 'c'});  // a b wins; b is gone, so no b c
  }
  SUBCASE("leftmost among equal pairs, then the merged symbols merge") {
    auto t = make(tiny_spec({"aa", "aaaa"}, {"a a", "aa aa"}));
    CHECK(t->encode("aaa") == Ids{256, 'a'});
    CHECK(t->encode("aaaa") == Ids{257});
    CHECK(t->encode("aaaaa") == Ids{257, 'a'});
  }
  SUBCASE("long pieces") {
    auto t = make(tiny_spec({"aa", "aaaa"}, {"a a", "aa aa"}));
    const Ids ids = t->encode(std::string(100001, 'a'));
    REQUIRE(ids.size() == 25001);
    CHECK(ids.front() == 257);
    CHECK(ids.back() == 'a');
  }
}

TEST_CASE("pieces are never merged across: words, digits, spaces") {
  // "a1" and "Ġa" exist but the pre-tokenizer cuts between a and 1 (digits
  // stand alone) and keeps " a" together (a space leads a word).
  auto t = make(tiny_spec({"a1", byte_char(' ') + "a", "ab"}, {"a 1", byte_char(' ') + " a", "a b"}));
  CHECK(t->encode("a1") == Ids{'a', '1'});
  CHECK(t->encode(" a") == Ids{257});
  CHECK(t->encode("ab ab") == Ids{258, 257, 'b'});  // " ab": Ġa merges first (rank 1 < 2)
  CHECK(t->encode("a  a") == Ids{'a', ' ', 257});        // two spaces: the last one leads the word
}

TEST_CASE("special tokens are matched in the text, leftmost and longest") {
  TokenizerSpec spec = tiny_spec({"<s>", "<s>x", "ab"}, {"a b"});
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.token_types[256] = static_cast<int32_t>(TokenType::control);
  spec.token_types[257] = static_cast<int32_t>(TokenType::user_defined);
  auto t = make(std::move(spec));
  CHECK(t->encode("ab<s>ab") == Ids{258, 256, 258});
  CHECK(t->encode("<s>xy") == Ids{257, 'y'});
  CHECK(t->encode("<<s>") == Ids{'<', 256});
  CHECK(t->encode("<s") == Ids{'<', 's'});
  CHECK(decode(*t, {258, 256, 257}) == "ab<s><s>x");
}

TEST_CASE("decoding gives the bytes back, also for invalid UTF-8") {
  auto t = make(tiny_spec({}, {}));
  for (const std::string& s : {std::string("caf\xC3\xA9"), std::string("\xC3("), std::string("\xFF\xFE\x80"),
                              std::string("a\0b", 3), std::string("\xF0\x9F\x98")}) {
    CHECK(decode(*t, t->encode(s)) == s);
  }
  std::string out;
  const Status st = t->decode(Ids{1, 256}, &out);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message() == "tokenizer: decode: id 256 at position 1 outside the 256 tokens");
}

TEST_CASE("bytes without a token are dropped, their neighbours still merge") {
  TokenizerSpec spec = tiny_spec({"!!"}, {"! !"});
  spec.tokens[0xFF] = "unused-token";  // no token for byte 0xFF any more
  auto t = make(std::move(spec));
  CHECK(t->encode("\xFF").empty());
  CHECK(t->encode("!\xFF!") == Ids{256});
}

TEST_CASE("utf8_replace_invalid: one U+FFFD per maximal invalid subpart") {
  // Expected strings follow Unicode's substitution practice (what Python's
  // bytes.decode(errors="replace") prints for these inputs).
  const std::string r = "\xEF\xBF\xBD";
  CHECK(utf8_replace_invalid("ok") == "ok");
  CHECK(utf8_replace_invalid("\xE6\x97") == r);                     // truncated 3-byte
  CHECK(utf8_replace_invalid("\xE6\x97x") == r + "x");
  CHECK(utf8_replace_invalid("\xED\xA0\x80") == r + r + r);         // surrogate
  CHECK(utf8_replace_invalid("\xC0\xAF") == r + r);                 // overlong
  CHECK(utf8_replace_invalid("\xF0\x9F\x98\x80\xF0\x9F") == "\xF0\x9F\x98\x80" + r);
  CHECK(utf8_replace_invalid("\xF4\x90\x80\x80") == r + r + r + r);  // past U+10FFFF
}

TEST_CASE("bad specs are refused with the reason") {
  const auto refused = [](TokenizerSpec spec) {
    std::unique_ptr<Tokenizer> t;
    const Status st = Tokenizer::create(std::move(spec), &t);
    CHECK(st.code() == StatusCode::invalid_input);
    return st.message();
  };
  CHECK(refused(tiny_spec({}, {"a"})) == "tokenizer: merge 0 'a' is not 'left right'");
  CHECK(refused(tiny_spec({}, {"a zz"})) == "tokenizer: merge 0 'a zz': 'zz' is not a token");
  CHECK(refused(tiny_spec({}, {"a b"})) == "tokenizer: merge 0 'a b': 'ab' is not a token");
  TokenizerSpec types = tiny_spec({}, {});
  types.token_types = {1, 1};
  CHECK(refused(types) == "tokenizer: 2 token types for 256 tokens");
  types.token_types.assign(256, 1);
  types.token_types[7] = 9;
  CHECK(refused(types) == "tokenizer: token 7 has unknown type 9");
  TokenizerSpec eos = tiny_spec({}, {});
  eos.eos = 256;
  CHECK(refused(eos) == "tokenizer: eos id 256 outside the 256 tokens");
  TokenizerSpec words;
  words.tokens = {"hello", "world"};
  CHECK(refused(words) == "tokenizer: no token for byte 0x20 ('\xC4\xA0'): not a byte-level BPE vocabulary");
}

TEST_CASE("chat template: ChatML rendered, other templates refused") {
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  ChatTemplate t;
  REQUIRE(ChatTemplate::parse(chatml, &t).ok());
  const std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", "Hello"}};
  CHECK(t.render(chat, true) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
                                "<|im_start|>assistant\n");
  CHECK(t.default_system().empty());

  const std::string with_system = chatml.substr(0, 29) +
      "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe nice<|im_end|>\n' }}"
      "{% endif %}" + chatml.substr(29);
  REQUIRE(ChatTemplate::parse(with_system, &t).ok());
  CHECK(t.render(chat, false) ==
        "<|im_start|>system\nBe nice<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello"
        "<|im_end|>\n");
  const std::vector<ChatMessage> own_system = {{"system", "S"}, {"user", "U"}};
  CHECK(t.render(own_system, false) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");

  for (const std::string& other : {std::string(""), chatml + " ", chatml.substr(1),
                                   std::string("{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}")}) {
    const Status st = ChatTemplate::parse(other, &t);
    CHECK(st.code() == StatusCode::unsupported);
    CHECK(st.message().rfind("chat template not supported", 0) == 0);
  }
}

