#include "run_gguf.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "gguf_config.h"
#include "model_source.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf_weights.h"
#include "sgrt/peft.h"
#include "sgrt/session.h"

namespace sgrt::tool {

Status check_init_file(const CheckpointMeta& meta) {
  const std::string& file = meta.init_file;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return Status::Invalid("which is gone (" + std::string(std::strerror(errno)) + ")");
  uint64_t id = 0;
  SG_TRY(weights_file_identity(file, &id));
  if (id != meta.init_identity) return Status::Invalid("which has changed since (its metadata or tensor table differs)");
  return Status::Ok();
}

Status gguf_of_run(const Args& a, const char* flag, std::string* path, bool* from_run, const char* otherwise) {
  if (from_run) *from_run = false;
  path->clear();
  if (a.has(flag)) {
    *path = a.get(flag);
    return Status::Ok();
  }
  if (!a.has("--checkpoint")) {
    if (is_gguf(a.get("--init-weights"))) *path = a.get("--init-weights");
    return Status::Ok();
  }
  CheckpointMeta meta;
  SG_TRY(read_checkpoint_meta(a.get("--checkpoint"), &meta));
  if (!is_gguf(meta.init_file)) return Status::Ok();
  if (Status st = check_init_file(meta); !st.ok())
    return Status::Invalid(a.get("--checkpoint") + ": its run started from " + meta.init_file + ", " + st.message() + "; give " +
                           flag + " FILE.gguf" + otherwise);
  *path = meta.init_file;
  if (from_run) *from_run = true;
  return Status::Ok();
}

Status weights_from_gguf(const Args& a, const char* command, bool* yes) {
  if (a.has("--checkpoint") && a.has("--init-weights"))
    return Status::Invalid(std::string(command) + " takes a run's weights (--checkpoint) or a GGUF's (--init-weights), not both");
  *yes = a.has("--init-weights");
  if (*yes && !is_gguf(a.get("--init-weights")))
    return Status::Invalid(std::string(command) + " --init-weights expects a .gguf file, got '" + a.get("--init-weights") + "'");
  if (*yes && (a.positional.size() != 1 || !is_script(a.positional[0])))
    return Status::Invalid(std::string(command) + " --init-weights FILE.gguf takes one MODEL.lua (models/llama.lua)");
  if (a.has("--adapter") && !*yes)
    return Status::Invalid(std::string(command) + " --adapter takes the base from --init-weights FILE.gguf" +
                           (a.has("--checkpoint") ? " (a run's adapters are in its --checkpoint: leave out one of the two)" : ""));
  return Status::Ok();
}

Status load_gguf_model(Args* a, bool infer_only, std::shared_ptr<const Model>* m) {
  std::map<std::string, std::string> config;
  SG_TRY(apply_gguf_config(a, &config));
  if (a->has("--adapter")) SG_TRY(apply_adapter_config(a));
  return load_model(*a, a->positional[0], m, infer_only)
      .with_context("the llama of " + a->get("--init-weights") + " as " + a->positional[0]);
}

std::string weights_source(const Args& a, bool from_gguf, int64_t step) {
  if (!from_gguf) return "step " + std::to_string(step);
  return a.get("--init-weights") + (a.has("--adapter") ? " with the adapters of " + a.get("--adapter") : "");
}

Status init_from_gguf(const Args& a, uint64_t seed, Session& s) {
  const std::string path = a.get("--init-weights");
  std::vector<bool> supplied;
  SG_TRY(weights_file_tensors(s.model(), path, &supplied));
  SG_TRY(s.init(seed, 0, supplied));
  SG_TRY(import_gguf(s, path));
  return a.has("--adapter") ? import_adapters(s, a.get("--adapter")) : Status::Ok();
}

}  // namespace sgrt::tool
