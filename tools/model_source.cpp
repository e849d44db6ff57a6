#include "model_source.h"

#include "compile.h"
#include "dsl.h"
#include "serialize.h"

namespace sgrt::tool {

bool is_script(const std::string& path) { return path.size() > 4 && path.compare(path.size() - 4, 4, ".lua") == 0; }

Status compile_script(const Args& args, const std::string& path, std::vector<uint8_t>* bytes, bool infer_only) {
  dsl::ScriptOptions opts;
  for (auto& [k, v] : args.sets) opts.set[k] = v;
  compiler::Graph g;
  SG_TRY(dsl::load_script(path, opts, &g));
  if (args.has("--recipe")) g.recipe = args.get("--recipe");
  if (args.has("--no-plan")) g.plan_scales = false;
  if (args.has("--opt-level")) g.optimizer.state = args.get("--opt-level");
  g.infer_only = infer_only;
  SG_TRY(compiler::compile(g).with_context(path));
  *bytes = compiler::serialize(g);
  return Status::Ok();
}

Status load_model(const Args& args, const std::string& path, std::shared_ptr<const Model>* out, bool infer_only) {
  std::unique_ptr<Model> m;
  if (is_script(path)) {
    std::vector<uint8_t> bytes;
    SG_TRY(compile_script(args, path, &bytes, infer_only));
    SG_TRY(Model::load_bytes(std::move(bytes), path, &m));
  } else {
    if (args.has("--recipe") || args.has("--no-plan") || args.has("--opt-level") || !args.sets.empty())
      return Status::Invalid(path + ": --recipe, --opt-level, --no-plan and --set apply when compiling a .lua script, not to a compiled .sg");
    SG_TRY(Model::load_file(path, &m));
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace sgrt::tool
