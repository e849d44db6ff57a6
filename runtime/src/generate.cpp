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
  *logits = -1;
  for (auto& [name, id] : m.outputs())
    if (name == "logits") *logits = id;
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

Status generate(Session& s, std::span<const int32_t> prompt, int64_t max_new, int32_t eos, const SamplingOptions& o,
                const std::function<Status(int32_t)>& emit, GenerateStats* stats) {
  int tokens, logits, prog;
  int64_t block, vocab;
  SG_TRY(find_io(s.model(), &tokens, &logits));
  SG_TRY(generation_shape(s.model(), &block, &vocab));
  SG_TRY(s.find_program("infer", &prog));
  if (prompt.empty()) return Status::Invalid("the prompt has no tokens");
  if (static_cast<int64_t>(prompt.size()) + max_new > block)
    return Status::Invalid("the prompt (" + std::to_string(prompt.size()) + " tokens) and " + std::to_string(max_new) +
                           " new tokens exceed the model's block of " + std::to_string(block));
  std::vector<int32_t> ids(block, 0);
  std::copy(prompt.begin(), prompt.end(), ids.begin());
  int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<float> out(block * vocab);
  *stats = GenerateStats{n, 0, 0, 0};
  for (int64_t i = 0; i < max_new; ++i) {
    auto t0 = Clock::now();
    SG_TRY(s.write(tokens, ids.data(), ids.size() * sizeof(int32_t)));
    SG_TRY(s.run(prog));
    SG_TRY(s.read(logits, out.data(), out.size() * sizeof(float)));
    (i == 0 ? stats->prompt_seconds : stats->generate_seconds) += seconds_since(t0);
    float u = rng_uniform(o.seed, 0x52554Eull, static_cast<uint64_t>(i));
    int32_t next = sample_token(std::span<const float>(out.data() + (n - 1) * vocab, vocab), o, u);
    ids[n++] = next;
    ++stats->generated;
    SG_TRY(emit(next));
    if (next == eos) break;
  }
  return Status::Ok();
}

}  // namespace sgrt
