#include "run_gguf.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "gguf_config.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf_weights.h"

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
  if (!a.has("--checkpoint")) return Status::Ok();
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

}  // namespace sgrt::tool
