#include "gguf_config.h"

#include <algorithm>

#include "model_source.h"
#include "sgrt/gguf_weights.h"

namespace sgrt::tool {

bool is_gguf(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0; }

Status apply_gguf_config(Args* a, std::map<std::string, std::string>* config) {
  const std::string path = a->get("--init-weights");
  if (!is_gguf(path) || a->positional.empty() || !is_script(a->positional[0])) return Status::Ok();
  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  SG_TRY(llama_config(*f, config));
  for (auto& [k, v] : *config)
    if (std::none_of(a->sets.begin(), a->sets.end(), [&](auto& s) { return s.first == k; })) a->sets.push_back({k, v});
  return Status::Ok();
}

}  // namespace sgrt::tool
