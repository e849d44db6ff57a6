// Loads a model for a command: a .sg file as is, or a .lua script compiled in
// memory (with --recipe and --set applied).
#pragma once
#include <memory>

#include "args.h"
#include "sgrt/model.h"

namespace sgrt::tool {

bool is_script(const std::string& path);
Status compile_script(const Args& args, const std::string& path, std::vector<uint8_t>* bytes);
Status load_model(const Args& args, const std::string& path, std::shared_ptr<const Model>* out);

}  // namespace sgrt::tool
