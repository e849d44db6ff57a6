// Chat prompts rendered as the model's own chat template (GGUF
// `tokenizer.chat_template`, Jinja) does, for the common case. No Jinja
// engine: the template text is matched against the ChatML templates known
// here, and any other is refused by name rather than rendered wrong.
//
// Known: ChatML (each message as "<|im_start|>ROLE\nCONTENT<|im_end|>\n", the
// generation prompt "<|im_start|>assistant\n"), with or without a default
// system message inserted when the first message is not a system one
// (SmolLM2-Instruct's template: "You are a helpful AI assistant named SmolLM,
// trained by Hugging Face").
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "sgrt/status.h"

namespace sgrt {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // Recognizes the template text; Unsupported for any other template.
  static Status parse(std::string_view jinja, ChatTemplate* out);
  // The prompt text; add_generation_prompt opens the assistant's turn.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // The text added before the first message when it is not a system one
  // (the whole "<|im_start|>system\n...<|im_end|>\n" block; "" for none).
  const std::string& default_system() const { return default_system_; }

 private:
  std::string default_system_;
};

}  // namespace sgrt
