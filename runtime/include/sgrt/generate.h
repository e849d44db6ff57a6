// Text generation from a language model whose infer program maps an i32
// input "tokens" [1, block] to an output "logits" [1, block, vocab] (causal:
// the logits at position t see tokens 0..t only). With a KV cache, the model
// also has programs "prefill" (input "prompt" [1, C] -> "prefill.logits"
// [1, C, vocab], C dividing the block) and "decode_step" (input "token" [1, 1]
// -> "decode_step.logits" [1, 1, vocab]), both reading the position of their
// first token from the input "pos" i32[]: the prompt runs once, C tokens at a
// time, then one token per step (docs/llama.md). Without them every new token
// reruns infer over the whole block.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sgrt/session.h"

namespace sgrt {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax)
  int64_t top_k = 0;       // 0: the whole vocabulary
  double top_p = 1;        // nucleus: the smallest top set whose probability reaches top_p
  uint64_t seed = 1;
};

// The next token from logits z [vocab]; u uniform in [0, 1).
int32_t sample_token(std::span<const float> z, const SamplingOptions& o, float u);

struct GenerateStats {
  int64_t prompt_tokens = 0, generated = 0;
  double prompt_seconds = 0, generate_seconds = 0;  // the first forward, the later ones
};

// Appends up to max_new tokens to `prompt`, calling emit(id) for each; stops
// after eos (emitted too) when eos >= 0. The prompt plus the new tokens must
// fit the model's block.
Status generate(Session& s, std::span<const int32_t> prompt, int64_t max_new, int32_t eos, const SamplingOptions& o,
                const std::function<Status(int32_t)>& emit, GenerateStats* stats);

// The tokens input's block (its second dimension) and the vocabulary (the
// logits' last dimension), checking the two tensors' types.
Status generation_shape(const Model& m, int64_t* block, int64_t* vocab);

}  // namespace sgrt
