#include "sgrt/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "sgrt/rng.h"

namespace sgrt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Status find_io(const Model& m, int* tokens, int* logits) {
  *tokens = m.find_tensor("tokens");
  *logits = m.find_output("logits");
  if (*tokens < 0) return Status::Invalid(m.label() + ": has no input \"tokens\"");
  if (*logits < 0) return Status::Invalid(m.label() + ": declares no sg.output(\"logits\", ...)");
  return Status::Ok();
}

}  // namespace

Status generation_shape(const Model& m, int64_t* block, int64_t* vocab) {
  int tokens, logits;
  SG_TRY(find_io(m, &tokens, &logits));
  const TensorType& t = m.tensors()[tokens].type;
  const TensorType& l = m.tensors()[logits].type;
  if (t.dtype != DType::i32 || t.shape.size() != 2 || t.shape[0] != 1)
    return Status::Invalid(m.label() + ": tokens must be i32 [1, block] for generation, got " + type_str(t));
  if (l.dtype != DType::f32 || l.shape.empty() || numel(l.shape) != t.shape[1] * l.shape.back())
    return Status::Invalid(m.label() + ": logits " + type_str(l) + " do not hold one row per token of " + type_str(t));
  *block = t.shape[1];
  *vocab = l.shape.back();
  return Status::Ok();
}

int32_t sample_token(std::span<const float> z, const SamplingOptions& o, float u) {
  const int64_t vocab = static_cast<int64_t>(z.size());
  if (o.temperature <= 0) return static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
  std::vector<double> p(k);
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((z[order[i]] - z[order[0]]) / o.temperature);
  if (o.top_p < 1) {  // keep the smallest prefix whose mass reaches top_p
    double mass = 0;
    int64_t keep = 0;
    while (keep < k && mass < o.top_p * total) mass += p[keep++];
    k = std::max<int64_t>(keep, 1);
    total = mass;
  }
  double r = u * total;
  for (int64_t i = 0; i < k; ++i)
    if ((r -= p[i]) < 0) return order[i];
  return order[k - 1];
}

namespace {

Status expect_type(const Model& m, int id, const std::string& name, const TensorType& want) {
  if (id < 0) return Status::Invalid(m.label() + ": has no tensor \"" + name + "\" (a KV-cache model needs it)");
  const TensorType& t = m.tensors()[id].type;
  if (!(t == want)) return Status::Invalid(m.label() + ": " + name + " is " + type_str(t) + ", expected " + type_str(want));
  return Status::Ok();
}

// The next token's logits after ids[0, n), from one of two program sets:
// without a cache, infer over the whole block each time; with one (programs
// prefill and decode_step), prefill over the padded prompt once and then
// decode_step on the last token alone at its position.
class NextLogits {
 public:
  Status init(Session& s, int64_t block, int64_t vocab) {
    const Model& m = s.model();
    s_ = &s;
    vocab_ = vocab;
    cached_ = s.find_program("prefill", &prefill_).ok() && s.find_program("decode_step", &decode_).ok();
    if (!cached_) {
      int tokens, logits;
      SG_TRY(find_io(m, &tokens, &logits));
      SG_TRY(s.find_program("infer", &prefill_));
      block_in_ = tokens;
      block_out_ = logits;
      logits_ = std::vector<float>(vocab);
      return Status::Ok();
    }
    block_in_ = m.find_tensor("prompt");
    token_in_ = m.find_tensor("token");
    pos_ = m.find_tensor("pos");
    block_out_ = m.find_output("prefill.logits");
    token_out_ = m.find_output("decode_step.logits");
    if (block_in_ < 0) return Status::Invalid(m.label() + ": has no tensor \"prompt\" (a KV-cache model needs it)");
    const Shape& chunk = m.tensors()[block_in_].type.shape;
    chunk_ = chunk.size() == 2 ? chunk[1] : 0;
    if (chunk_ < 1 || block % chunk_ != 0)
      return Status::Invalid(m.label() + ": prompt is " + type_str(m.tensors()[block_in_].type) +
                             ", expected i32 [1, C] with C dividing the block of " + std::to_string(block));
    SG_TRY(expect_type(m, block_in_, "prompt", TensorType{{1, chunk_}, DType::i32}));
    SG_TRY(expect_type(m, token_in_, "token", TensorType{{1, 1}, DType::i32}));
    SG_TRY(expect_type(m, pos_, "pos", TensorType{{}, DType::i32}));
    SG_TRY(expect_type(m, block_out_, "prefill.logits", TensorType{{1, chunk_, vocab}, DType::f32}));
    SG_TRY(expect_type(m, token_out_, "decode_step.logits", TensorType{{1, 1, vocab}, DType::f32}));
    logits_ = std::vector<float>(vocab);
    return Status::Ok();
  }

