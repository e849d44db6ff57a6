// `sgrt info FILE.gguf`: a GGUF file's header, metadata and tensor table.
#include <cinttypes>
#include <cstdio>
#include <map>

#include "commands.h"
#include "sgrt/gguf.h"

namespace sgrt::tool {

Status print_gguf_info(const std::string& path) {
  std::unique_ptr<GgufFile> f;
  SG_TRY(GgufFile::open(path, &f));
  std::string arch = "?";
  if (f->has("general.architecture")) SG_TRY(f->get_string("general.architecture", &arch));
  std::printf("%s: GGUF v%u, architecture %s, %zu metadata entries, %zu tensors, alignment %" PRIu64
              ", data from byte %" PRIu64 " of %" PRIu64 "\n",
              path.c_str(), f->version(), arch.c_str(), f->metadata().size(), f->tensors().size(), f->alignment(),
              f->data_start(), f->file_size());
  std::printf("metadata:\n");
  for (const GgufKv& kv : f->metadata()) std::printf("  %-40s %s\n", kv.key.c_str(), f->value_summary(kv).c_str());

  std::map<std::string, std::pair<int, uint64_t>> by_type;  // count, bytes
  for (const GgufTensor& t : f->tensors()) {
    auto& [n, bytes] = by_type[gguf_type_name(uint32_t(t.type))];
    ++n;
    bytes += t.bytes;
  }
  std::printf("tensors:");
  for (const auto& [name, nb] : by_type)
    std::printf(" %s x%d (%.2f MiB)", name.c_str(), nb.first, nb.second / 1048576.0);
  std::printf("\n");
  for (const GgufTensor& t : f->tensors()) {
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.shape[i]);
    std::printf("  %-32s %-8s %-16s %10" PRIu64 " bytes at %" PRIu64 "%s\n", t.name.c_str(),
                gguf_type_name(uint32_t(t.type)), shape.c_str(), t.bytes, t.offset,
                gguf_type_supported(t.type) ? "" : "  (not supported)");
  }
  return Status::Ok();
}

}  // namespace sgrt::tool
