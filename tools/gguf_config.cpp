#include "gguf_config.h"

#include <algorithm>

#include "model_source.h"
#include "sgrt/gguf_weights.h"
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

Status apply_adapter_rank(Args* a) {
  const std::string path = a->get("--adapter");
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
