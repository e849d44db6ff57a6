// models/llama.lua with SmolLM2-135M's GGUF weights against an independent
// numpy implementation (scripts/make_llama_reference.py: the `gguf` package's
// dequantization, Hugging Face's rotate-half RoPE on un-permuted q/k weights,
// float64). tests/data/llama_reference.txt holds, for 4 prompts at every
// position, the logits of vocab ids 0..63, the 8 largest logits, the
// log-sum-exp and the argmax, and a 64-token greedy continuation.
//
// FP32 against float64: per position, the max-norm of the difference over the
// stored logits is within 1e-3 of the max-norm of the stored logits (the
// issue's bound; 30 blocks of FP32 GEMMs with K <= 1536 drift ~1e-5 relative).
// A wrong RoPE pairing, a wrong GQA head mapping or a transposed weight moves
// the logits by O(1). The argmax is compared where the reference's top-2 gap
// exceeds the tolerance; the greedy continuation must be identical (its
// smallest top-2 gap is recorded in the dump).
//
// With the KV cache (--set kv_cache=true: programs prefill and decode_step),
// decode_step run token by token from position 0 matches the reference the
// same way, its logits equal infer's over the whole sequence within 1e-5
// relative, and the greedy continuation is the same 64 tokens.
#include <cmath>
#include <fstream>
#include <sstream>

#include "harness.h"
#include "model_files.h"
#include "sgrt/generate.h"
#include "sgrt/gguf_weights.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

constexpr double kRel = 1e-3;

struct Position {
  double lse = 0, gap = 0;
  int argmax = -1;
  std::vector<std::pair<int, double>> logits;  // (vocab id, value): ids 0..63 and the top 8
};

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<Position> pos;
};

struct Reference {
  std::vector<Prompt> prompts;
  int greedy_prompt = -1;
  double greedy_gap = 0;
  std::vector<int32_t> greedy;
};

std::vector<int32_t> read_ids(std::istringstream& in) {
  std::vector<int32_t> v;
  for (int32_t x; in >> x;) v.push_back(x);
  return v;
}

Reference load_reference() {
  std::ifstream f(SGRT_SOURCE_DIR "/tests/data/llama_reference.txt");
  REQUIRE_MESSAGE(f.good(), "tests/data/llama_reference.txt is missing (scripts/make_llama_reference.py)");
  Reference r;
  std::string line, tag;
  std::vector<int32_t>* ids_into = nullptr;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    in >> tag;
    if (tag == "prompt") {
      r.prompts.emplace_back();
      ids_into = &r.prompts.back().ids;
    } else if (tag == "ids") {
      REQUIRE(ids_into);
      *ids_into = read_ids(in);
    } else if (tag == "pos") {
      Position p;
      int t;
      in >> t >> p.lse >> p.argmax >> p.gap;
      r.prompts.back().pos.push_back(p);
    } else if (tag == "first") {
      double v;
      for (int j = 0; in >> v; ++j) r.prompts.back().pos.back().logits.push_back({j, v});
    } else if (tag == "top") {
      std::string e;
      while (in >> e) {
        size_t colon = e.find(':');
        r.prompts.back().pos.back().logits.push_back({std::stoi(e.substr(0, colon)), std::stod(e.substr(colon + 1))});
      }
    } else if (tag == "greedy") {
      int n;
      in >> r.greedy_prompt >> n >> r.greedy_gap;
      ids_into = &r.greedy;
    }
  }
  REQUIRE(r.prompts.size() == 4);
  REQUIRE(r.greedy.size() == 64);
  return r;
}

// models/llama.lua compiled for inference only (frozen weights: no gradient
// or optimizer state in the arena).
std::shared_ptr<const Model> compile_llama(const std::map<std::string, std::string>& set) {
  return test::compile_model_file("models/llama.lua", set, true);
}

// models/llama.lua shaped by the GGUF's metadata, batch x block, weights bound.
std::unique_ptr<Session> open_llama(const std::string& gguf, int64_t batch, int64_t block, bool kv_cache = false) {
  std::unique_ptr<GgufFile> f;
  Status st = GgufFile::open(gguf, &f);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::map<std::string, std::string> set;
  st = llama_config(*f, &set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  set["batch"] = std::to_string(batch);
  set["block"] = std::to_string(block);
  set["kv_cache"] = kv_cache ? "true" : "false";
  auto s = test::open_session(compile_llama(set));
  st = import_gguf(*s, gguf);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return s;
}

// max |a - b| / max |b| over one row of logits.
double relative_diff(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t j = 0; j < n; ++j) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[j]) - b[j]));
    norm = std::max(norm, std::fabs(static_cast<double>(b[j])));
  }
  return diff / norm;
}

