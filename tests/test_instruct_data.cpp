// The JSON-lines instruction data set and the masked loss:
//  * ids, targets, mask and valid against the ChatML text written out here by hand
//    and a byte-level tokenizer (id = byte, <|im_start|> 256, <|im_end|> 257),
//    so the expected ids need neither the chat template code nor BPE;
//  * truncation to the block, EOS padding under mask 0, the held-out tenth;
//  * bad lines: path:line and the reason;
//  * nn.masked_cross_entropy and its gradient against the definition
//    (mean over mask = 1 rows of lse(z) - z[label]) computed here in double;
//  * models/llama.lua's instruct loss zeroes the padding rows without changing
//    a bit of the losses or the trained parameters;
//  * sgrt train on a bad line exits 2 naming path:line (with SmolLM2's GGUF).
#include <cmath>
#include <fstream>

#include "harness.h"
#include "model_files.h"
#include "sgrt/dataset.h"
#include "tiny_tokenizer.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

constexpr int32_t kStart = 256, kEnd = 257, kEos = 257;

std::unique_ptr<Tokenizer> chatml_tokenizer() {
  TokenizerSpec spec = test::tiny_spec({"<|im_start|>", "<|im_end|>"}, {});
  spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::normal));
  spec.token_types[kStart] = spec.token_types[kEnd] = static_cast<int32_t>(TokenType::control);
  spec.eos = kEos;
  spec.chat_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nS<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  return test::make(std::move(spec));
}

// Text with "<s>" for <|im_start|> and "<e>" for <|im_end|> as ids, each with `trained`.
void append(std::vector<int32_t>* ids, std::vector<uint8_t>* trained, const std::string& text, bool t) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "<s>") == 0 || text.compare(i, 3, "<e>") == 0) {
      ids->push_back(text[i + 1] == 's' ? kStart : kEnd);
      i += 2;
    } else {
      ids->push_back(static_cast<unsigned char>(text[i]));
    }
    trained->push_back(t);
  }
}

