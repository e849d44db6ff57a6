// The Lua front end: runs a model script with the `sg` module and returns the
// graph it declared. Compiler side only; the runtime never links Lua.
#pragma once
#include <map>
#include <string>

#include "graph.h"
#include "sandbox.h"

namespace sgrt::dsl {

struct ScriptOptions {
  std::map<std::string, std::string> set;  // --set k=v, applied by sg.config
  LuaLimits limits;                        // the sandbox (sandbox.h); --unsafe-lua turns it off
};

// Errors name the script and line ("models/mlp.lua:12: ...").
Status load_script(const std::string& path, const ScriptOptions& opts, compiler::Graph* g);

}  // namespace sgrt::dsl
