// Shared by the benches that compile a repository script themselves (bench_train,
// bench_gemm_graph, bench_llama): the script at `path` (relative to the source
// tree) with `set`, under `recipe`; infer_only leaves out gradients and optimizer
// state (frozen weights); opt_state, when given, is the optimizer state level
// (fp32, O1, O2, O3: docs/optimizer.md) in place of the script's.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "compile.h"
#include "dsl.h"
#include "serialize.h"
#include "sgrt/model.h"

namespace sgrt::bench {

inline Status compile_script(const std::string& path, const std::map<std::string, std::string>& set,
                             const std::string& recipe, bool infer_only, std::shared_ptr<const Model>* out,
                             const std::string& opt_state = "") {
  dsl::ScriptOptions opts;
  opts.set = set;
  compiler::Graph g;
  SG_TRY(dsl::load_script(SGRT_SOURCE_DIR "/" + path, opts, &g));
  g.recipe = recipe;
  g.infer_only = infer_only;
  if (!opt_state.empty()) g.optimizer.state = opt_state;
  SG_TRY(compiler::compile(g));
  std::unique_ptr<Model> m;
  SG_TRY(Model::load_bytes(compiler::serialize(g), path, &m));
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace sgrt::bench