std::shared_ptr<const Model> instruct_model(int block, int batch = 1) {
  std::shared_ptr<const Model> m;
  std::string b = std::to_string(batch), t = std::to_string(block);
  Status st = test::compile_lua(R"(
local sg = require "sg"
local tokens = sg.input("tokens", {)" + b + ", " + t + R"(}, "i32")
local targets = sg.input("targets", {)" + b + ", " + t + R"(}, "i32")
local mask = sg.input("mask", {)" + b + ", " + t + R"(})
local valid = sg.input("valid", {)" + b + ", " + t + R"(})
local emb = sg.param("emb", {258, 4}, {"normal", 0, 1})
local logits = sg.matmul(sg.embedding(emb, tokens), emb, {trans_b = true})
local n = )" + b + " * " + t + R"(
sg.loss(sg.nn.masked_cross_entropy(sg.reshape(logits, {n, 258}), sg.reshape(targets, {n}), sg.reshape(mask, {n})))
sg.data.instruct{ tokens = tokens, targets = targets, mask = mask, valid = valid }
sg.optimizer.sgd{ lr = 0.1 }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

Status open(const std::string& jsonl, int block, std::unique_ptr<Dataset>* out, std::string* path = nullptr) {
  static int counter = 0;
  std::string p = "/tmp/sgrt_instruct_" + std::to_string(getpid()) + "_" + std::to_string(++counter) + ".jsonl";
  std::ofstream(p) << jsonl;
  if (path) *path = p;
  auto tok = chatml_tokenizer();
  auto m = instruct_model(block);
  Status st = open_dataset(*m, p, out, tok.get());
  std::remove(p.c_str());
  return st;
}

template <class T>
std::vector<T> gather(const Dataset& d, Split s, int64_t index, const std::string& field, int block) {
  auto m = instruct_model(block);
  std::vector<T> v(static_cast<size_t>(block));
  const TensorInfo& t = m->tensors()[m->find_tensor(field)];
  Status st = d.gather(s, &index, 1, field, t, v.data());
  REQUIRE_MESSAGE(st.ok(), st.message());
  return v;
}

}  // namespace

TEST_CASE("prompt/response and messages lines: ids, shifted targets, the mask on response tokens") {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  // {"prompt": "Hi", "response": "Yo \u00e9"}: the default system message, the
  // user turn and the assistant's opening are context; "Yo é<|im_end|>\n" is trained.
  append(&ids, &trained, "<s>system\nS<e>\n<s>user\nHi<e>\n<s>assistant\n", false);
  append(&ids, &trained, "Yo \xc3\xa9<e>\n", true);
  const int block = 60;  // room for padding after both examples
  std::string lines;
  for (int i = 0; i < 9; ++i) lines += "{\"prompt\": \"Hi\", \"id\": [1, {\"x\": null}], \"response\": \"Yo \\u00e9\"}\n";
  lines += "\n";  // blank lines are skipped
  lines += R"({"messages": [{"role": "system", "content": "Be"}, {"role": "user", "content": "A"},)"
           R"( {"content": "B", "role": "assistant"}, {"role": "user", "content": "C"}, {"role": "assistant", "content": "D"}]})"
           "\n";
  std::unique_ptr<Dataset> d;
  Status st = open(lines, block, &d);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(d->size(Split::train) == 9);
  CHECK(d->size(Split::test) == 1);  // the last tenth

  auto tokens = gather<int32_t>(*d, Split::train, 4, "tokens", block);
  auto targets = gather<int32_t>(*d, Split::train, 4, "targets", block);
  auto mask = gather<float>(*d, Split::train, 4, "mask", block);
  auto valid = gather<float>(*d, Split::train, 4, "valid", block);
  for (int j = 0; j < block; ++j) {
    CAPTURE(j);
    const size_t k = static_cast<size_t>(j) + 1;
    CHECK(tokens[j] == (static_cast<size_t>(j) < ids.size() ? ids[j] : kEos));
    CHECK(valid[j] == (static_cast<size_t>(j) < ids.size() ? 1.f : 0.f));
    CHECK(targets[j] == (k < ids.size() ? ids[k] : kEos));
    CHECK(mask[j] == (k < ids.size() && trained[k] ? 1.f : 0.f));
  }

  // Multi-turn: both assistant turns are trained, the rest is context.
  ids.clear();
  trained.clear();
  append(&ids, &trained, "<s>system\nBe<e>\n<s>user\nA<e>\n<s>assistant\n", false);
  append(&ids, &trained, "B<e>\n", true);
  append(&ids, &trained, "<s>user\nC<e>\n<s>assistant\n", false);
  append(&ids, &trained, "D<e>\n", true);
  REQUIRE(static_cast<int>(ids.size()) <= block + 1);
  targets = gather<int32_t>(*d, Split::test, 0, "targets", block);
  mask = gather<float>(*d, Split::test, 0, "mask", block);
  for (int j = 0; j < block; ++j) {
    CAPTURE(j);
    const size_t k = static_cast<size_t>(j) + 1;
    CHECK(targets[j] == (k < ids.size() ? ids[k] : kEos));
    CHECK(mask[j] == (k < ids.size() && trained[k] ? 1.f : 0.f));
  }
}

TEST_CASE("an example longer than the block is cut to block + 1 ids") {
  std::string line = "{\"prompt\": \"Hi\", \"response\": \"" + std::string(40, 'x') + "\"}\n";
  std::unique_ptr<Dataset> d;
  const int block = 40;  // the context is 32 ids: targets 1..40 hold 9 response ids
  Status st = open(line + line, block, &d);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto mask = gather<float>(*d, Split::train, 0, "mask", block);
  auto targets = gather<int32_t>(*d, Split::train, 0, "targets", block);
  int trained = 0;
  for (float v : mask) trained += v == 1.f;
  CHECK(trained == block + 1 - 32);
  CHECK(targets[block - 1] == 'x');
}

TEST_CASE("bad lines are refused with path:line and the reason") {
  const std::string ok = "{\"prompt\": \"a\", \"response\": \"b\"}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"{\"prompt\": \"a\", \"response\": \"b\"", ":3: expected '}'"},
      {"[1, 2]", ":3: not a JSON object"},
      {"{\"prompt\": \"a\"}", ":3: needs \"prompt\" and \"response\" (or \"messages\")"},
      {"{\"prompt\": 3, \"response\": \"b\"}", ":3: \"prompt\" must be a string"},
      {"{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}", ":3: unknown role 'bot' (system, user, assistant)"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", ":3: no assistant message: nothing to train on"},
      {"{\"messages\": [], \"prompt\": \"a\", \"response\": \"b\"}", ":3: give either \"messages\" or \"prompt\"/\"response\""},
      {"{\"prompt\": \"a\", \"response\": \"\\ud800\"}", ":3: \"response\" must be a string (unpaired surrogate"},
      {"{\"prompt\": \"" + std::string(60, 'p') + "\", \"response\": \"b\"}", ":3: no response token fits in the block of 40"},
  };
  for (auto& [line, want] : cases) {
    CAPTURE(line);
    std::unique_ptr<Dataset> d;
    std::string path;
    Status st = open(ok + ok + line + "\n" + ok, 40, &d, &path);
    CHECK_MESSAGE(st.message().find(path + want) != std::string::npos, st.message());
  }
  std::unique_ptr<Dataset> d;
  CHECK(open(ok, 40, &d).message().find("needs at least 2 examples") != std::string::npos);
  auto m = instruct_model(8);
  CHECK(open_dataset(*m, "/tmp/x.jsonl", &d).message().find("needs the model's tokenizer") != std::string::npos);
}

TEST_CASE("nn.masked_cross_entropy and its gradient match the definition") {
  // Rows of mask 0 hold NaN logits and a label out of range: the op never reads
  // them and gives them a gradient of exactly 0. Row 5 weighs 2.5.
  const int n = 6, c = 5;
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
local sg = require "sg"
local z = sg.param("z", {6, 5})
local y = sg.input("y", {6}, "i32")
local mask = sg.input("mask", {6})
sg.loss(sg.nn.masked_cross_entropy(z, y, mask))
sg.optimizer.sgd{ lr = 1e-30, momentum = 0.0 }
)", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = test::open_session(m);
  std::vector<float> z(n * c);
  for (int i = 0; i < n * c; ++i) z[i] = std::sin(1.7f * i) * 3.f;
  for (int j = 0; j < c; ++j) z[1 * c + j] = std::nanf("");
  const std::vector<int32_t> y{0, 4, 2, 2, -7, 3};
  const std::vector<float> mask{1, 0, 1, 1, 0, 2.5f};
  test::write_vec(*s, "z", z);
  test::write_vec(*s, "y", y);
  test::write_vec(*s, "mask", mask);
  double want = 0, count = 0;
  std::vector<double> grad(n * c, 0.0);
  for (int r = 0; r < n; ++r) {
    if (mask[r] == 0) continue;
    double mx = -1e30, sum = 0;
    for (int j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(z[r * c + j]));
    for (int j = 0; j < c; ++j) sum += std::exp(z[r * c + j] - mx);
    const double lse = mx + std::log(sum);
    want += mask[r] * (lse - z[r * c + y[r]]);
    for (int j = 0; j < c; ++j) grad[r * c + j] = mask[r] * (std::exp(z[r * c + j] - lse) - (j == y[r] ? 1.0 : 0.0));
    count += mask[r];
  }
  want /= count;
  CHECK(test::loss_of(*s) == doctest::Approx(want).epsilon(1e-6));
  int gid = -1;
  for (const OpInfoLoaded& op : m->programs()[m->find_program("train_step")].ops)
    if (op.code == OpCode::SgdUpdate) gid = op.in[1];
  REQUIRE(gid >= 0);
  std::vector<float> g(n * c, 7.f);  // what the arena held before: the masked rows must be written
  REQUIRE(s->write(gid, g.data(), g.size() * sizeof(float)).ok());
  test::run(*s, "train_step");
  REQUIRE(s->read(gid, g.data(), g.size() * sizeof(float)).ok());
  for (int i = 0; i < n * c; ++i) {
    CAPTURE(i);
    if (mask[i / c] == 0) CHECK(g[i] == 0.f);
    else CHECK(g[i] == doctest::Approx(grad[i] / count).epsilon(1e-5).scale(1e-6));
  }
  // A label out of range in a row that counts fails the run, naming the op.
  test::write_vec(*s, "y", std::vector<int32_t>{0, 4, 2, 5, 0, 3});
  int eval = -1;
  REQUIRE(s->find_program("eval", &eval).ok());
  Status bad = s->run(eval);
  CHECK_MESSAGE(bad.message().find("masked_cross_entropy: label 5 at row 3 is outside [0, 5)") != std::string::npos,
                bad.message());
}

