// The JSON-lines instruction data set (see dataset.h, docs/lora.md).
#include <fstream>

#include "json_reader.h"
#include "sg_generated.h"
#include "sgrt/chat_template.h"
#include "sgrt/dataset.h"

namespace sgrt {
namespace {

// One example as the model reads it: ids and, per id, whether it is a trained
// (response) token. Shifted by one into tokens / targets / mask when gathered.
struct Example {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
};

// {"prompt": P, "response": R, "system": S?} or {"messages": [{"role": ..., "content": ...}, ...]};
// other keys are ignored. *why names what is wrong.
bool parse_line(std::string_view line, std::vector<ChatMessage>* msgs, std::string* why) {
  JsonReader j(line);
  std::string prompt, response, system, key;
  bool has_prompt = false, has_response = false, has_system = false, has_messages = false;
  auto fail = [&](const std::string& w) { *why = j.error().empty() ? w : w + " (" + j.error() + ")"; return false; };
  if (!j.eat('{')) return fail("not a JSON object");
  if (!j.eat('}')) {
    do {
      if (!j.string(&key) || !j.eat(':')) return fail("expected \"key\": value");
      if (key == "prompt" || key == "response" || key == "system") {
        std::string* dst = key == "prompt" ? &prompt : key == "response" ? &response : &system;
        if (!j.string(dst)) return fail("\"" + key + "\" must be a string");
        (key == "prompt" ? has_prompt : key == "response" ? has_response : has_system) = true;
      } else if (key == "messages") {
        has_messages = true;
        if (!j.eat('[')) return fail("\"messages\" must be an array");
        if (!j.eat(']')) {
          do {
            ChatMessage m;
            bool role = false, content = false;
            if (!j.eat('{')) return fail("each message must be an object");
            do {
              if (!j.string(&key) || !j.eat(':')) return fail("expected \"key\": value in a message");
              if (key == "role") role = j.string(&m.role);
              else if (key == "content") content = j.string(&m.content);
              else if (!j.skip_value()) return fail("invalid JSON");
              if ((key == "role" && !role) || (key == "content" && !content)) return fail("\"" + key + "\" must be a string");
            } while (j.eat(','));
            if (!j.eat('}')) return fail("expected '}' after a message");
            if (!role || !content) return fail("a message needs \"role\" and \"content\"");
            if (m.role != "system" && m.role != "user" && m.role != "assistant")
              return fail("unknown role '" + m.role + "' (system, user, assistant)");
            msgs->push_back(std::move(m));
          } while (j.eat(','));
          if (!j.eat(']')) return fail("expected ']' after the messages");
        }
      } else if (!j.skip_value()) {
        return fail("invalid JSON");
      }
    } while (j.eat(','));
    if (!j.eat('}')) return fail("expected '}'");
  }
  if (!j.at_end()) return fail("text after the JSON object");
  if (has_messages && (has_prompt || has_response)) return fail("give either \"messages\" or \"prompt\"/\"response\", not both");
  if (!has_messages) {
    if (!has_prompt || !has_response) return fail("needs \"prompt\" and \"response\" (or \"messages\")");
    if (has_system) msgs->push_back({"system", system});
    msgs->push_back({"user", prompt});
    msgs->push_back({"assistant", response});
  }
  bool any = false;
  for (const ChatMessage& m : *msgs) any |= m.role == "assistant";
  return any || fail("no assistant message: nothing to train on");
}

// The conversation as the chat template renders it, each piece tokenized on
// its own so the trained span starts exactly at the assistant's content: an
// assistant turn's opening (the generation prompt) is context, its content and
// closing are trained; every other message is context.
// False when a rendering does not extend the one before (a conversation that
// opens with an assistant message: the default system message moves).
bool tokenize(const std::vector<ChatMessage>& msgs, const ChatTemplate& chat, const Tokenizer& tok, Example* out) {
  Example& e = *out;
  auto extends = [](const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; };
  auto add = [&](std::string_view text, bool trained) {
    for (int32_t id : tok.encode(text)) {
      e.ids.push_back(id);
      e.trained.push_back(trained);
    }
  };
  std::string done;  // the rendering of the messages so far
  for (size_t i = 0; i < msgs.size(); ++i) {
    std::span<const ChatMessage> upto(msgs.data(), i + 1);
    std::string full = chat.render(upto, false);
    if (!extends(full, done)) return false;
    if (msgs[i].role == "assistant") {
      std::string opened = chat.render(upto.first(i), true);
      if (!extends(opened, done) || !extends(full, opened)) return false;
      add(std::string_view(opened).substr(done.size()), false);
      add(std::string_view(full).substr(opened.size()), true);
    } else {
      add(std::string_view(full).substr(done.size()), false);
    }
    done = std::move(full);
  }
  return true;
}

class InstructDataset final : public Dataset {
 public:
  InstructDataset(std::vector<Example> examples, int64_t block, int32_t pad) : block_(block), pad_(pad) {
    int64_t n = static_cast<int64_t>(examples.size());
    split_ = n - std::max<int64_t>(1, n / 10);  // the last tenth (at least one) is held out
    examples_ = std::move(examples);
  }

