#include "model_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "compile.h"
#include "dsl.h"
#include "serialize.h"
#include "sg_generated.h"
#include "sgrt/checkpoint.h"
#include "sgrt/file_io.h"

namespace sgrt::tool {

bool is_script(const std::string& path) { return path.size() > 4 && path.compare(path.size() - 4, 4, ".lua") == 0; }

Status compile_script(const Args& args, const std::string& path, std::vector<uint8_t>* bytes, bool infer_only) {
  dsl::ScriptOptions opts;
  for (auto& [k, v] : args.sets) opts.set[k] = v;
  opts.limits.sandbox = !args.has("--unsafe-lua");
  compiler::Graph g;
  SG_TRY(dsl::load_script(path, opts, &g));
  if (args.has("--recipe") && args.get("--recipe") != g.recipe) {
    g.recipe = args.get("--recipe");
    g.switches = {};  // sg.recipe's switches were the script's recipe's
  }
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
    if (args.has("--recipe") || args.has("--no-plan") || args.has("--opt-level") || args.has("--unsafe-lua") || !args.sets.empty())
      return Status::Invalid(path + ": --recipe, --opt-level, --no-plan, --unsafe-lua and --set apply when compiling a .lua script, not to a compiled .sg");
    SG_TRY(Model::load_file(path, &m));
  }
  *out = std::move(m);
  return Status::Ok();
}

