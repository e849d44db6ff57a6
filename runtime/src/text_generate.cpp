#include "sgrt/text_generate.h"

#include <algorithm>

#include "sgrt/chat_template.h"

namespace sgrt {
namespace {

// The length of the longest prefix of `s` that does not end inside a UTF-8
// sequence: a token may hold half a character, the next one the rest.
size_t whole_chars(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

}  // namespace

Status prompt_ids(const Tokenizer& tok, std::string_view text, const PromptOptions& o, const std::string& source,
                  std::vector<int32_t>* ids) {
  std::string rendered(text);
  if (o.chat) {
    ChatTemplate ct;
    SG_TRY(ChatTemplate::parse(tok.chat_template(), &ct).with_context(source));
    std::vector<ChatMessage> turns;
    if (o.system) turns.push_back({"system", o.system});
    turns.push_back({"user", rendered});
    rendered = ct.render(turns, true);
  }
  ids->clear();
  if (tok.add_bos()) ids->push_back(tok.bos());
  std::vector<int32_t> body = tok.encode(rendered);
  ids->insert(ids->end(), body.begin(), body.end());
  if (ids->empty()) return Status::Invalid("the prompt is empty");
  return Status::Ok();
}

Status generate_text(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt, int64_t max_new,
                     const SamplingOptions& o, const std::function<void(std::string_view)>& on_text, GenerateStats* stats) {
  std::vector<int32_t> out;  // every new id but EOS, decoded whole each time
  std::string text;
  size_t shown = 0;
  auto show = [&](size_t end) {
    if (end <= shown) return;
    on_text(utf8_replace_invalid(std::string_view(text).substr(shown, end - shown)));
    shown = end;
  };
  auto emit = [&](int32_t id) -> Status {
    if (id == tok.eos()) return Status::Ok();
    out.push_back(id);
    SG_TRY(tok.decode(out, &text));
    show(whole_chars(text));
    return Status::Ok();
  };
  SG_TRY(generate(s, prompt, max_new, tok.eos(), o, emit, stats));
  show(text.size());  // a character left incomplete at the end
  return Status::Ok();
}

}  // namespace sgrt
