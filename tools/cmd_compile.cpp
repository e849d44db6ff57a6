#include <cstdio>

#include "commands.h"
#include "model_source.h"
#include "sgrt/file_io.h"
#include "sgrt/model.h"

namespace sgrt::tool {

Status cmd_compile(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (a.positional.size() != 1) return Status::Invalid("compile takes one MODEL.lua");
  const std::string& src = a.positional[0];
  if (!is_script(src)) return Status::Invalid(src + ": compile expects a .lua model script");
  std::string out = a.get("--output");
  if (out.empty()) out = src.substr(0, src.size() - 4) + ".sg";
  std::vector<uint8_t> bytes;
  SG_TRY(compile_script(a, src, &bytes));
  // Check that the runtime accepts what was written before it lands on disk.
  std::unique_ptr<Model> check;
  SG_TRY(Model::load_bytes(bytes, out, &check));
  SG_TRY(write_file_atomic(out, bytes.data(), bytes.size()));
  std::printf("%s: %zu bytes, %zu tensors, arena %.2f MiB\n", out.c_str(), bytes.size(), check->tensors().size(),
              check->arena_bytes() / 1048576.0);
  return Status::Ok();
}

}  // namespace sgrt::tool
