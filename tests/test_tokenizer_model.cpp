// A tokenizer carried by an exported .sg (sgrt export --tokenizer FILE.gguf,
// sgrt/tokenizer_model.h), and the fine-tune-to-chat path it completes:
//  * stored by export_model and read back by tokenizer_from_model, every field
//    equals the spec it came from and the ids of a text are the original's;
//  * a tokenizer whose vocabulary is not the logits', a model without logits,
//    a file without a tokenizer and one whose stored tokenizer is inconsistent
//    are refused, naming the model;
//  * through the command line, a LoRA checkpoint of a tiny llama (batch 2,
//    block 8) exported with --merge --tokenizer (a GGUF built here) --set
//    batch=1 --set block=48 --set kv_cache=true, then `sgrt run chat.sg`:
//    the text is the greedy continuation of the unmerged model with the same
//    weights (sgrt::generate, decoded here), with and without --chat; with
//    --quantize fp8 the file keeps its tokenizer; the C API's sgrt_generate and
//    examples/edge/chat.c give the same text;
//  * `sgrt train --adapter A.safetensors` (A from export-weights --trained)
//    starts a new run from a run's adapters: at lr 1e-30 its held-out loss is
//    the first run's and its adapters come out byte for byte as they went in;
//    the same from its PEFT export (export-weights --peft); export-weights
//    --peft / --merge and export --merge of the GGUF's model with --adapter
//    (no checkpoint) give the checkpoint's exports (the same bytes, text),
//    and eval of it the first run's held-out loss;
//  * models/llama.lua's --set lr_schedule=cosine: the logged lr of each step
//    is the schedule's definition (linear warmup, cosine to min_lr_ratio);
//  * bad input exits 2 with one line and writes nothing: --tokenizer not a
//    GGUF, a --set that changes the training step, a prompt past the block, a
//    batch-2 export run, --chat on a byte-level model; sgrt_generate's bad
//    options, a prompt past the block and a graph without a tokenizer.
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "gguf_builder.h"
#include "harness.h"
#include "model_files.h"
#include "sg_generated.h"
#include "sgrt/chat_template.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/generate.h"
#include "sgrt/model_file.h"
#include "sgrt/sgrt.h"
#include "sgrt/tokenizer_model.h"
#include "tiny_tokenizer.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

constexpr int32_t kStart = 256, kEnd = 257, kAb = 258, kBos = 259;  // ids after the 256 byte tokens
constexpr int kVocab = 260;

TokenizerSpec chat_spec() {
  TokenizerSpec spec = test::tiny_spec({"<|im_start|>", "<|im_end|>", "ab", "<s>"}, {"a b"});
  spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::normal));
  spec.token_types[kStart] = spec.token_types[kEnd] = spec.token_types[kBos] = static_cast<int32_t>(TokenType::control);
  spec.bos = kBos;
  spec.eos = kEnd;
  spec.add_bos = true;
  spec.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  return spec;
}

// The tiny llama of test_lora_merge.cpp with kVocab tokens; `extra` overrides.
std::map<std::string, std::string> tiny_sets(const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> set = {{"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"},  {"n_kv_head", "1"},
                                            {"ffn", "64"},    {"vocab", std::to_string(kVocab)}, {"block", "8"},
                                            {"batch", "2"},   {"context", "64"}, {"tie", "true"}, {"lora_rank", "2"},
                                            {"lora_alpha", "3"}};
  for (auto& [k, v] : extra) set[k] = v;
  return set;
}

std::shared_ptr<const Model> tiny_llama(const std::map<std::string, std::string>& extra = {}) {
  return test::compile_model_file("models/llama.lua", tiny_sets(extra));
}

// Every param random (B included: the adapters count), the same for every compilation.
void randomize_params(Session& s) {
  for (const TensorInfo& t : s.model().tensors()) {
    if (t.role != Role::param) continue;
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(t.name)));
    std::normal_distribution<float> n(0.0f, t.name.find(".lora_") != std::string::npos ? 0.1f : 0.3f);
    std::vector<float> v(static_cast<size_t>(numel(t.type.shape)));
    for (float& x : v) x = n(rng);
    test::write_vec(s, t.name, v);
  }
}

std::unique_ptr<Model> exported_with(const Session& s, const Tokenizer* tok, Status* st) {
  std::vector<uint8_t> bytes;
  ExportOptions o;
  o.infer_only = true;
  o.tokenizer = tok;
  *st = export_model(s, o, &bytes);
  std::unique_ptr<Model> m;
  if (st->ok()) *st = Model::load_bytes(std::move(bytes), "chat.sg", &m);
  return m;
}