  // The first call reads the whole prompt ids[0, n) (ids holds the block,
  // zero-padded); each later one adds ids[n - 1].
  Status run(const std::vector<int32_t>& ids, int64_t n, bool first, std::span<const float>* z) {
    if (!cached_) {  // infer over the whole block
      SG_TRY(s_->write(block_in_, ids.data(), ids.size() * sizeof(int32_t)));
      SG_TRY(s_->run(prefill_));
      return read_row(n - 1, z);
    }
    if (first) {  // chunk by chunk from position 0: the padding's cache rows are rewritten before any read
      int64_t at = 0;
      for (; at + chunk_ < n; at += chunk_) SG_TRY(prefill_at(ids, at));
      SG_TRY(prefill_at(ids, at));
      return read_row(n - 1 - at, z);
    }
    int32_t pos = static_cast<int32_t>(n - 1);
    SG_TRY(s_->write(pos_, &pos, sizeof pos));
    SG_TRY(s_->write(token_in_, &ids[n - 1], sizeof(int32_t)));
    SG_TRY(s_->run(decode_));
    SG_TRY(s_->read(token_out_, logits_.data(), logits_.size() * sizeof(float)));
    *z = logits_;
    return Status::Ok();
  }

 private:
  // The prompt's chunk ids[at, at + chunk) at position `at`, run through prefill.
  Status prefill_at(const std::vector<int32_t>& ids, int64_t at) {
    int32_t pos = static_cast<int32_t>(at);
    SG_TRY(s_->write(pos_, &pos, sizeof pos));
    SG_TRY(s_->write(block_in_, ids.data() + at, static_cast<size_t>(chunk_) * sizeof(int32_t)));
    return s_->run(prefill_);
  }

  // Row `row` of the last infer / prefill run's logits: only that row is read,
  // since a GPU backend's read of the whole block would move block times the bytes.
  Status read_row(int64_t row, std::span<const float>* z) {
    const uint64_t bytes = sizeof(float) * static_cast<uint64_t>(vocab_);
    SG_TRY(s_->read_range(block_out_, static_cast<uint64_t>(row) * bytes, logits_.data(), bytes));
    *z = logits_;
    return Status::Ok();
  }

  Session* s_ = nullptr;
  bool cached_ = false;
  int64_t chunk_ = 0;  // the prefill program's tokens
  int64_t vocab_ = 0;
  int prefill_ = -1, decode_ = -1, block_in_ = -1, block_out_ = -1, token_in_ = -1, token_out_ = -1, pos_ = -1;
  std::vector<float> logits_;  // the next token's [vocab]
};

}  // namespace

Status generate(Session& s, std::span<const int32_t> prompt, int64_t max_new, int32_t eos, const SamplingOptions& o,
                const std::function<Status(int32_t)>& emit, GenerateStats* stats) {
  int64_t block, vocab;
  SG_TRY(generation_shape(s.model(), &block, &vocab));
  NextLogits next_logits;
  SG_TRY(next_logits.init(s, block, vocab));
  if (prompt.empty()) return Status::Invalid("the prompt has no tokens");
  if (static_cast<int64_t>(prompt.size()) + max_new > block)
    return Status::Invalid("the prompt (" + std::to_string(prompt.size()) + " tokens) and " + std::to_string(max_new) +
                           " new tokens exceed the model's block of " + std::to_string(block));
  std::vector<int32_t> ids(block, 0);
  std::copy(prompt.begin(), prompt.end(), ids.begin());
  int64_t n = static_cast<int64_t>(prompt.size());
  *stats = GenerateStats{n, 0, 0, 0};
  for (int64_t i = 0; i < max_new; ++i) {
    auto t0 = Clock::now();
    std::span<const float> z;
    SG_TRY(next_logits.run(ids, n, i == 0, &z));
    (i == 0 ? stats->prompt_seconds : stats->generate_seconds) += seconds_since(t0);
    float u = rng_uniform(o.seed, 0x52554Eull, static_cast<uint64_t>(i));
    int32_t next = sample_token(z, o, u);
    ids[n++] = next;
    ++stats->generated;
    SG_TRY(emit(next));
    if (next == eos) break;
  }
  return Status::Ok();
}

}  // namespace sgrt
