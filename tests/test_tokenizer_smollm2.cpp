// SmolLM2-135M-Instruct's tokenizer, read from its GGUF (scripts/get_models.sh;
// $SGRT_SMOLLM2_GGUF or ${SGRT_CACHE:-~/.cache/sgrt}/SmolLM2-135M-Instruct.Q4_1.gguf),
// against tests/data/tokenizer_reference.txt, written by
// scripts/make_tokenizer_reference.py with Hugging Face `tokenizers` built from
// the same file: every string must encode to the same ids and decode back,
// the chat prompts must render as transformers' apply_chat_template does and
// encode to the same ids. Also: GGUF files without a tokenizer, or with one
// not supported, are refused by name.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "harness.h"
#include "model_files.h"
#include "sgrt/chat_template.h"
#include "sgrt/gguf.h"
#include "sgrt/tokenizer_gguf.h"

using namespace sgrt;

namespace {

using Ids = std::vector<int32_t>;

std::string decode(const Tokenizer& t, const Ids& ids) {
  std::string out;
  REQUIRE(t.decode(ids, &out).ok());
  return out;
}

std::string unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return s;
}

Ids parse_ids(std::istringstream& line) {
  Ids ids;
  for (int32_t id; line >> id;) ids.push_back(id);
  return ids;
}

// The dump (format in scripts/make_tokenizer_reference.py).
struct Reference {
  struct Case {
    std::string text, decoded;  // decoded: the reference's decode of the ids (text unless bytes were dropped)
    Ids ids;
  };
  struct Chat {
    std::vector<ChatMessage> messages;
    bool generation_prompt = false;
    std::string text;
    Ids ids;
  };
  struct Decode {
    Ids ids;
    std::string text;
  };
  std::vector<Case> cases;
  std::vector<Chat> chats;
  std::vector<Decode> decodes;
};

Reference read_reference() {
  std::ifstream f(SGRT_SOURCE_DIR "/tests/data/tokenizer_reference.txt");
  REQUIRE(f.good());
  Reference ref;
  enum { kNone, kCase, kChat, kDecode } last = kNone;
  for (std::string raw; std::getline(f, raw);) {
    std::istringstream line(raw);
    std::string tag, a, b;
    line >> tag;
    if (tag == "case") {
      line >> a;
      ref.cases.push_back({unhex(a), unhex(a), {}});
      last = kCase;
    } else if (tag == "decoded") {
      line >> a;
      ref.cases.back().decoded = unhex(a);
    } else if (tag == "chat") {
      int n, gen;
      line >> n >> gen;
      ref.chats.push_back({{}, gen != 0, {}, {}});
      last = kChat;
    } else if (tag == "msg") {
      line >> a >> b;
      ref.chats.back().messages.push_back({unhex(a), unhex(b)});
    } else if (tag == "decode") {
      ref.decodes.push_back({parse_ids(line), {}});
      last = kDecode;
    } else if (tag == "text") {
      line >> a;
      (last == kChat ? ref.chats.back().text : ref.decodes.back().text) = unhex(a);
    } else if (tag == "ids") {
      (last == kChat ? ref.chats.back().ids : ref.cases.back().ids) = parse_ids(line);
    }
  }
  return ref;
}

}  // namespace

TEST_CASE("SmolLM2: ids, decoding and chat prompts equal the reference") {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) {
    MESSAGE(std::string(test::kNoSmollm2));  // as a string: doctest prints a bare const char* const as a pointer
    return;
  }
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
  Status st = GgufFile::open(path, &gguf);
  if (st.ok()) st = tokenizer_from_gguf(*gguf, &tok);
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(tok->vocab_size() == 49152);
  CHECK(tok->bos() == 1);
  CHECK(tok->eos() == 2);
  const Reference ref = read_reference();
  REQUIRE(ref.cases.size() >= 200);

  size_t identical = 0;
  for (const auto& c : ref.cases) {
    INFO("text: '" << c.text << "'");
    const Ids ids = tok->encode(c.text);
    CHECK(ids == c.ids);
    identical += ids == c.ids;
    // Exact bytes back; where the vocabulary lacked some bytes, what the
    // reference's lossy decode shows.
    const std::string bytes = decode(*tok, ids);
    if (c.decoded == c.text) CHECK(bytes == c.text);
    CHECK(utf8_replace_invalid(bytes) == c.decoded);
  }
  MESSAGE(identical << " of " << ref.cases.size() << " strings encode to the reference ids");

  ChatTemplate chat;
  REQUIRE(ChatTemplate::parse(tok->chat_template(), &chat).ok());
  REQUIRE(ref.chats.size() >= 5);
  for (const auto& c : ref.chats) {
    const std::string text = chat.render(c.messages, c.generation_prompt);
    CHECK(text == c.text);
    CHECK(tok->encode(text) == c.ids);
  }

  REQUIRE(!ref.decodes.empty());
  for (const auto& d : ref.decodes) CHECK(utf8_replace_invalid(decode(*tok, d.ids)) == d.text);
}

TEST_CASE("a GGUF without tokenizer metadata is refused, naming the file and the key") {
  const std::string path = SGRT_SOURCE_DIR "/tests/data/gguf/tiny_q8_0.gguf";
  std::unique_ptr<GgufFile> gguf;
  REQUIRE(GgufFile::open(path, &gguf).ok());
  std::unique_ptr<Tokenizer> tok;
  const Status st = tokenizer_from_gguf(*gguf, &tok);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message() == path + ": no metadata key 'tokenizer.ggml.model'");
}

namespace {

// A GGUF v3 file with no tensors and string metadata only, written from the
// format's definition (little endian: "GGUF", u32 version, u64 tensor count,
// u64 kv count, then per kv: u64 length + key, u32 type 8 (string), u64
// length + value).
std::string gguf_with_strings(const std::vector<std::pair<std::string, std::string>>& kvs) {
  std::string f = "GGUF";
  const auto put = [&f](auto v) { f.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint32_t{3});
  put(uint64_t{0});
  put(uint64_t(kvs.size()));
  for (const auto& [key, value] : kvs) {
    put(uint64_t(key.size()));
    f += key;
    put(uint32_t{8});
    put(uint64_t(value.size()));
    f += value;
  }
  f.append((32 - f.size() % 32) % 32, '\0');  // the data section starts aligned
  return f;
}

}  // namespace

TEST_CASE("a GGUF of another tokenizer model or pre-tokenizer is refused by name") {
  for (const auto& [model, pre, expected] :
       {std::tuple{"llama", "default", ": tokenizer.ggml.model 'llama' not supported (known: gpt2)"},
        std::tuple{"gpt2", "qwen2", ": tokenizer.ggml.pre 'qwen2' not supported (known: smollm)"}}) {
    test::TempFile file(".gguf", gguf_with_strings({{"tokenizer.ggml.model", model}, {"tokenizer.ggml.pre", pre}}));
    std::unique_ptr<GgufFile> gguf;
    const Status opened = GgufFile::open(file.path, &gguf);
    INFO(opened.message());
    REQUIRE(opened.ok());
    std::unique_ptr<Tokenizer> tok;
    const Status st = tokenizer_from_gguf(*gguf, &tok);
    CHECK(st.code() == StatusCode::unsupported);
    CHECK(st.message() == file.path + expected);
  }
}