std::string tokenizer_gguf(const TokenizerSpec& spec) {
  test::GgufBuilder b;
  b.str("general.architecture", "llama")
      .str("tokenizer.ggml.model", "gpt2")
      .str("tokenizer.ggml.pre", "smollm")
      .strings("tokenizer.ggml.tokens", spec.tokens)
      .strings("tokenizer.ggml.merges", spec.merges)
      .i32s("tokenizer.ggml.token_type", spec.token_types)
      .u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(spec.bos))
      .u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(spec.eos))
      .boolean("tokenizer.ggml.add_bos_token", spec.add_bos)
      .str("tokenizer.chat_template", spec.chat_template);
  return b.bytes();
}

void append_text(const char* text, size_t len, void* user) { static_cast<std::string*>(user)->append(text, len); }

// stdout of a shell command, *status its wait status.
std::string command_output(const std::string& cmd, int* status) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *status = pclose(p);
  return out;
}

void check_refused(const test::ToolResult& r, const std::string& must) {
  INFO(r.err);
  CHECK(r.exited);
  CHECK(r.code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(must) != std::string::npos);
}

// A pretrained tiny llama as a GGUF: tiny_llama()'s shape in llama.*
// metadata, chat_spec()'s tokenizer, every frozen weight an F32 tensor of
// small random values (the LoRA adapters keep their initializers).
std::string llama_gguf(const test::TempDir& dir) {
  test::GgufBuilder g;
  g.str("general.architecture", "llama")
      .u32("llama.block_count", 2)
      .u32("llama.embedding_length", 32)
      .u32("llama.attention.head_count", 2)
      .u32("llama.attention.head_count_kv", 1)
      .u32("llama.feed_forward_length", 64)
      .u32("llama.context_length", 64)
      .kv("llama.attention.layer_norm_rms_epsilon", GgufValueType::F32, test::le(1e-5f));
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 0.3f);
  uint64_t offset = 0;
  const auto model = tiny_llama();
  for (const TensorInfo& t : model->tensors()) {
    if (t.role != Role::param || t.name.find(".lora_") != std::string::npos) continue;
    g.tensor(t.name, std::vector<uint64_t>(t.type.shape.rbegin(), t.type.shape.rend()), static_cast<uint32_t>(GgufType::F32), offset);
    for (int64_t i = 0; i < numel(t.type.shape); ++i) g.data += test::le(t.name.find("norm") != std::string::npos ? 1.0f : n(rng));
    offset += 4 * static_cast<uint64_t>(numel(t.type.shape));  // whole 32-byte multiples here: aligned
  }
  g.str("tokenizer.ggml.model", "gpt2")
      .str("tokenizer.ggml.pre", "smollm")
      .strings("tokenizer.ggml.tokens", chat_spec().tokens)
      .strings("tokenizer.ggml.merges", chat_spec().merges)
      .i32s("tokenizer.ggml.token_type", chat_spec().token_types)
      .u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(chat_spec().bos))
      .u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(chat_spec().eos))
      .boolean("tokenizer.ggml.add_bos_token", chat_spec().add_bos)
      .str("tokenizer.chat_template", chat_spec().chat_template);
  return dir.file("tiny.gguf", g.bytes());
}

// "test loss X" in a command's output.
double test_loss(const std::string& out) {
  const size_t at = out.find("test loss ");
  REQUIRE_MESSAGE(at != std::string::npos, out);
  return std::stod(out.substr(at + 10));
}

// The checkpoint of a training run of tiny_llama(extra) (batch 2, block 8;
// random weights) with the flags sgrt train records beside it.
void write_checkpoint(const std::string& ck, const CheckpointMeta& meta, const std::map<std::string, std::string>& extra = {}) {
  auto s = test::open_session(tiny_llama(extra));
  randomize_params(*s);
  Status st = save_checkpoint(*s, ck, meta);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::ofstream flags(ck + "/model.flags");
  for (auto& [k, v] : tiny_sets(extra)) flags << "--set " << k << "=" << v << "\n";
}

// The expected text: the unmerged model compiled for generation, the
// checkpoint's weights, sgrt::generate, greedy, decoded as sgrt run prints it.
struct Greedy {
  std::unique_ptr<Session> ref = test::open_session(tiny_llama({{"batch", "1"}, {"block", "48"}, {"kv_cache", "true"}}));
  std::unique_ptr<Tokenizer> tok = test::make(chat_spec());
  Greedy() { randomize_params(*ref); }
  std::string operator()(const std::vector<int32_t>& ids, int64_t n) {
    std::vector<int32_t> out;
    GenerateStats stats;
    Status st = generate(*ref, ids, n, tok->eos(), SamplingOptions{}, [&](int32_t id) {
      if (id != tok->eos()) out.push_back(id);
      return Status::Ok();
    }, &stats);
    REQUIRE_MESSAGE(st.ok(), st.message());
    std::string text;
    REQUIRE(tok->decode(out, &text).ok());
    return utf8_replace_invalid(text) + "\n";
  }
};

}  // namespace