TEST_CASE("models/llama.lua (instruct): zeroing the padding rows changes no bit") {
  // The loss's forward pass zeroes the padding positions' rows (valid = 0) so the
  // CPU's products skip them; with valid all ones nothing is zeroed, as before.
  // Three LoRA steps (dropout on, so the adapters' inputs are masked too) must give
  // the same losses and parameters to the bit.
  const int block = 96, batch = 2;  // conversations of 42-56 byte tokens, then padding
  auto m = test::compile_model_file(
      "models/llama.lua", {{"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "4"}, {"n_kv_head", "2"}, {"ffn", "48"},
                           {"vocab", "258"}, {"block", std::to_string(block)}, {"batch", std::to_string(batch)},
                           {"context", std::to_string(block)}, {"lora_rank", "4"}, {"lora_dropout", "0.1"},
                           {"instruct", "true"}});
  std::string lines;
  for (const char* r : {"Yo", "A longer answer", "Mm", "Hey there", "Fine", "Ok", "Sure", "No"})
    lines += std::string("{\"prompt\": \"Hi\", \"response\": \"") + r + "\"}\n";
  const std::string path = "/tmp/sgrt_instruct_valid_" + std::to_string(getpid()) + ".jsonl";
  std::ofstream(path) << lines;
  auto tok = chatml_tokenizer();
  std::unique_ptr<Dataset> d;
  Status st = open_dataset(*m, path, &d, tok.get());
  std::remove(path.c_str());
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto field = [&](const std::string& name, int64_t first) {
    const TensorInfo& t = m->tensors()[m->find_tensor(name)];
    std::vector<uint8_t> v(t.bytes);
    const int64_t idx[] = {first, first + 1};
    const Status gs = d->gather(Split::train, idx, batch, name, t, v.data());
    REQUIRE_MESSAGE(gs.ok(), gs.message());
    return v;
  };
  std::vector<float> losses[2];
  std::vector<std::vector<float>> params[2];
  for (int plain = 0; plain < 2; ++plain) {
    auto s = test::open_session(m);
    for (int64_t step = 0; step < 3; ++step) {
      for (const char* name : {"tokens", "targets", "mask", "valid"}) {
        std::vector<uint8_t> v = field(name, 2 * step);
        if (plain && std::string(name) == "valid") {
          const float one = 1.0f;
          for (size_t i = 0; i < v.size(); i += 4) std::memcpy(&v[i], &one, 4);
        }
        test::write_vec(*s, name, v);
      }
      if (!plain && step == 0) {  // the batch has padding for the test to mean anything
        const std::vector<uint8_t> v = field("valid", 0);
        float zeros = 0, x;
        for (size_t i = 0; i < v.size(); i += 4) std::memcpy(&x, &v[i], 4), zeros += x == 0.f;
        CHECK(zeros > block);
      }
      losses[plain].push_back(test::loss_of(*s, "train_step"));
    }
    for (const TensorInfo& t : m->tensors())
      if (t.role == Role::param && t.name.find("lora") != std::string::npos) params[plain].push_back(test::param_f32(*s, t.name));
  }
  CHECK(losses[0] == losses[1]);
  REQUIRE(params[0].size() == 28);  // A and B of the 7 projections of 2 layers
  for (size_t i = 0; i < params[0].size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(params[0][i].data(), params[1][i].data(), params[0][i].size() * 4) == 0);
  }
}

TEST_CASE("sgrt train: a bad JSON line exits 2 naming path:line") {
  const std::string gguf = test::smollm2_gguf();
  if (gguf.empty()) { MESSAGE(test::kNoSmollm2); return; }
  test::TempDir dir;
  const std::string data = dir.path + "/bad.jsonl";
  std::ofstream(data) << "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"a\" \"response\": \"b\"}\n";
  test::ToolResult r = test::run_tool({"train", "models/llama.lua", "--init-weights", gguf, "--data", data, "--set",
                                       "lora_rank=2", "--set", "instruct=true", "--set", "block=32", "--steps", "1"});
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find(data + ":2: expected '}'") != std::string::npos, r.err);
}
