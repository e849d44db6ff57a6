// SmolLM2-135M (models/llama.lua with the GGUF's weights, FP32 activations):
// held-out perplexity on a slice of the Jargon File, and prompt-processing and
// generation speed. One JSON line per measurement. The numpy reference runs
// beside it: scripts/make_llama_reference.py --bench --sgrt-bench build/bench/bench_llama.
//
//   bench_llama [--gguf F] [--text FILE] [--threads T] [--recipe R] [--ppl-windows N]
//               [--block B] [--prompt P] [--gen G] [--reps R]
// Perplexity: N windows of B tokens from the last tenth of the text (the part
// the byte-level text data set holds out), the next-token NLL of positions
// 1..B-1 of each, exp of the mean. Speed: one forward over a P-token prompt
// (median of R), then G tokens generated greedily after it, R times each way
// (medians): with the KV cache (prefill, then one decode_step per token:
// gen_tok_s) and without (each token reruns infer over the block of P + G
// tokens: gen_tok_s_no_cache). Both count the G - 1 tokens after the first.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>
#include <zlib.h>

#include "compile_script.h"
#include "cpu/parallel.h"
#include "sgrt/generate.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/session.h"
#include "sgrt/tokenizer_gguf.h"

using namespace sgrt;

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_llama: %s\n", what.c_str());
  std::exit(1);
}

void check(const Status& st) {
  if (!st.ok()) die(st.message());
}

std::string arg(int argc, char** argv, const char* flag, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == flag) return argv[i + 1];
  return def;
}

std::string read_text(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) die(path + ": cannot open");
  std::string out;
  char buf[1 << 16];
  for (int got; (got = gzread(f, buf, sizeof buf)) > 0;) out.append(buf, got);
  gzclose(f);
  return out;
}

std::unique_ptr<Session> open_llama(const GgufFile& f, const std::string& recipe, int64_t block, bool kv_cache = false) {
  std::map<std::string, std::string> set;
  check(llama_config(f, &set));
  set["block"] = std::to_string(block);
  set["kv_cache"] = kv_cache ? "true" : "false";
  std::shared_ptr<const Model> m;
  check(bench::compile_script("models/llama.lua", set, recipe, true, &m));
  std::unique_ptr<Backend> be;
  check(make_backend("cpu", &be));
  std::unique_ptr<Session> s;
  check(Session::create(m, std::move(be), &s));
  check(s->init(0, 0));
  check(import_gguf(*s, f.path()));
  return s;
}

std::vector<float> forward(Session& s, const std::vector<int32_t>& ids) {
  int prog;
  check(s.find_program("infer", &prog));
  int tokens = s.model().find_tensor("tokens"), logits = -1;
  for (auto& [n, id] : s.model().outputs())
    if (n == "logits") logits = id;
  check(s.write(tokens, ids.data(), ids.size() * sizeof(int32_t)));
  check(s.run(prog));
  std::vector<float> z(numel(s.model().tensors()[logits].type.shape));
  check(s.read(logits, z.data(), z.size() * sizeof(float)));
  return z;
}

double perplexity(const GgufFile& f, const Tokenizer& tok, const std::string& text, const std::string& recipe,
                  int64_t windows, int64_t block) {
  std::vector<int32_t> ids = tok.encode(std::string_view(text).substr(text.size() * 9 / 10));
  if (static_cast<int64_t>(ids.size()) < windows * block) die("the held-out slice has too few tokens");
  auto s = open_llama(f, recipe, block);
  double nll = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> win(ids.begin() + w * block, ids.begin() + (w + 1) * block);
    std::vector<float> z = forward(*s, win);
    const int64_t vocab = static_cast<int64_t>(z.size()) / block;
    for (int64_t t = 0; t + 1 < block; ++t) {
      const float* row = z.data() + t * vocab;
      double m = *std::max_element(row, row + vocab), sum = 0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - m);
      nll += m + std::log(sum) - row[win[t + 1]];
    }
  }
  return std::exp(nll / static_cast<double>(windows * (block - 1)));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Tokens per second of greedy generation after `ids` (the tokens after the first), median of reps.
double generation_speed(const GgufFile& f, const std::string& recipe, const std::vector<int32_t>& ids, int64_t gen,
                        int reps, bool kv_cache) {
  auto s = open_llama(f, recipe, static_cast<int64_t>(ids.size()) + gen, kv_cache);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    GenerateStats st;
    check(generate(*s, ids, gen, -1, SamplingOptions{}, [](int32_t) { return Status::Ok(); }, &st));
    rates.push_back((st.generated - 1) / st.generate_seconds);
  }
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string gguf_path = arg(argc, argv, "--gguf", std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
                                                              "/.cache/sgrt/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string text_path = arg(argc, argv, "--text", "/usr/share/doc/jargon-text/jargon.txt.gz");
  const std::string recipe = arg(argc, argv, "--recipe", "fp32");
  const int threads = std::atoi(arg(argc, argv, "--threads", "1").c_str());
  const int64_t windows = std::atoll(arg(argc, argv, "--ppl-windows", "0").c_str());
  const int64_t block = std::atoll(arg(argc, argv, "--block", "256").c_str());
  const int64_t prompt = std::atoll(arg(argc, argv, "--prompt", "128").c_str());
  const int64_t gen = std::atoll(arg(argc, argv, "--gen", "32").c_str());
  const int reps = std::atoi(arg(argc, argv, "--reps", "3").c_str());
  cpu::set_num_threads(threads);
  std::unique_ptr<GgufFile> f;
  check(GgufFile::open(gguf_path, &f));
  std::unique_ptr<Tokenizer> tok;
  check(tokenizer_from_gguf(*f, &tok));
  const std::string text = read_text(text_path);

  if (windows > 0) {
    double ppl = perplexity(*f, *tok, text, recipe, windows, block);
    std::printf("{\"bench\":\"llama_ppl\",\"impl\":\"sgrt\",\"recipe\":\"%s\",\"windows\":%lld,\"block\":%lld,\"ppl\":%.4f}\n",
                recipe.c_str(), static_cast<long long>(windows), static_cast<long long>(block), ppl);
    std::fflush(stdout);
  }
  if (prompt <= 0) return 0;
  // The prompt: the held-out slice's first tokens.
  std::vector<int32_t> ids = tok->encode(std::string_view(text).substr(text.size() * 9 / 10, 64 * prompt));
  ids.resize(prompt);
  auto s = open_llama(*f, recipe, prompt);
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    forward(*s, ids);
    secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  s.reset();
  if (gen < 2) die("--gen must be at least 2 to time generation");
  const double cached = generation_speed(*f, recipe, ids, gen, reps, true);
  const double uncached = generation_speed(*f, recipe, ids, gen, reps, false);
  std::printf("{\"bench\":\"llama_speed\",\"impl\":\"sgrt\",\"recipe\":\"%s\",\"threads\":%d,\"prompt\":%lld,\"prompt_tok_s\":%.2f,"
              "\"gen\":%lld,\"reps\":%d,\"gen_tok_s\":%.3f,\"gen_tok_s_no_cache\":%.3f}\n",
              recipe.c_str(), threads, static_cast<long long>(prompt), prompt / median(secs),
              static_cast<long long>(gen), reps, cached, uncached);
  return 0;
}