TEST_CASE("a tokenizer stored by export comes back equal, and encodes as the original") {
  auto tok = test::make(chat_spec());
  auto s = test::open_session(tiny_llama());
  Status st;
  std::unique_ptr<Model> m = exported_with(*s, tok.get(), &st);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(has_tokenizer(*m));
  std::unique_ptr<Tokenizer> back;
  st = tokenizer_from_model(*m, &back);
  REQUIRE_MESSAGE(st.ok(), st.message());
  const TokenizerSpec &a = back->spec(), &b = chat_spec();
  CHECK(a.tokens == b.tokens);
  CHECK(a.token_types == b.token_types);
  CHECK(a.merges == b.merges);
  CHECK(a.bos == kBos);
  CHECK(a.eos == kEnd);
  CHECK(a.add_bos);
  CHECK(a.chat_template == b.chat_template);
  CHECK(a.pre == PreTokenizer::smollm);
  const std::string text = "<|im_start|>ab cab<|im_end|>";
  CHECK(back->encode(text) == std::vector<int32_t>{kStart, kAb, ' ', 'c', kAb, kEnd});
  CHECK(back->encode(text) == tok->encode(text));
}

TEST_CASE("a tokenizer is refused for another vocabulary, a model without logits; files without one or with a bad one") {
  auto tok = test::make(chat_spec());
  Status st;
  exported_with(*test::open_session(tiny_llama({{"vocab", "300"}})), tok.get(), &st);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK_MESSAGE(st.message().find("the tokenizer has 260 tokens, the model's logits f32[2, 8, 300]") != std::string::npos,
                st.message());
  std::shared_ptr<const Model> no_logits;  // a byte-level model declaring no output
  st = test::compile_lua(R"(
local sg = require "sg"
local x = sg.input("tokens", {2, 8}, "i32")
local y = sg.input("targets", {2, 8}, "i32")
local e = sg.param("embd", {260, 16}, {"normal", 0, 0.5})
local w = sg.param("head.w", {260, 16}, {"normal", 0, 0.2})
local h = sg.reshape(sg.embedding(e, x), {16, 16})
sg.loss(sg.softmax_cross_entropy(sg.matmul(h, w, {trans_b = true}), sg.reshape(y, {16})))
sg.data.text{ tokens = x, targets = y }
sg.optimizer.sgd{ lr = 0.1 }
)", &no_logits);
  REQUIRE_MESSAGE(st.ok(), st.message());
  exported_with(*test::open_session(no_logits), tok.get(), &st);
  CHECK_MESSAGE(st.message().find("a tokenizer needs a text model, one that declares sg.output(\"logits\", ...)") !=
                    std::string::npos, st.message());

  auto s = test::open_session(tiny_llama());
  std::unique_ptr<Model> plain = exported_with(*s, nullptr, &st);
  REQUIRE(st.ok());
  CHECK_FALSE(has_tokenizer(*plain));
  std::unique_ptr<Tokenizer> none;
  st = tokenizer_from_model(*plain, &none);
  CHECK(st.message() == "chat.sg: carries no tokenizer (export it with sgrt export --tokenizer FILE.gguf, the GGUF it was "
                        "fine-tuned from)");

  // A stored eos past the vocabulary: the file loads, its tokenizer is refused.
  std::unique_ptr<Model> m = exported_with(*s, tok.get(), &st);
  REQUIRE(st.ok());
  std::unique_ptr<sg::ModelT> r(m->root().UnPack());
  r->tokenizer->eos = kVocab;
  flatbuffers::FlatBufferBuilder fb;
  sg::FinishModelBuffer(fb, sg::Model::Pack(fb, r.get()));
  std::vector<uint8_t> bytes(fb.GetBufferPointer(), fb.GetBufferPointer() + fb.GetSize());
  append_footer(&bytes);
  std::unique_ptr<Model> bad;
  st = Model::load_bytes(std::move(bytes), "bad.sg", &bad);
  REQUIRE_MESSAGE(st.ok(), st.message());
  st = tokenizer_from_model(*bad, &none);
  CHECK_MESSAGE(st.message() == "bad.sg: tokenizer: eos id 260 outside the 260 tokens", st.message());
}

