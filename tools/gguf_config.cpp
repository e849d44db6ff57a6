#include "gguf_config.h"

#include <algorithm>
#include <cstdio>

#include "model_source.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/peft.h"
#include "sgrt/safetensors.h"

namespace sgrt::tool {

bool is_gguf(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0; }

namespace {

void set_default(Args* a, const std::string& key, const std::string& value) {
  if (std::none_of(a->sets.begin(), a->sets.end(), [&](auto& s) { return s.first == key; })) a->sets.push_back({key, value});
}

}  // namespace

Status apply_gguf_config(Args* a, std::map<std::string, std::string>* config) {
  const std::string path = a->get("--init-weights");
  if (!is_gguf(path) || a->positional.empty() || !is_script(a->positional[0])) return Status::Ok();
  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  SG_TRY(llama_config(*f, config));
  for (auto& [k, v] : *config) set_default(a, k, v);
  return Status::Ok();
}

Status apply_adapter_config(Args* a) {
  const std::string path = a->get("--adapter");
  if (is_peft_folder(path)) {
    PeftConfig c;
    SG_TRY(read_peft_config(path, &c));
    static const std::pair<const char*, const char*> kTargets[] = {
        {"q_proj", "q"}, {"k_proj", "k"}, {"v_proj", "v"}, {"o_proj", "o"}, {"gate_proj", "gate"}, {"up_proj", "up"}, {"down_proj", "down"}};
    std::string targets;
    for (const std::string& t : c.target_modules) {
      auto it = std::find_if(std::begin(kTargets), std::end(kTargets), [&](auto& k) { return t == k.first; });
      if (it == std::end(kTargets))
        return Status::Invalid(path + "/adapter_config.json: target module '" + t +
                               "' is none of models/llama.lua's projections (q_proj, k_proj, v_proj, o_proj, gate_proj, "
                               "up_proj, down_proj)");
      targets += (targets.empty() ? "" : ",") + std::string(it->second);
    }
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%.17g", c.alpha);
    set_default(a, "lora_rank", std::to_string(c.rank));
    set_default(a, "lora_alpha", alpha);
    set_default(a, "lora_targets", targets);
    return Status::Ok();
  }
  std::vector<SafeTensor> file;
  SG_TRY(read_safetensors(path, &file));
  for (const SafeTensor& t : file)
    if (t.name.ends_with(".lora_A") && t.shape.size() == 2) {
      set_default(a, "lora_rank", std::to_string(t.shape[0]));
      return Status::Ok();
    }
  return Status::Invalid(path + ": holds no LoRA adapter (NAME.lora_A); write one with sgrt export-weights --trained");
}

}  // namespace sgrt::tool
