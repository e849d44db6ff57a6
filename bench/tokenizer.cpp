// Tokenizer encoding speed on one thread: a large text (default: the Jargon
// File from Debian's jargon-text) encoded with SmolLM2-135M's tokenizer, read
// from its GGUF. One JSON line: the median tokens/s over the repetitions and
// the CRC-32 of the ids (int32 little endian), which
// scripts/make_tokenizer_reference.py --bench FILE --sgrt-bench build/bench/bench_tokenizer
// compares with Hugging Face `tokenizers` in the same run.
//
// --paragraphs encodes each paragraph (the text split at "\n\n", separators
// dropped) on its own instead of the whole text as one string.
//
//   bench_tokenizer --gguf FILE [--reps N] [--paragraphs] [TEXT_FILE(.gz)]
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "sgrt/gguf.h"
#include "sgrt/tokenizer_gguf.h"

using namespace sgrt;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "bench_tokenizer: %s\n", msg.c_str());
  return 2;
}

// The whole file, gunzipped when it is gzip (zlib reads plain files as is).
bool read_text(const std::string& path, std::string* out) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out->append(buf, n);
  return gzclose(f) == Z_OK && n == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string gguf_path, text_path = "/usr/share/doc/jargon-text/jargon.txt.gz";
  int reps = 5;
  bool paragraphs = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--gguf") && i + 1 < argc) gguf_path = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--paragraphs")) paragraphs = true;
    else if (argv[i][0] != '-') text_path = argv[i];
    else return fail(std::string("unknown argument ") + argv[i] + " (--gguf FILE, --reps N, --paragraphs, TEXT_FILE)");
  }
  if (gguf_path.empty()) return fail("--gguf FILE is required (scripts/get_models.sh prints its path)");
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
  Status st = GgufFile::open(gguf_path, &gguf);
  if (st.ok()) st = tokenizer_from_gguf(*gguf, &tok);
  if (!st.ok()) return fail(st.message());
  std::string text;
  if (!read_text(text_path, &text)) return fail(text_path + ": cannot read");
  std::vector<std::string_view> inputs;
  for (size_t pos = 0;;) {
    const size_t end = paragraphs ? text.find("\n\n", pos) : std::string::npos;
    inputs.push_back(std::string_view(text).substr(pos, end == std::string::npos ? end : end - pos));
    if (end == std::string::npos) break;
    pos = end + 2;
  }

  std::vector<double> rates;
  std::vector<int32_t> ids;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ids.clear();
    for (std::string_view in : inputs) {
      const std::vector<int32_t> part = tok->encode(in);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    rates.push_back(ids.size() / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(rates.begin(), rates.end());
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(ids.data()), ids.size() * sizeof(int32_t));
  std::printf("{\"impl\": \"sgrt\", \"bytes\": %zu, \"inputs\": %zu, \"tokens\": %zu, \"ids_crc32\": %lu, "
              "\"reps\": %d, \"tokens_per_s\": %.0f}\n",
              text.size(), inputs.size(), ids.size(), crc, reps, rates[rates.size() / 2]);
  return 0;
}