TEST_CASE("sgrt export --merge --tokenizer of a LoRA checkpoint, then sgrt run FILE.sg: the unmerged model's greedy text") {
  test::TempDir dir;
  const std::string ck = dir.path + "/ck", gguf = dir.path + "/tok.gguf", chat = dir.path + "/chat.sg";
  std::ofstream(gguf, std::ios::binary) << tokenizer_gguf(chat_spec());
  CheckpointMeta meta;
  meta.step = 3;
  write_checkpoint(ck, meta);
  const std::vector<std::string> gen = {"--set", "batch=1", "--set", "block=48", "--set", "kv_cache=true"};
  std::vector<std::string> args = {"export", "models/llama.lua", "--checkpoint", ck, "--merge", "--tokenizer", gguf, "-o", chat};
  args.insert(args.end(), gen.begin(), gen.end());
  test::ToolResult r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("adapters merged, with its tokenizer") != std::string::npos);

  auto tok = test::make(chat_spec());
  Greedy expected;
  r = test::run_tool({"run", chat, "--prompt", "ab c", "--tokens", "6"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == expected({kBos, kAb, ' ', 'c'}, 6));
  CHECK(r.err.find("prompt: 4 tokens") != std::string::npos);

  ChatTemplate ct;
  REQUIRE(ChatTemplate::parse(chat_spec().chat_template, &ct).ok());
  std::vector<ChatMessage> turns{{"system", "S"}, {"user", "ab"}};
  std::vector<int32_t> ids{kBos};
  for (int32_t id : tok->encode(ct.render(turns, true))) ids.push_back(id);
  const int64_t room = 48 - static_cast<int64_t>(ids.size());
  REQUIRE(room > 0);
  r = test::run_tool({"run", chat, "--chat", "--system", "S", "--prompt", "ab", "--tokens", std::to_string(room + 3)});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == expected(ids, room));  // --tokens is cut to what the block holds

  // The same file through the C API (sgrt_generate) and examples/edge/chat.c.
  sgrt_session* cs = nullptr;
  REQUIRE(sgrt_create(&cs) == SGRT_OK);
  REQUIRE_MESSAGE(sgrt_load_file(cs, chat.c_str(), "cpu") == SGRT_OK, sgrt_last_error());
  std::string got;
  sgrt_generate_options go{0, nullptr, 6, 0.0, 0, 1.0, 1};
  CHECK_MESSAGE(sgrt_generate(cs, "ab c", &go, append_text, &got) == SGRT_OK, sgrt_last_error());
  CHECK(got + "\n" == expected({kBos, kAb, ' ', 'c'}, 6));
  go = sgrt_generate_options{1, "S", room + 3, 0.0, 0, 1.0, 1};
  got.clear();
  CHECK_MESSAGE(sgrt_generate(cs, "ab", &go, append_text, &got) == SGRT_OK, sgrt_last_error());
  CHECK(got + "\n" == expected(ids, room));
  go.top_p = 0;
  CHECK(sgrt_generate(cs, "ab", &go, append_text, &got) == SGRT_INVALID_ARGUMENT);
  CHECK(std::string(sgrt_last_error()) == "sgrt_generate: top_p must be in (0, 1]");
  CHECK(sgrt_generate(cs, std::string(47, 'x').c_str(), nullptr, append_text, &got) == SGRT_INVALID_ARGUMENT);
  CHECK(std::string(sgrt_last_error()).find("the prompt is 48 tokens, the graph's block 48") != std::string::npos);
  sgrt_destroy(cs);
  int status = -1;
  got = command_output(std::string(SGRT_BINARY_DIR "/examples/edge/edge_chat ") + chat + " ab " + std::to_string(room + 3) + " S",
                       &status);
  CHECK(status == 0);
  CHECK(got == expected(ids, room));

  // --quantize re-exports the merged model: the tokenizer stays.
  const std::string fp8 = dir.path + "/chat_fp8.sg";
  args = {"export", "models/llama.lua", "--checkpoint", ck, "--merge", "--quantize", "fp8", "--tokenizer", gguf, "-o", fp8};
  args.insert(args.end(), gen.begin(), gen.end());
  r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = test::run_tool({"run", fp8, "--prompt", "ab c", "--tokens", "6"});
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.err.find("prompt: 4 tokens") != std::string::npos);

  // Bad input: exit 2, one line, nothing written.
  const std::string none = dir.path + "/none.sg";
  std::ofstream(dir.path + "/tok.txt") << "x";
  args = {"export", "models/llama.lua", "--checkpoint", ck, "--merge", "--tokenizer", dir.path + "/tok.txt", "-o", none};
  check_refused(test::run_tool(args), "--tokenizer expects a .gguf file");
  args = {"export", "models/llama.lua", "--checkpoint", ck, "--merge", "--set", "rope_base=5000", "-o", none};
  args.insert(args.end(), gen.begin(), gen.end());
  check_refused(test::run_tool(args), "checkpoint was trained by another training step");
  CHECK_FALSE(std::filesystem::exists(none));
  check_refused(test::run_tool({"run", chat, "--prompt", std::string(47, 'x')}),
                "--prompt is 48 tokens, " + chat + "'s block is 48 tokens");
  const std::string batch2 = dir.path + "/batch2.sg";
  r = test::run_tool({"export", "models/llama.lua", "--checkpoint", ck, "--merge", "--tokenizer", gguf, "-o", batch2});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  check_refused(test::run_tool({"run", batch2, "--prompt", "ab"}), "runs a batch of 2 sequences, generation one (export it from its script with --set batch=1)");
  const std::string bytes_sg = dir.path + "/bytes.sg";
  r = test::run_tool({"export", "models/llama.lua", "--checkpoint", ck, "--merge", "-o", bytes_sg});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  check_refused(test::run_tool({"run", bytes_sg, "--chat", "--prompt", "ab"}), "--chat applies to a model with a tokenizer");
  cs = nullptr;
  REQUIRE(sgrt_create(&cs) == SGRT_OK);
  REQUIRE(sgrt_load_file(cs, bytes_sg.c_str(), "cpu") == SGRT_OK);
  CHECK(sgrt_generate(cs, "ab", nullptr, append_text, &got) == SGRT_INVALID_ARGUMENT);
  CHECK(std::string(sgrt_last_error()).find("carries no tokenizer") != std::string::npos);
  sgrt_destroy(cs);
}

