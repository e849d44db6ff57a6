// models/llama.lua shaped small by --set, with random nonzero LoRA adapters:
// the model test_lora_merge.cpp and test_gguf_export.cpp merge and compare.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>

#include "harness.h"

namespace sgrt::test {

inline const std::map<std::string, std::string> kTinyLora = {
    {"n_layer", "2"}, {"n_embd", "32"}, {"n_head", "2"},  {"n_kv_head", "1"}, {"ffn", "64"}, {"vocab", "40"},
    {"block", "8"},   {"batch", "2"},   {"context", "8"}, {"tie", "true"},    {"lora_alpha", "3"}};
constexpr int kLoraRank = 2;
constexpr double kLoraScale = 3.0 / kLoraRank;  // lora_alpha / lora_rank

// rank 0: the same model without LoRA. `extra` overrides kTinyLora's keys.
inline std::shared_ptr<const Model> tiny_lora_llama(int rank, const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> set = kTinyLora;
  set["lora_rank"] = std::to_string(rank);
  for (auto& [k, v] : extra) set[k] = v;
  return compile_model_file("models/llama.lua", set);
}

// Every adapter (B included) random, of the size that makes B A count beside
// the weights (std 0.02); no tokens fed.
inline void randomize_adapters(Session& s) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (const TensorInfo& t : s.model().tensors()) {
    if (t.role != Role::param || t.name.find(".lora_") == std::string::npos) continue;
    std::vector<float> v(static_cast<size_t>(numel(t.type.shape)));
    for (float& x : v) x = u(rng);
    write_vec(s, t.name, v);
  }
}

// The infer program's first output.
inline std::vector<float> infer_logits(Session& s) {
  run(s, "infer");
  return read_f32(s, s.model().tensors()[s.model().outputs()[0].second].name);
}

// max |got - want| / max |want|
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    norm = std::max(norm, std::fabs(static_cast<double>(want[i])));
  }
  REQUIRE(norm > 1e-3);
  return worst / norm;
}

}  // namespace sgrt::test
