#include "sgrt/chat_template.h"

namespace sgrt {
namespace {

// The ChatML template, cut where the optional default system message goes.
constexpr std::string_view kLoopStart = "{% for message in messages %}";
constexpr std::string_view kDefaultSystemStart =
    "{% if loop.first and messages[0]['role'] != 'system' %}{{ '";
constexpr std::string_view kDefaultSystemEnd = "' }}{% endif %}";
constexpr std::string_view kMessageAndPrompt =
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

bool consume(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

}  // namespace

Status ChatTemplate::parse(std::string_view jinja, ChatTemplate* out) {
  const auto refuse = [] {
    return Status::Unsupported(
        "chat template not supported (known: ChatML, as SmolLM2-Instruct's, with or without a default system "
        "message)");
  };
  ChatTemplate t;
  std::string_view rest = jinja;
  if (!consume(&rest, kLoopStart)) return refuse();
  if (consume(&rest, kDefaultSystemStart)) {
    // A plain string literal: no quote or escape inside, so Jinja emits it as is.
    const size_t end = rest.find(kDefaultSystemEnd);
    if (end == std::string_view::npos) return refuse();
    const std::string_view block = rest.substr(0, end);
    if (block.find_first_of("'\\") != std::string_view::npos) return refuse();
    t.default_system_ = block;
    rest.remove_prefix(end + kDefaultSystemEnd.size());
  }
  if (rest != kMessageAndPrompt) return refuse();
  *out = std::move(t);
  return Status::Ok();
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && !default_system_.empty() && messages[0].role != "system") text += default_system_;
    text.append("<|im_start|>").append(messages[i].role).append("\n");
    text.append(messages[i].content).append("<|im_end|>\n");
  }
  if (add_generation_prompt) text += "<|im_start|>assistant\n";
  return text;
}

}  // namespace sgrt