  int64_t size(Split s) const override { return s == Split::train ? split_ : static_cast<int64_t>(examples_.size()) - split_; }

  Status check_field(const std::string& field, const TensorInfo& t) const override {
    if (field != "tokens" && field != "targets" && field != "mask" && field != "valid")
      return Status::Invalid("the instruct data set has no field '" + field + "'");
    DType want = field == "mask" || field == "valid" ? DType::f32 : DType::i32;
    if (t.type.dtype != want || t.type.shape.size() != 2 || t.type.shape[1] != block_)
      return Status::Invalid("input " + t.name + " " + type_str(t.type) + " cannot hold instruction " + field + " (" +
                             dtype_name(want) + " [batch, " + std::to_string(block_) + "])");
    return Status::Ok();
  }

  // tokens[j] = ids[j], targets[j] = ids[j + 1], mask[j] = 1 where ids[j + 1]
  // is trained; past the example's end: pad ids (the tokenizer's EOS) under mask 0.
  // valid[j] = 1 where tokens[j] is the example's, 0 on the padding.
  Status gather(Split s, const int64_t* idx, int64_t n, const std::string& field, const TensorInfo& t,
                void* dst) const override {
    for (int64_t r = 0; r < n; ++r) {
      if (idx[r] < 0 || idx[r] >= size(s)) return Status::Runtime("instruction example index out of range");
      const Example& e = examples_[static_cast<size_t>((s == Split::train ? 0 : split_) + idx[r])];
      const int64_t len = static_cast<int64_t>(e.ids.size());
      for (int64_t j = 0; j < block_; ++j) {
        const int64_t k = field == "tokens" || field == "valid" ? j : j + 1;
        if (field == "mask") static_cast<float*>(dst)[r * block_ + j] = k < len && e.trained[k] ? 1.f : 0.f;
        else if (field == "valid") static_cast<float*>(dst)[r * block_ + j] = k < len ? 1.f : 0.f;
        else static_cast<int32_t*>(dst)[r * block_ + j] = k < len ? e.ids[k] : pad_;
      }
    }
    return Status::Ok();
  }

 private:
  std::vector<Example> examples_;
  int64_t block_, split_ = 0;
  int32_t pad_;
};

}  // namespace

Status open_instruct_dataset(const std::string& path, const Model& model, const Tokenizer* tok,
                             std::unique_ptr<Dataset>* out) {
  if (!tok)
    return Status::Invalid(model.label() + ": the instruct data set needs the model's tokenizer (--init-weights FILE.gguf)");
  ChatTemplate chat;
  SG_TRY(ChatTemplate::parse(tok->chat_template(), &chat).with_context("the tokenizer's chat template"));
  const sg::DataBinding* d = model.root().data();
  if (!d->fields() || d->fields()->size() == 0) return Status::Invalid(model.label() + ": the instruct data set binds no inputs");
  const TensorInfo& t = model.tensors()[d->fields()->Get(0)->tensor()];
  if (t.type.shape.size() != 2) return Status::Invalid(model.label() + ": instruct inputs must be [batch, block], got " + type_str(t.type));
  const int64_t block = t.type.shape[1];
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Io(path + ": cannot open the instruction data (JSON lines)");
  std::vector<Example> examples;
  std::string line, why;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<ChatMessage> msgs;
    const std::string where = path + ":" + std::to_string(no) + ": ";
    if (!parse_line(line, &msgs, &why)) return Status::Invalid(where + why);
    Example e;
    if (!tokenize(msgs, chat, *tok, &e))
      return Status::Invalid(where + "the chat template cannot split this conversation into turns (does it open with an assistant message?)");
    // The model sees block + 1 ids at most (inputs and targets shifted by one).
    if (static_cast<int64_t>(e.ids.size()) > block + 1) {
      e.ids.resize(static_cast<size_t>(block + 1));
      e.trained.resize(e.ids.size());
    }
    bool any = false;
    for (size_t k = 1; k < e.trained.size(); ++k) any |= e.trained[k] != 0;
    if (!any)
      return Status::Invalid(where + "no response token fits in the block of " + std::to_string(block) +
                             " tokens (shorten the prompt or --set block=N)");
    examples.push_back(std::move(e));
  }
  if (in.bad()) return Status::Io(path + ": read error");
  if (examples.size() < 2)
    return Status::Invalid(path + ": needs at least 2 examples (the last tenth, at least one, is held out), has " +
                           std::to_string(examples.size()));
  *out = std::make_unique<InstructDataset>(std::move(examples), block, tok->eos() >= 0 ? tok->eos() : 0);
  return Status::Ok();
}

}  // namespace sgrt