TEST_CASE("a checkpoint whose run started from a GGUF: export and run take its tokenizer; the file gone or changed, refused") {
  test::TempDir dir;
  const std::string ck = dir.path + "/ck", gguf = dir.path + "/tok.gguf", chat = dir.path + "/chat.sg";
  std::ofstream(gguf, std::ios::binary) << tokenizer_gguf(chat_spec());
  CheckpointMeta meta;  // as sgrt train --init-weights tok.gguf records it
  meta.step = 3;
  meta.init_file = gguf;
  REQUIRE(weights_file_identity(gguf, &meta.init_identity).ok());
  write_checkpoint(ck, meta);
  Greedy expected;
  const std::vector<int32_t> prompt = {kBos, kAb, ' ', 'c'};

  // export without --tokenizer stores the run's; the file then runs as text.
  std::vector<std::string> args = {"export", "models/llama.lua", "--checkpoint", ck, "--merge", "-o", chat,
                                   "--set", "batch=1", "--set", "block=48", "--set", "kv_cache=true"};
  test::ToolResult r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(r.out.find("with the tokenizer of " + gguf + " (the run's --init-weights)") != std::string::npos, r.out);
  r = test::run_tool({"run", chat, "--prompt", "ab c", "--tokens", "6"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == expected(prompt, 6));

  // run MODEL.lua --checkpoint: compiled for generation, the checkpoint's weights, the run's tokenizer.
  r = test::run_tool({"run", "models/llama.lua", "--checkpoint", ck, "--set", "block=48", "--prompt", "ab c", "--tokens", "6"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == expected(prompt, 6));
  CHECK(r.err.find("prompt: 4 tokens") != std::string::npos);

  // --no-tokenizer: none stored.
  const std::string plain = dir.path + "/plain.sg";
  args[6] = plain;
  args.push_back("--no-tokenizer");
  r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("tokenizer") == std::string::npos);
  check_refused(test::run_tool({"run", plain, "--chat", "--prompt", "ab"}), "--chat applies to a model with a tokenizer");
  // A checkpoint that records no GGUF (format 4, or safetensors weights) of a
  // model of 260 tokens bound to a data set is not run as bytes.
  const std::string old_ck = dir.path + "/old_ck";
  write_checkpoint(old_ck, CheckpointMeta{}, {{"instruct", "true"}});
  check_refused(test::run_tool({"run", "models/llama.lua", "--checkpoint", old_ck, "--prompt", "ab"}),
                "models/llama.lua: predicts 260 tokens, not bytes: give --tokenizer FILE.gguf");

  // The GGUF's metadata changed, or the file gone: refused, nothing written.
  const std::string bytes = test::slurp(gguf);
  std::string changed = bytes;
  const size_t at = changed.find("<|im_start|>");
  REQUIRE(at != std::string::npos);
  changed[at + 2] = 'X';
  { std::ofstream(gguf, std::ios::binary) << changed; }
  const std::string none = dir.path + "/none.sg";
  args = {"export", "models/llama.lua", "--checkpoint", ck, "--merge", "-o", none};
  check_refused(test::run_tool(args), ck + ": its run started from " + gguf +
                                          ", which has changed since (its metadata or tensor table differs); give --tokenizer "
                                          "FILE.gguf (or --no-tokenizer)");
  std::filesystem::remove(gguf);
  check_refused(test::run_tool(args), ck + ": its run started from " + gguf + ", which is gone");
  check_refused(test::run_tool({"run", "models/llama.lua", "--checkpoint", ck, "--prompt", "ab"}), "which is gone");
  CHECK_FALSE(std::filesystem::exists(none));
  // Given explicitly, a tokenizer is taken from anywhere.
  const std::string moved = dir.file("moved.gguf", bytes);
  r = test::run_tool({"run", "models/llama.lua", "--checkpoint", ck, "--tokenizer", moved, "--set", "block=48", "--prompt", "ab c",
                      "--tokens", "6"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out == expected(prompt, 6));
  check_refused(test::run_tool({"run", chat, "--tokenizer", moved, "--prompt", "ab"}),
                "--tokenizer applies to run MODEL.lua --checkpoint DIR");
}

TEST_CASE("sgrt train --init-weights FILE.gguf: the resumed run, eval, run and export find the file through the checkpoint") {
  test::TempDir dir;
  const std::string gguf = llama_gguf(dir), ck = dir.path + "/ck", data = dir.path + "/d.jsonl";
  {
    std::ofstream d(data);
    for (int i = 0; i < 12; ++i) d << "{\"prompt\": \"ab c" << i << "\", \"response\": \"c ab " << 11 - i << "\"}\n";
  }
  test::ToolResult r = test::run_tool({"train", "models/llama.lua", "--init-weights", gguf, "--data", data, "--set", "instruct=true",
                                       "--set", "lora_rank=2", "--set", "lora_alpha=3", "--set", "block=64", "--set", "batch=2",
                                       "--steps", "3", "--stop-after", "2", "--checkpoint", ck, "--quiet"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  // Resumed without --init-weights: the data set's tokenizer is the recorded GGUF's.
  r = test::run_tool({"train", "models/llama.lua", "--data", data, "--checkpoint", ck, "--resume", "--quiet"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const double trained = test_loss(r.out);
  // eval: the script compiled without its training step, the same held-out loss.
  r = test::run_tool({"eval", "models/llama.lua", "--checkpoint", ck, "--data", data});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("step 3: test loss") != std::string::npos);
  CHECK(test_loss(r.out) == doctest::Approx(trained).epsilon(1e-4));
  r = test::run_tool({"run", "models/llama.lua", "--checkpoint", ck, "--chat", "--prompt", "ab c1", "--tokens", "3"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(r.err.find("generation: ") != std::string::npos, r.err);
  const std::string chat = dir.path + "/chat.sg";
  r = test::run_tool({"export", "models/llama.lua", "--checkpoint", ck, "--merge", "--set", "batch=1", "--set", "kv_cache=true",
                      "-o", chat});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("with the tokenizer of " + gguf) != std::string::npos);
  r = test::run_tool({"info", ck});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(r.out.find(ck + "/checkpoint.sgck: step 3 of 3, seed 1, 2 examples a step, 5 steps an epoch") == 0, r.out);
  CHECK(r.out.find("\nstarted from: " + gguf + " (there, its header unchanged)\n") != std::string::npos);
  CHECK(r.out.find("\nmodel: " + ck + "/model.sg (") != std::string::npos);
  CHECK(r.out.find("--set instruct=true") != std::string::npos);
  // The file moved: each says where it was and what to give.
  std::filesystem::rename(gguf, dir.path + "/moved.gguf");
  r = test::run_tool({"info", ck});
  CHECK(r.out.find("\nstarted from: " + gguf + ", which is gone (No such file or directory)\n") != std::string::npos);
  check_refused(test::run_tool({"eval", "models/llama.lua", "--checkpoint", ck, "--data", data}),
                "its run started from " + gguf + ", which is gone (No such file or directory); give --init-weights FILE.gguf");
  r = test::run_tool({"eval", "models/llama.lua", "--checkpoint", ck, "--data", data, "--init-weights", dir.path + "/moved.gguf"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test_loss(r.out) == doctest::Approx(trained).epsilon(1e-4));
  // Without a checkpoint a script's weights are the GGUF's: not a llama script's.
  check_refused(test::run_tool({"eval", "models/fashion_mlp.lua", "--init-weights", dir.path + "/moved.gguf"}),
                "the llama of " + dir.path + "/moved.gguf as models/fashion_mlp.lua: --set context: models/fashion_mlp.lua "
                "has no such config key");
}

TEST_CASE("sgrt train --adapter starts a new run from another run's adapters") {
  test::TempDir dir;
  const std::string gguf = llama_gguf(dir), data = dir.path + "/d.jsonl";
  {
    std::ofstream d(data);
    for (int i = 0; i < 12; ++i) d << "{\"prompt\": \"ab c" << i << "\", \"response\": \"c ab " << 11 - i << "\"}\n";
  }
  const std::vector<std::string> common = {"--init-weights", gguf, "--data", data, "--set", "instruct=true", "--set",
                                           "lora_alpha=3", "--set", "block=64", "--set", "batch=2", "--quiet"};
  auto train = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"train", "models/llama.lua"});
    args.insert(args.end(), common.begin(), common.end());
    return test::run_tool(args);
  };
  const std::string first = dir.path + "/first", adapters = dir.path + "/a.safetensors";
  test::ToolResult r = train({"--set", "lora_rank=2", "--set", "lr=1e-2", "--steps", "3", "--checkpoint", first});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const double trained = test_loss(r.out);
  r = test::run_tool({"export-weights", "--checkpoint", first, "--trained", "-o", adapters});
  REQUIRE_MESSAGE(r.code == 0, r.err);

  // lr 1e-30 (a step far below an f32 ulp of the adapters' values): they stay
  // as loaded (the rank is the file's), so the held-out loss is the first
  // run's and the export gives the same bytes.
  const std::string again = dir.path + "/again", out = dir.path + "/again.safetensors";
  r = train({"--adapter", adapters, "--set", "lr=1e-30", "--steps", "1", "--checkpoint", again});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test_loss(r.out) == doctest::Approx(trained).epsilon(1e-6));
  r = test::run_tool({"export-weights", "--checkpoint", again, "--trained", "-o", out});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test::slurp(out) == test::slurp(adapters));
  // The same through a PEFT folder (export-weights --peft): its config gives
  // the rank, alpha and targets, its keys and q/k row order map back.
  const std::string peft = dir.path + "/peft", from_peft = dir.path + "/from_peft";
  r = test::run_tool({"export-weights", "--checkpoint", first, "--peft", "-o", peft});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = test::run_tool({"train", "models/llama.lua", "--init-weights", gguf, "--adapter", peft, "--data", data, "--set",
                      "instruct=true", "--set", "block=64", "--set", "batch=2", "--set", "lr=1e-30", "--steps", "1",
                      "--checkpoint", from_peft, "--quiet"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test_loss(r.out) == doctest::Approx(trained).epsilon(1e-6));
  r = test::run_tool({"export-weights", "--checkpoint", from_peft, "--trained", "-o", out});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test::slurp(out) == test::slurp(adapters));
  // export-weights and export of the GGUF's model with those adapters on it
  // (no checkpoint) write what the checkpoint's exports write.
  const std::vector<std::string> gguf_model = {"models/llama.lua", "--init-weights", gguf, "--adapter", adapters, "--set",
                                               "lora_alpha=3", "--set", "instruct=true", "--set", "block=64", "--set",
                                               "batch=2"};
  auto from_gguf = [&](const std::string& command, std::vector<std::string> rest) {
    rest.insert(rest.begin(), gguf_model.begin(), gguf_model.end());
    rest.insert(rest.begin(), command);
    return test::run_tool(rest);
  };
  r = from_gguf("eval", {"--data", data});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find(gguf + " with the adapters of " + adapters + ": test loss ") == 0);
  CHECK(test_loss(r.out) == doctest::Approx(trained).epsilon(1e-6));
  const std::string peft2 = dir.path + "/peft2", merged = dir.path + "/m.gguf", merged2 = dir.path + "/m2.gguf";
  r = from_gguf("export-weights", {"--peft", "-o", peft2});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test::slurp(peft2 + "/adapter_model.safetensors") == test::slurp(peft + "/adapter_model.safetensors"));
  CHECK(test::slurp(peft2 + "/adapter_config.json") == test::slurp(peft + "/adapter_config.json"));
  r = test::run_tool({"export-weights", "--checkpoint", first, "--merge", "-o", merged});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = from_gguf("export-weights", {"--merge", "-o", merged2});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(test::slurp(merged2) == test::slurp(merged));
  const std::vector<std::string> for_chat = {"--merge", "--set", "batch=1", "--set", "block=48", "--set", "kv_cache=true"};
  const std::string chat1 = dir.path + "/c1.sg", chat2 = dir.path + "/c2.sg";
  std::vector<std::string> args = {"export", "models/llama.lua", "--checkpoint", first, "-o", chat1};
  args.insert(args.end(), for_chat.begin(), for_chat.end());
  r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  args = for_chat;
  args.insert(args.end(), {"-o", chat2});
  r = from_gguf("export", args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("with its tokenizer") != std::string::npos);  // the GGUF's, by default
  const std::vector<std::string> prompt = {"--chat", "--prompt", "ab c1", "--tokens", "8"};
  args = {"run", chat1};
  args.insert(args.end(), prompt.begin(), prompt.end());
  const test::ToolResult text1 = test::run_tool(args);
  args[1] = chat2;
  const test::ToolResult text2 = test::run_tool(args);
  REQUIRE_MESSAGE(text1.code == 0, text1.err);
  CHECK(text1.out.size() > 1);
  CHECK(text2.out == text1.out);
  check_refused(test::run_tool({"export", "models/llama.lua", "--checkpoint", first, "--adapter", adapters, "-o", chat2}),
                "export --adapter takes the base from --init-weights FILE.gguf (a run's adapters are in its --checkpoint");
  check_refused(test::run_tool({"export-weights", "models/llama.lua", "--checkpoint", first, "--init-weights", gguf, "-o", out}),
                "export-weights takes a run's weights (--checkpoint) or a GGUF's (--init-weights), not both");
  // Without --adapter the same run starts from B = 0: the base model's loss.
  r = train({"--set", "lora_rank=2", "--set", "lr=1e-30", "--steps", "1"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(std::abs(test_loss(r.out) - trained) > 1e-3);
  // A resumed run takes its adapters from the checkpoint: --adapter is ignored.
  r = train({"--adapter", adapters, "--set", "lr=1e-30", "--steps", "1", "--checkpoint", again, "--resume"});
  CHECK_MESSAGE(r.code == 0, r.err);

  check_refused(test::run_tool({"train", "models/llama.lua", "--adapter", adapters, "--data", data}),
                "--adapter needs --init-weights FILE: the base model its adapters were trained on");
  check_refused(train({"--adapter", adapters, "--set", "lora_rank=3", "--steps", "1"}),
                adapters + ": tensor 'blk.0.attn_q.lora_A' is [2, 32], models/llama.lua needs [3, 32]");
  const std::string all = dir.path + "/all.safetensors";
  r = test::run_tool({"export-weights", "--checkpoint", first, "-o", all});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  check_refused(train({"--adapter", all, "--steps", "1"}), "is a frozen parameter of models/llama.lua");
  check_refused(train({"--adapter", gguf, "--steps", "1"}), gguf + ": ");
}

TEST_CASE("models/llama.lua's lr_schedule: cosine with linear warmup, as its definition gives") {
  test::TempDir dir;
  const std::string gguf = llama_gguf(dir), data = dir.path + "/d.jsonl", log = dir.path + "/log.jsonl";
  {
    std::ofstream d(data);
    for (int i = 0; i < 12; ++i) d << "{\"prompt\": \"ab c" << i << "\", \"response\": \"c ab\"}\n";
  }
  const std::vector<std::string> base = {"train", "models/llama.lua", "--init-weights", gguf, "--data", data, "--set",
                                         "instruct=true", "--set", "lora_rank=2", "--set", "block=64", "--set", "batch=2",
                                         "--set", "lr=0.01", "--steps", "5", "--quiet"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--set", "lr_schedule=cosine", "--set", "warmup=2", "--set", "min_lr_ratio=0.1", "--log", log,
                           "--log-every", "1"});
  test::ToolResult r = test::run_tool(args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  // Step s of 5 (from 0): lr (s + 1) / 2 while s < 2, then lr (0.1 + 0.9 (1 + cos(pi (s - 2) / 3)) / 2).
  std::vector<double> got;
  std::istringstream lines(test::slurp(log));
  for (std::string line; std::getline(lines, line);)
    if (const size_t at = line.find("\"lr\":"); at != std::string::npos && line.find("\"step\":") != std::string::npos)
      got.push_back(std::stod(line.substr(at + 5)));
  REQUIRE(got.size() == 5);
  for (int s = 0; s < 5; ++s) {
    const double want = s < 2 ? 0.01 * (s + 1) / 2 : 0.01 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * (s - 2) / 3.0)));
    CHECK(got[static_cast<size_t>(s)] == doctest::Approx(want).epsilon(1e-6));
  }
  args = base;
  args.insert(args.end(), {"--set", "lr_schedule=linear"});
  check_refused(test::run_tool(args), "models/llama.lua:");
  check_refused(test::run_tool(args), "lr_schedule is constant (no warmup) or cosine, not linear");
  args = base;
  args.insert(args.end(), {"--set", "warmup=3"});
  check_refused(test::run_tool(args), "not constant with warmup 3");
}