namespace {

constexpr const char* kModelFile = "model.sg";
constexpr const char* kFlagsFile = "model.flags";

// One compile flag as given: ("--recipe", "fp8"), ("--no-plan", ""), ("--set", "k=v").
using Flag = std::pair<std::string, std::string>;

std::vector<Flag> compile_flags(const Args& a) {
  std::vector<Flag> r;
  for (const char* f : {"--recipe", "--opt-level"})
    if (a.has(f)) r.push_back({f, a.get(f)});
  if (a.has("--no-plan")) r.push_back({"--no-plan", ""});
  for (auto& [k, v] : a.sets) r.push_back({"--set", k + "=" + v});
  return r;
}

std::string key_of(const Flag& f) { return f.first == "--set" ? f.second.substr(0, f.second.find('=')) : f.first; }
std::string shown(const Flag& f) { return f.second.empty() ? f.first : f.first + " " + f.second; }

Status read_flags(const std::string& path, std::vector<Flag>* out) {
  std::vector<uint8_t> bytes;
  SG_TRY(read_file(path, &bytes));
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::string line;
  while (std::getline(in, line)) {
    size_t sp = line.find(' ');
    Flag f{line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1)};
    bool known = f.first == "--recipe" || f.first == "--opt-level" || f.first == "--no-plan" ||
                 (f.first == "--set" && f.second.find('=') != std::string::npos && f.second[0] != '=');
    if (!known) return Status::Invalid(path + ": unknown line '" + line + "'");
    out->push_back(f);
  }
  return Status::Ok();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> checkpoint_model_files(const Args& a, const Model& m) {
  std::string flags;
  for (const Flag& f : compile_flags(a)) flags += shown(f) + "\n";
  std::span<const uint8_t> sg = m.file_bytes();
  return {{kModelFile, std::string(sg.begin(), sg.end())}, {kFlagsFile, flags}};
}

namespace {

// What the two loaders below share. No checkpoint flags (no --checkpoint, or a
// folder without model.flags): *plain. A compiled model (named, or the
// folder's): *compiled. A script: the checkpoint's flags adopted into *a and,
// when `reshape` and a free key was given another value, *as_saved: the
// arguments the checkpoint was trained with.
Status adopt_checkpoint_flags(Args* a, const std::string& what, bool reshape, const std::vector<std::string>& free_keys,
                              bool* plain, std::unique_ptr<Model>* compiled, std::unique_ptr<Args>* as_saved) {
  *plain = false;
  if (a->positional.size() > 1) return Status::Invalid("takes one " + what);
  const std::string dir = a->get("--checkpoint");
  if (dir.empty() || !exists(dir + "/" + kFlagsFile)) {
    if (a->positional.empty())
      return Status::Invalid(dir.empty() ? "needs " + what + " or --checkpoint DIR"
                                         : dir + ": holds no " + kModelFile + " (written by sgrt train --checkpoint); name the model");
    *plain = true;
    return Status::Ok();
  }
  const std::string flags_path = dir + "/" + kFlagsFile;
  std::vector<Flag> recorded;
  SG_TRY(read_flags(flags_path, &recorded));
  std::vector<Flag> given = compile_flags(*a);
  bool script = !a->positional.empty() && is_script(a->positional[0]);
  if (!script) SG_TRY(Model::load_file(a->positional.empty() ? dir + "/" + kModelFile : a->positional[0], compiled));
  std::vector<std::string> reshaped;  // free keys given a value other than the checkpoint's
  for (const Flag& g : given) {
    const Flag* r = nullptr;
    for (const Flag& f : recorded)
      if (key_of(f) == key_of(g)) r = &f;
    const bool free = reshape && std::find(free_keys.begin(), free_keys.end(), key_of(g)) != free_keys.end();
    if (free && script && (!r || r->second != g.second)) {
      reshaped.push_back(key_of(g));
      continue;
    }
    if (r && r->second != g.second)
      return Status::Invalid(shown(g) + " conflicts with the checkpoint's " + shown(*r) + " (" + flags_path + ")" +
                             (free ? "; another " + key_of(g) + " needs the script, to compile it" : ""));
    if (r || script) continue;
    const auto* recipe = (*compiled)->root().recipe();
    if (g.first == "--recipe" && recipe && recipe->str() == g.second) continue;
    return Status::Invalid(shown(g) + " conflicts with the checkpoint's model (" + (*compiled)->label() + ", recipe " +
                           (recipe ? recipe->str() : "?") + "), compiled without it; give the script to compile another");
  }
  if (!script) return Status::Ok();
  for (const Flag& r : recorded) {  // adopt what the training run was compiled with
    bool given_too = false;
    for (const Flag& g : given) given_too |= key_of(g) == key_of(r);
    if (given_too) continue;
    if (r.first == "--set") a->sets.push_back({key_of(r), r.second.substr(r.second.find('=') + 1)});
    else a->flags[r.first] = r.second.empty() ? "1" : r.second;
  }
  if (!reshaped.empty()) {  // the script as the checkpoint was trained
    *as_saved = std::make_unique<Args>(*a);
    std::erase_if((*as_saved)->sets, [&](const auto& kv) { return std::find(reshaped.begin(), reshaped.end(), kv.first) != reshaped.end(); });
    for (const Flag& r : recorded)
      if (r.first == "--set" && std::find(reshaped.begin(), reshaped.end(), key_of(r)) != reshaped.end())
        (*as_saved)->sets.push_back({key_of(r), r.second.substr(r.second.find('=') + 1)});
  }
  return Status::Ok();
}

}  // namespace

Status load_checkpoint_model(Args* a, const std::string& what, std::shared_ptr<const Model>* out, uint64_t* saved_step,
                             const std::vector<std::string>& free_keys) {
  if (saved_step) *saved_step = 0;
  bool plain;
  std::unique_ptr<Model> compiled;
  std::unique_ptr<Args> as_saved;
  SG_TRY(adopt_checkpoint_flags(a, what, saved_step != nullptr, free_keys, &plain, &compiled, &as_saved));
  if (compiled) {
    *out = std::move(compiled);
    return Status::Ok();
  }
  if (as_saved) {  // the training step the checkpoint must come from
    std::shared_ptr<const Model> m;
    SG_TRY(load_model(*as_saved, a->positional[0], &m));
    *saved_step = step_identity(*m);
  }
  return load_model(*a, a->positional[0], out);
}

Status load_inference_model(Args* a, const std::string& what, const std::vector<std::string>& free_keys,
                            std::shared_ptr<const Model>* out, std::shared_ptr<const Model>* trained) {
  bool plain;
  std::unique_ptr<Model> compiled;
  std::unique_ptr<Args> as_saved;
  SG_TRY(adopt_checkpoint_flags(a, what, true, free_keys, &plain, &compiled, &as_saved));
  if (compiled || plain) {
    if (compiled) *out = std::move(compiled);
    else SG_TRY(load_model(*a, a->positional[0], out));
    *trained = *out;
    return Status::Ok();
  }
  SG_TRY(load_model(as_saved ? *as_saved : *a, a->positional[0], trained));
  return load_model(*a, a->positional[0], out, /*infer_only=*/true);
}

std::vector<bool> checkpoint_supplied(const Args& a, const Model& m, const Model* trained) {
  return a.has("--checkpoint") ? checkpoint_tensors(m, trained ? *trained : m) : std::vector<bool>{};
}

}  // namespace sgrt::tool
