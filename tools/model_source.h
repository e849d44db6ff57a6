// Loads a model for a command: a .sg file as is, or a .lua script compiled in
// memory (with --recipe and --set applied). infer_only: a script compiles to
// its eval and infer programs alone (frozen weights: no gradients, no
// optimizer state in the arena).
#pragma once
#include <memory>

#include "args.h"
#include "sgrt/model.h"

namespace sgrt::tool {

bool is_script(const std::string& path);
Status compile_script(const Args& args, const std::string& path, std::vector<uint8_t>* bytes, bool infer_only = false);
Status load_model(const Args& args, const std::string& path, std::shared_ptr<const Model>* out, bool infer_only = false);

}  // namespace sgrt::tool
