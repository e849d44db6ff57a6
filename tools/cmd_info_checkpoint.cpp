// `sgrt info DIR`: a checkpoint folder's run (step, planned total, seed, data
// position), the file it started from and whether that is still there
// unchanged, and the model beside it (model.sg, model.flags).
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "run_gguf.h"
#include "sgrt/checkpoint.h"
#include "sgrt/file_io.h"

namespace sgrt::tool {
namespace {

// The file's size, or -1 when it is not there.
int64_t size_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

Status print_checkpoint_info(const std::string& dir) {
  CheckpointMeta c;
  SG_TRY(read_checkpoint_meta(dir, &c));
  const std::string file = dir + "/checkpoint.sgck";
  std::printf("%s: step %" PRId64, file.c_str(), c.step);
  if (c.total_steps > 0) std::printf(" of %" PRId64, c.total_steps);
  std::printf(", seed %" PRIu64, c.seed);
  if (c.examples_per_step > 0) std::printf(", %" PRId64 " examples a step", c.examples_per_step);
  if (c.batches_per_epoch > 0) std::printf(", %" PRId64 " steps an epoch", c.batches_per_epoch);
  std::printf(", %s\n", mb(size_of(file)).c_str());
  if (c.init_file.empty()) {
    std::printf("started from: its initializers (or not recorded: a checkpoint of format 4 or older)\n");
  } else {
    Status st = check_init_file(c);
    std::printf("started from: %s%s\n", c.init_file.c_str(), st.ok() ? " (there, its header unchanged)" : (", " + st.message()).c_str());
  }
  const int64_t sg = size_of(dir + "/model.sg");
  if (sg < 0) {
    std::printf("model: none beside it (a checkpoint saved through the library or the C API; name the model)\n");
    return Status::Ok();
  }
  std::vector<uint8_t> flags;
  SG_TRY(read_file(dir + "/model.flags", &flags));
  std::string line;
  for (uint8_t ch : flags) line += ch == '\n' ? ' ' : static_cast<char>(ch);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::printf("model: %s/model.sg (%s; sgrt info %s/model.sg shows it), compiled with %s\n", dir.c_str(), mb(sg).c_str(),
              dir.c_str(), line.empty() ? "no flags" : line.c_str());
  return Status::Ok();
}

}  // namespace sgrt::tool
