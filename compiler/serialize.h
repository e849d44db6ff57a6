// Writes a compiled graph as a .sg file (see ir/include/sgrt/model_file.h).
#pragma once
#include <string>
#include <vector>

#include "graph.h"

namespace sgrt::compiler {

std::vector<uint8_t> serialize(const Graph& g);
Status write_model(const Graph& g, const std::string& path);

}  // namespace sgrt::compiler