// Within kRel of the reference at one position (the stored logits and the
// log-sum-exp; the argmax where the top-2 gap is clear); returns max |diff| / max |ref|.
double check_against_reference(const Position& p, const float* row, int64_t vocab, const std::string& where) {
  double diff = 0, norm = 0;
  for (auto& [j, v] : p.logits) {
    diff = std::max(diff, std::fabs(row[j] - v));
    norm = std::max(norm, std::fabs(v));
  }
  double m = row[0], sum = 0;
  for (int64_t j = 0; j < vocab; ++j) m = std::max<double>(m, row[j]);
  for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - m);
  diff = std::max(diff, std::fabs(m + std::log(sum) - p.lse));
  CHECK_MESSAGE(diff <= kRel * norm, where << ": max |diff| " << diff << ", max |ref| " << norm);
  if (p.gap > kRel * norm * 2) {
    int argmax = static_cast<int>(std::max_element(row, row + vocab) - row);
    CHECK_MESSAGE(argmax == p.argmax, where);
  }
  return diff / norm;
}

}  // namespace

TEST_CASE("SmolLM2-135M logits match the numpy reference at every position of 4 prompts") {
  std::string gguf = test::smollm2_gguf();
  if (gguf.empty()) { MESSAGE(std::string(test::kNoSmollm2)); return; }
  Reference r = load_reference();
  size_t block = 0;
  for (const Prompt& p : r.prompts) block = std::max(block, p.ids.size());
  const int64_t batch = static_cast<int64_t>(r.prompts.size());
  auto s = open_llama(gguf, batch, static_cast<int64_t>(block));
  std::vector<int32_t> tokens(batch * block, 0);  // padding after each prompt: causal, so it changes nothing before
  for (int64_t b = 0; b < batch; ++b) std::copy(r.prompts[b].ids.begin(), r.prompts[b].ids.end(), tokens.begin() + b * block);
  test::write_vec(*s, "tokens", tokens);
  test::run(*s, "infer");
  int logits_id = -1;
  for (auto& [n, id] : s->model().outputs())
    if (n == "logits") logits_id = id;
  const int64_t vocab = s->model().tensors()[logits_id].type.shape.back();
  std::vector<float> z(batch * block * vocab);
  REQUIRE(s->read(logits_id, z.data(), z.size() * sizeof(float)).ok());
  double worst = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < r.prompts[b].pos.size(); ++t)
      worst = std::max(worst, check_against_reference(r.prompts[b].pos[t], z.data() + (b * block + t) * vocab, vocab,
                                                      "prompt " + std::to_string(b) + " position " + std::to_string(t)));
  MESSAGE("largest relative max-norm difference: " << worst);
}

TEST_CASE("SmolLM2-135M's greedy continuation of 64 tokens equals the reference's") {
  std::string gguf = test::smollm2_gguf();
  if (gguf.empty()) { MESSAGE(std::string(test::kNoSmollm2)); return; }
  Reference r = load_reference();
  const std::vector<int32_t>& prompt = r.prompts[r.greedy_prompt].ids;
  auto s = open_llama(gguf, 1, static_cast<int64_t>(prompt.size() + r.greedy.size()));
  std::vector<int32_t> got;
  GenerateStats st;
  Status g = generate(*s, prompt, static_cast<int64_t>(r.greedy.size()), -1, SamplingOptions{}, [&](int32_t id) {
    got.push_back(id);
    return Status::Ok();
  }, &st);
  REQUIRE_MESSAGE(g.ok(), g.message());
  CHECK(got == r.greedy);
}

TEST_CASE("SmolLM2-135M with a KV cache: decode steps match the reference and the uncached logits, greedy identical") {
  std::string gguf = test::smollm2_gguf();
  if (gguf.empty()) { MESSAGE(std::string(test::kNoSmollm2)); return; }
  Reference r = load_reference();
  const Prompt& pr = r.prompts[r.greedy_prompt];
  const int64_t n = static_cast<int64_t>(pr.ids.size()), block = n + static_cast<int64_t>(r.greedy.size());
  auto s = open_llama(gguf, 1, block, /*kv_cache=*/true);

  // generate() takes the cached path (prefill, then decode_step) when the programs exist.
  std::vector<int32_t> got;
  GenerateStats st;
  Status g = generate(*s, pr.ids, static_cast<int64_t>(r.greedy.size()), -1, SamplingOptions{}, [&](int32_t id) {
    got.push_back(id);
    return Status::Ok();
  }, &st);
  REQUIRE_MESSAGE(g.ok(), g.message());
  CHECK(got == r.greedy);

  // The whole sequence (prompt and continuation) through infer, no cache involved.
  std::vector<int32_t> seq(pr.ids);
  seq.insert(seq.end(), r.greedy.begin(), r.greedy.end());
  test::write_vec(*s, "tokens", seq);
  test::run(*s, "infer");
  std::vector<float> full = test::read_output(*s, "logits");
  const int64_t vocab = static_cast<int64_t>(full.size()) / block;

  // decode_step one token at a time from position 0: the reference on the
  // prompt, infer's logits everywhere (rope at the right position, the cache's
  // earlier rows read back, GQA).
  double worst = 0;
  for (int64_t t = 0; t < block; ++t) {
    test::write_vec(*s, "pos", std::vector<int32_t>{static_cast<int32_t>(t)});
    test::write_vec(*s, "token", std::vector<int32_t>{seq[t]});
    test::run(*s, "decode_step");
    std::vector<float> z = test::read_output(*s, "decode_step.logits");
    if (t < static_cast<int64_t>(pr.pos.size())) check_against_reference(pr.pos[t], z.data(), vocab, "decode_step at position " + std::to_string(t));
    double rel = relative_diff(z.data(), full.data() + t * vocab, vocab);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= 1e-5, "decode_step at position " << t << ": " << rel << " relative to infer");
  }
  MESSAGE("decode_step against infer: largest relative max-norm difference " << worst);

  // prefill over the whole block from position 0 equals infer row for row.
  test::write_vec(*s, "pos", std::vector<int32_t>{0});
  test::write_vec(*s, "prompt", seq);
  test::run(*s, "prefill");
  std::vector<float> pre = test::read_output(*s, "prefill.logits");
  for (int64_t t = 0; t < block; ++t)
    CHECK_MESSAGE(relative_diff(pre.data() + t * vocab, full.data() + t * vocab, vocab) <= 1e-5, "prefill position " << t);

  // A position past the cache is refused by the op, naming it.
  int decode = -1;
  REQUIRE(s->find_program("decode_step", &decode).ok());
  test::write_vec(*s, "pos", std::vector<int32_t>{static_cast<int32_t>(block)});
  Status past = s->run(decode);
  CHECK_FALSE(past.ok());
  CHECK_MESSAGE(past.message().find("do not fit the cache of " + std::to_string(block) + " rows") != std::string::npos,
                past.message());
}

TEST_CASE("a GGUF that does not fit the model is refused by name, before any parameter is written") {
  std::string gguf = test::smollm2_gguf();
  if (gguf.empty()) { MESSAGE(std::string(test::kNoSmollm2)); return; }
  std::unique_ptr<GgufFile> f;
  REQUIRE(GgufFile::open(gguf, &f).ok());
  std::map<std::string, std::string> base;
  REQUIRE(llama_config(*f, &base).ok());
  auto refused = [&](std::map<std::string, std::string> set, const std::string& expect) {
    for (auto& [k, v] : base) set.emplace(k, v);
    set["block"] = "4";
    auto s = test::open_session(compile_llama(set));
    std::vector<float> before = test::read_f32(*s, "token_embd.weight");
    Status st = import_gguf(*s, gguf);
    CHECK_FALSE(st.ok());
    CHECK_MESSAGE(st.message().find(expect) != std::string::npos, st.message());
    CHECK(test::read_f32(*s, "token_embd.weight") == before);
  };
  refused({{"n_layer", "2"}}, "is not a parameter of");  // extra: blocks 2..29
  refused({{"tie", "false"}}, "has no tensor 'output.weight'");         // missing
  refused({{"ffn", "1024"}}, "tensor 'blk.0.ffn_gate.weight' is [1536, 576]");  // misshapen
}

TEST_CASE("sgrt run refuses another architecture, a prompt longer than the context and a truncated GGUF, exit 2") {
  std::string gguf = test::smollm2_gguf();
  test::ToolResult r = test::run_tool({"run", "models/llama.lua", "--init-weights", "tests/data/gguf/tiny_f32.gguf", "--prompt", "hi"});
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find("architecture 'sgrt-test' is not supported (llama)") != std::string::npos, r.err);
  if (gguf.empty()) { MESSAGE(std::string(test::kNoSmollm2)); return; }
  r = test::run_tool({"run", "models/llama.lua", "--init-weights", gguf, "--set", "context=4", "--prompt",
                      "a prompt of more than four tokens"});
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find("the model's context is 4 tokens") != std::string::npos, r.err);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  // A truncated file: its first 5 MB (the header and tensor table are whole, the data is not).
  test::TempDir dir;
  const std::string cut = dir.path + "/cut.gguf";
  {
    std::ifstream in(gguf, std::ios::binary);
    std::vector<char> head(5 << 20);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(cut, std::ios::binary).write(head.data(), in.gcount());
  }
  r = test::run_tool({"run", "models/llama.lua", "--init-weights", cut, "--prompt", "hi"});
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.err.find("runs past the end of the file") != std::string::npos, r.err);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}
